#!/bin/bash
# On the GPU machine, after bench.sh has built PACKAGE (/tmp/bench-PACKAGE): Nsight Compute's full section set for
# the first COUNT launches of the kernels whose name matches REGEX in one eager run_images of PACKAGE (the paths of
# bench.sh's row "carve <prec>", as ncu.sh), then two text reports: $OUT/detail-TAG.txt (the details page: speed of
# light, occupancy, warp states with their stall reasons, per launch) and $OUT/source-TAG.csv (the source page:
# each SASS instruction's executed count and warp-state samples, the hot loop of a latency-bound kernel).
#   bash DIR/ncu_detail.sh PACKAGE REGEX [COUNT] [TAG]     e.g. fp16-b1 topk_one_block 2 topk
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
p=$1 regex=$2 count=${3:-1} tag=${4:-$2}
export LD_LIBRARY_PATH=$D/stb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$PATH:/usr/local/cuda/bin
paths=--no-tune
[ -f "$OUT/tactics-$p.bin" ] && paths="--tactics $OUT/tactics-$p.bin"
rep=/tmp/ncu-detail-$tag
rm -f "$rep.ncu-rep"
timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none --set full --import-source yes --kernel-name "regex:$regex" \
  --launch-count "$count" -o "$rep" "/tmp/bench-$p/build/bench_main" "$D/bus.png" --runs 0 --rows /tmp/ncu-rows.f32 \
  $paths > "$OUT/detail-$tag.txt" 2>&1
echo "ncu rc=$?" >> "$OUT/detail-$tag.txt"
ncu --import "$rep.ncu-rep" --page details >> "$OUT/detail-$tag.txt" 2>&1
ncu --import "$rep.ncu-rep" --page source --csv --print-source sass > "$OUT/source-$tag.csv" 2>&1
tail -3 "$OUT/detail-$tag.txt"
