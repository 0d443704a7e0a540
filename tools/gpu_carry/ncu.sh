#!/bin/bash
# On the GPU machine, after bench.sh has built its packages (/tmp/bench-<package>): each kernel's duration in one
# eager run_images (Nsight Compute, gpu__time_duration only; --clock-control none leaves the clocks as found; the
# convolution paths of bench.sh's tuned row, nothing timed at create),
# for the configurations named, then tools/gpu_carry/ncu_sum.py's summary of each.
#   bash DIR/ncu.sh PACKAGE[:OPTION] ...      e.g. fp16-b1 fp16-b1:--fused-conv tf32-b1
# Output: $OUT/ncu.txt (the summaries; the CSVs stay in /tmp/ncu-*.csv).
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
export LD_LIBRARY_PATH=$D/stb/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PATH=$PATH:/usr/local/cuda/bin
: > "$OUT/ncu.txt"
for spec in "$@"; do
  p=${spec%%:*} opt=""
  [ "$spec" != "$p" ] && opt=${spec#*:}
  csv=/tmp/ncu-$p${opt//-/_}.csv
  # the convolutions' paths bench.sh's row "carve <prec>" timed (its --save-tactics), so that create times nothing
  # and the launches profiled are the run's; without that file, no timing (--no-tune: the cuBLAS path's rule)
  paths=--no-tune
  [ -f "$OUT/tactics-$p.bin" ] && paths="--tactics $OUT/tactics-$p.bin"
  [[ "$opt" == *--fused-conv* || "$opt" == *tune* || "$opt" == *--tactics* ]] && paths=""
  timeout "${NCU_TIMEOUT:-150}" ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    --launch-count 600 "/tmp/bench-$p/build/bench_main" "$D/bus.png" --runs 0 --rows /tmp/ncu-rows.f32 $opt $paths \
    > "$csv" 2> "$csv.err"
  { echo "## $p $opt $paths (ncu rc=$?)"; python3 "$D/ncu_sum.py" "$csv" --top 30 || tail -5 "$csv.err"; echo; } >> "$OUT/ncu.txt"
done
cat "$OUT/ncu.txt"
