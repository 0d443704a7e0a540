#!/bin/bash
# The whole GPU check of issue 20 in one command, for the `device` tool's one prepared call (run from the
# repository root on the GPU machine, the carry made by tools/gpu_carry/prepare_bench.sh):
#   OUT=$OUT bash build/bench_carry/device_run.sh            (device tool: carry ["build/bench_carry"], timeout 600 s)
# Steps, each under its own time limit so that a slow one leaves the others' results in $OUT:
#   1. bench.sh (280 s): the speed table ($OUT/table.md, bench.jsonl, profile.jsonl with each convolution's timed
#      paths, rows.tar, the tactic files), its log in $OUT/bench.log;
#   2. ncu.sh fp16-b1 and fp16-b1:--fused-conv (2 x 70 s): each kernel's time ($OUT/ncu.txt);
#   3. tests/cuda/gpu_kernel_tests.sh for CARVE_CUDA_ARCH (default sm_90) (140 s): the runtime's kernel tests and
#      bench_igemm (every fused tile per shape) on the GPU ($OUT/kernel_tests.log). At most 570 s in all.
# Prints $OUT/table.md and each step's exit status at the end.
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin
t0=$(date +%s)
timeout 280 bash "$D/bench.sh" > "$OUT/bench.log" 2>&1
bench=$?
echo "bench.sh: rc $bench at $(( $(date +%s) - t0 )) s"
NCU_TIMEOUT=70 timeout 150 bash "$D/ncu.sh" fp16-b1 fp16-b1:--fused-conv > "$OUT/ncu.log" 2>&1
ncu=$?
echo "ncu.sh: rc $ncu at $(( $(date +%s) - t0 )) s"
kt=-1
if [ -f tests/cuda/gpu_kernel_tests.sh ]; then
  CARVE_CUDA_ARCH=${CARVE_CUDA_ARCH:-sm_90} timeout 140 sh tests/cuda/gpu_kernel_tests.sh /tmp/gkt \
    > "$OUT/kernel_tests.log" 2>&1
  kt=$?
fi
echo "gpu_kernel_tests.sh: rc $kt at $(( $(date +%s) - t0 )) s"
cat "$OUT/table.md" 2>/dev/null || tail -30 "$OUT/bench.log"
