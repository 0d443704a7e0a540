#!/bin/bash
# On the GPU machine, after bench.sh has built PACKAGE (/tmp/bench-PACKAGE): Nsight Compute's full section set for
# the first COUNT launches of the kernels whose name matches REGEX in one eager run_images of PACKAGE (the paths of
# bench.sh's row "carve <prec>", as ncu.sh), then two text reports: $OUT/detail-TAG.txt (the details page: speed of
# light, occupancy, warp states with their stall reasons, per launch) and $OUT/source-TAG.csv (the source page:
# each source line's and SASS instruction's executed count and warp-state samples, the hot loop of a latency-bound
# kernel; the lines come from the builds' -lineinfo, wrap_build.sh), summed per line in $OUT/lines-TAG.txt
# (ncu_lines.py).
#   bash DIR/ncu_detail.sh PACKAGE REGEX [COUNT] [TAG]     e.g. fp16-b1 topk_one_block 2 topk
# TACTICS=FILE: the convolutions' paths from FILE (bench_main --tactics) instead of the row's; GRID="(13, 4,": first a
# quick pass over every matching launch (durations and grids: $OUT/launches-TAG.csv), then the full set on the longest
# launch whose grid starts so (e.g. a 20 x 20 layer's 32 x 32 tiles over 128 channels).
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
p=$1 regex=$2 count=${3:-1} tag=${4:-$2}
export LD_LIBRARY_PATH=$D/stb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$PATH:/usr/local/cuda/bin
paths=--no-tune
[ -f "$OUT/tactics-$p.bin" ] && paths="--tactics $OUT/tactics-$p.bin"
[ -n "${TACTICS:-}" ] && paths="--tactics $TACTICS"
exe=/tmp/bench-$p/build/bench_main
skip=0
if [ -n "${GRID:-}" ]; then
  timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --kernel-name "regex:$regex" "$exe" "$D/bus.png" --runs 0 --rows /tmp/ncu-rows.f32 $paths \
    > "$OUT/launches-$tag.csv" 2>/dev/null
  skip=$(python3 - "$OUT/launches-$tag.csv" "$GRID" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, rows = rows[0], rows[1:]
g, d = head.index("Grid Size"), head.index("Metric Value")
hits = [(float(r[d].replace(",", "")), i) for i, r in enumerate(rows) if r[g].startswith(sys.argv[2])]
print(max(hits)[1] if hits else 0)
PY
)
fi
rep=/tmp/ncu-detail-$tag
rm -f "$rep.ncu-rep"
timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --set full --import-source yes --kernel-name "regex:$regex" \
  --launch-skip "$skip" --launch-count "$count" -o "$rep" "$exe" "$D/bus.png" --runs 0 --rows /tmp/ncu-rows.f32 \
  $paths > "$OUT/detail-$tag.txt" 2>&1
echo "ncu rc=$?" >> "$OUT/detail-$tag.txt"
ncu --import "$rep.ncu-rep" --page details >> "$OUT/detail-$tag.txt" 2>&1
ncu --import "$rep.ncu-rep" --page source --csv --print-source cuda,sass > "$OUT/source-$tag.csv" 2>&1
python3 "$D/ncu_lines.py" "$OUT/source-$tag.csv" > "$OUT/lines-$tag.txt" 2>&1  # per source line, the busiest first
tail -3 "$OUT/detail-$tag.txt"
