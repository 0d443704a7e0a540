#!/bin/sh
# Compiles .cu files with nvcc for every architecture of CARVE_CUDA_ARCHITECTURES
# (tests/cuda/tests.cmake), warnings as errors, a kernel's registers spilled to local memory included (ptxas
# -warn-spills: the fused e2e head sits at the 64 registers of a 1024-thread block); no GPU needed.
#   nvcc_check.sh <nvcc or ""> "<include dirs>" <output dir> "<archs>" file.cu...
#   NVCC_FRONT=1 nvcc_check.sh ...   -cuda instead of -c: nvcc's front end and the device code's compile (cudafe++,
#                                    cicc, ptxas), the host side only preprocessed, not compiled: the kernel tests,
#                                    which CI builds with the host compiler through the emulation header and
#                                    tests/cuda/gpu_kernel_tests.sh with nvcc on a GPU machine, in seconds
# Exits 77 (ctest SKIP_RETURN_CODE) with a message when nvcc is not installed.
set -eu
nvcc=$1 inc=$2 out=$3 archs=$4
shift 4
if [ -z "$nvcc" ] || [ ! -x "$nvcc" ]; then
  echo "SKIP: nvcc not found (install the CUDA toolkit, /usr/local/cuda/bin/nvcc, to compile the .cu files)"
  exit 77
fi
gencode=""
for a in $archs; do
  gencode="$gencode -gencode arch=compute_$a,code=sm_$a"
done
incs=""
for d in $inc; do
  incs="$incs -I$d"
done
step="-c" ext=o
[ "${NVCC_FRONT:-0}" = 1 ] && step="-cuda" ext=ii
mkdir -p "$out"
"$nvcc" --version | tail -1
for f in "$@"; do
  echo "nvcc -std=c++17 -Werror all-warnings -Xptxas -warn-spills -Xcompiler -Wall,-Wextra$gencode $step $(basename "$f")"
  # shellcheck disable=SC2086
  "$nvcc" -std=c++17 -Werror all-warnings -Xptxas -warn-spills -Xcompiler -Wall,-Wextra $gencode $incs $step "$f" \
    -o "$out/$(basename "$f" .cu).$ext"
done
echo "ok: $# files for sm_$(echo $archs | sed 's/ /, sm_/g')"
