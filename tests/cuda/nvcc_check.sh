#!/bin/sh
# Compiles .cu files with nvcc for every architecture of CARVE_CUDA_ARCHITECTURES
# (tests/cuda/tests.cmake), warnings as errors; no GPU needed.
#   nvcc_check.sh <nvcc or ""> <include dir> <output dir> "<archs>" file.cu...
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
mkdir -p "$out"
"$nvcc" --version | tail -1
for f in "$@"; do
  echo "nvcc -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra$gencode -c $(basename "$f")"
  # shellcheck disable=SC2086
  "$nvcc" -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra $gencode -I"$inc" -c "$f" \
    -o "$out/$(basename "$f" .cu).o"
done
echo "ok: $# files for sm_$(echo $archs | sed 's/ /, sm_/g')"
