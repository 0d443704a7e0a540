#!/bin/sh
# Builds test_igemm and bench_igemm (tests/cuda) with nvcc for this machine's GPU (objects in parallel) and
# runs both: the fused implicit-GEMM convolution's checks on the hardware (with each case's error against its
# tolerance) and its device time against the cuBLAS path on yolo26n's shapes. Needs nvcc, cuBLAS, a GPU.
#   sh tests/cuda/gpu_igemm_check.sh [build dir (default build/igemm-gpu)]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/igemm-gpu}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
arch=${CARVE_CUDA_ARCH:-native}
mkdir -p "$out"
cd "$root"
cc="$nvcc -std=c++17 -O2 -arch=$arch -DCARVE_RT_NO_THREADS -Iruntime -Itests/cuda"
srcs="runtime/carve_cuda_ops.cu runtime/carve_cuda_f16.cu runtime/carve_cuda_topk.cu runtime/carve_cuda_pre.cu
  runtime/carve_cuda_nms.cu runtime/carve_rt.c runtime/carve_post.c runtime/carve_nms.c runtime/carve_pre.c
  runtime/carve_isa.c runtime/carve_epilogue.c runtime/carve_attention.c runtime/carve_layout.c runtime/carve_mask.c
  runtime/carve_weights.c"
objs=""
for f in $srcs; do objs="$objs $out/$(basename "$f").o"; done
# the objects, JOBS at a time (default: the CPUs)
printf '%s\n' $srcs tests/cuda/test_igemm.cu tests/cuda/bench_igemm.cu |
  xargs -P "${JOBS:-$(nproc)}" -I{} sh -c '$1 -c "$2" -o "$3/$(basename "$2").o" > "$3/$(basename "$2").log" 2>&1 ||
    { echo "== $2: nvcc failed"; cat "$3/$(basename "$2").log"; exit 1; }' sh "$cc" {} "$out"
$cc "$out/test_igemm.cu.o" $objs -lcublas -o "$out/test_igemm"
$cc "$out/bench_igemm.cu.o" $objs -lcublas -o "$out/bench_igemm"
nvidia-smi -L >/dev/null 2>&1 || { echo "no NVIDIA GPU here: built $out/test_igemm, $out/bench_igemm, not run" >&2; exit 0; }
failed=0
"$out/test_igemm" || failed=1
"$out/bench_igemm" || failed=1
exit $failed
