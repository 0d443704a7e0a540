#!/bin/sh
# Checks tools/gpu_carry/prepare_bench.sh + bench.sh without a GPU (about 3 minutes on 2 cores; not in CI):
# a carry at 64x64 with batches 1 and 2, built with the emulation header, PyTorch eager on the CPU, then the
# table must hold carve TF32, carve strict-fp32 and PyTorch rows for both batches. Speed figures are the
# emulator's and mean nothing.
#   tools/gpu_carry/test_bench.sh CHECKPOINT [DIR]     (CHECKPOINT: a yolo26n .pt; DIR default build/bench_test)
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
CK=$1 DIR=${2:-$here/build/bench_test}
"$here/tools/gpu_carry/prepare_bench.sh" "$DIR" "$CK" 64 "1 2"
out=$DIR/out-emulated
rm -rf "$out"
EMULATE="$here/tests/cuda/cuda_emu.h" OUT="$out" bash "$DIR/bench.sh"
for row in "| carve tf32 | 1 |" "| carve strict-fp32 | 1 |" "| carve tf32 | 2 |" "| carve strict-fp32 | 2 |" \
           "| pytorch eager fp32-tf32 | 1 |" "| pytorch eager fp32-tf32 | 2 |"; do
  grep -qF "$row" "$out/table.md" || { echo "test_bench: FAIL: no row '$row' in $out/table.md"; exit 1; }
done
echo "test_bench: ok (the script runs up to the GPU step; figures are the emulator's)"
