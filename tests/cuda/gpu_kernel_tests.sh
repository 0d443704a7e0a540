#!/bin/sh
# Builds the cuda runtime's kernel tests (test_topk, test_ops, test_pre, test_nms, test_f16, test_igemm, test_select64)
# with nvcc for the GPU of this machine and runs them: the same tests ctest runs under the emulation header,
# here on real hardware, then tests/cuda/bench_igemm.cu (microseconds per convolution of yolo26n's shapes, the cuBLAS
# path against the fused kernel, TF32 and fp16: the figures a choice between the two needs; printed, never a failure).
# Needs nvcc, cuBLAS and an NVIDIA GPU; not part of CI. The builds run in parallel, the
# tests one after the other; exits non-zero if a build or a test fails.
#   sh tests/cuda/gpu_kernel_tests.sh [build dir (default build/cuda-gpu)]
#   GKT_STEP=build / GKT_STEP=run   only the builds (e.g. beside other builds), or only the runs of the builds there
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/cuda-gpu}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
arch=${CARVE_CUDA_ARCH:-native}
tests="topk ops pre nms f16 igemm select64"
builds="$tests bench_igemm"
step=${GKT_STEP:-all}
mkdir -p "$out"
rt="$root/runtime"
[ "$step" = run ] && builds=""
for t in $builds; do
  src=$root/tests/cuda/test_$t.cu
  [ "$t" = bench_igemm ] && src=$root/tests/cuda/bench_igemm.cu
  topk="$rt"/carve_cuda_topk.cu
  [ "$t" = select64 ] && topk=""  # test_select64.cu includes it
  ( "$nvcc" -std=c++17 -O2 -arch="$arch" -DCARVE_RT_NO_THREADS -I"$rt" -I"$root/tests/cuda" \
      "$src" "$rt"/carve_cuda_ops.cu $topk "$rt"/carve_cuda_pre.cu \
      "$rt"/carve_cuda_nms.cu "$rt"/carve_cuda_f16.cu \
      "$rt"/carve_rt.c "$rt"/carve_post.c "$rt"/carve_nms.c "$rt"/carve_pre.c "$rt"/carve_isa.c "$rt"/carve_epilogue.c \
      "$rt"/carve_attention.c "$rt"/carve_layout.c "$rt"/carve_mask.c "$rt"/carve_weights.c \
      -lcublas -o "$out/test_$t" > "$out/test_$t.log" 2>&1
    echo $? > "$out/test_$t.rc" ) &
done
wait
failed=0
for t in $tests; do
  if [ "$(cat "$out/test_$t.rc" 2>/dev/null)" != 0 ]; then
    echo "== test_$t: the build (nvcc -arch=$arch) failed:"; cat "$out/test_$t.log"; failed=1
  fi
done
[ $failed = 0 ] || exit 1
[ "$step" = build ] && exit 0
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no NVIDIA GPU here (nvidia-smi -L failed): built $(echo $tests | sed 's/[a-z0-9]*/test_&/g') in $out, not run" >&2
  exit 0
fi
for t in $tests; do
  echo "== test_$t (nvcc -arch=$arch)"
  "$out/test_$t" || { echo "== test_$t: FAILED"; failed=1; }
done
echo "== bench_igemm (nvcc -arch=$arch): microseconds per convolution, cuBLAS path vs fused"
if [ "$(cat "$out/test_bench_igemm.rc" 2>/dev/null)" = 0 ]; then
  "$out/test_bench_igemm" || echo "== bench_igemm: failed (not a test)"
else
  echo "== bench_igemm: the build failed (not a test):"; tail -n 20 "$out/test_bench_igemm.log"
fi
exit $failed
