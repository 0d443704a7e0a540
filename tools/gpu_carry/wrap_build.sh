#!/bin/bash
# Builds a driver program (bench_main.cu, eval_main.cu) against a generated cuda package, in a wrapper CMake project
# of its own (the package as a subdirectory, its demo off), for tools/gpu_carry's scripts on the GPU machine:
#   wrap_build.sh WORK PACKAGE_DIR DRIVER.cu LIBRARY STB_LIB_DIR [CUDA_FLAGS] [DEFINITIONS]
# WORK gets the project, WORK/build the executable (named as DRIVER without .cu), WORK/rc the exit status and
# WORK/cmake.log, build.log the logs. LIBRARY: the package's library target (yolo26n, yolo26n_shapes).
# EMULATE=path/to/cuda_emu.h: built with the emulation header; otherwise nvcc for ARCH (default 90).
set -u
w=$1 pkg=$2 main=$3 lib=$4 stb=$5 flags=${6:-} definitions=${7:-}
exe=$(basename "$main" .cu)
demo=$(echo "${lib}_BUILD_DEMO" | tr '[:lower:]' '[:upper:]')
mkdir -p "$w"
cat > "$w/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.18)
if(CARVE_CUDA_EMULATION_HEADER)
  project(wrap_$exe LANGUAGES C CXX ASM)
else()
  project(wrap_$exe LANGUAGES C CXX CUDA ASM)
endif()
set($demo OFF CACHE BOOL "" FORCE)
add_subdirectory($pkg pkg)
add_executable($exe $main $pkg/runtime/carve_io.c)
carve_cuda_sources($exe $main)
set_target_properties($exe PROPERTIES CXX_STANDARD 17 CUDA_STANDARD 17)
target_compile_definitions($exe PRIVATE $definitions)
find_library(STB_LIBRARY NAMES stb HINTS $stb REQUIRED)
target_link_libraries($exe PRIVATE $lib \${STB_LIBRARY})
CM
# nvcc: -lineinfo (source lines for Nsight Compute's source page, ncu_detail.sh; the same machine code)
if [ -n "${EMULATE:-}" ]; then
  defs="-DCARVE_CUDA_EMULATION_HEADER=$EMULATE"
else
  defs="-DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90}" flags="-lineinfo${flags:+ $flags}"
fi
cmake -S "$w" -B "$w/build" -DCMAKE_BUILD_TYPE=Release $defs ${flags:+"-DCMAKE_CUDA_FLAGS=$flags"} > "$w/cmake.log" 2>&1 &&
  cmake --build "$w/build" -j "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))" > "$w/build.log" 2>&1
rc=$?
echo $rc > "$w/rc"
exit $rc
