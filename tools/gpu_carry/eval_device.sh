#!/bin/bash
# On the GPU machine (see tools/gpu_carry/prepare_eval.sh): the demo model's fp32 package run with strict float32
# and with TF32 (its default), and its fp16 package, each over the carried held-out images in one process
# (eval_main.cu: one create, its tactics timed as a package's create does), into $OUT/eval-{strict,tf32,fp16}.json.
#   OUT=$OUT bash DIR/eval_device.sh              from the repository root (tools/train_demo.py renders the images
#                                                 meanwhile: eval_render.py); nvcc for CUDA_ARCH (default 90)
#   EMULATE=/path/to/tests/cuda/cuda_emu.h ...    no GPU: built with the emulation header (checks the script)
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export CPATH=$D/stb/include LIBRARY_PATH=$D/stb/lib LD_LIBRARY_PATH=$D/stb/lib PATH=$PATH:/usr/local/cuda/bin
ARCH=${CUDA_ARCH:-90} EMULATE=${EMULATE:-}
t0=$(date +%s)
for prec in fp32 fp16; do
  w=/tmp/eval-$prec
  mkdir -p "$w"
  cat > "$w/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.18)
if(CARVE_CUDA_EMULATION_HEADER)
  project(eval_$prec LANGUAGES C CXX ASM)
else()
  project(eval_$prec LANGUAGES C CXX CUDA ASM)
endif()
set(YOLO26N_SHAPES_BUILD_DEMO OFF CACHE BOOL "" FORCE)
add_subdirectory($D/pkgs/$prec pkg)
add_executable(eval_main $D/eval_main.cu $D/pkgs/$prec/runtime/carve_io.c)
carve_cuda_sources(eval_main $D/eval_main.cu)
set_target_properties(eval_main PROPERTIES CXX_STANDARD 17 CUDA_STANDARD 17)
target_compile_definitions(eval_main PRIVATE MODEL=yolo26n_shapes MODEL_HEADER="yolo26n_shapes.h")
find_library(STB_LIBRARY NAMES stb HINTS $D/stb/lib REQUIRED)
target_link_libraries(eval_main PRIVATE yolo26n_shapes \${STB_LIBRARY})
CM
  ( if [ -n "$EMULATE" ]; then defs="-DCARVE_CUDA_EMULATION_HEADER=$EMULATE"; else defs="-DCMAKE_CUDA_ARCHITECTURES=$ARCH"; fi
    cmake -S "$w" -B "$w/build" -DCMAKE_BUILD_TYPE=Release $defs > "$w/cmake.log" 2>&1 &&
    cmake --build "$w/build" -j "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))" > "$w/build.log" 2>&1
    echo $? > "$w/rc" ) &
done
python3 "$D/eval_render.py" "$D" "$OUT" || exit 1
wait
for prec in fp32 fp16; do
  if [ "$(cat /tmp/eval-$prec/rc)" != 0 ]; then
    echo "build of $prec failed:"; tail -n 30 /tmp/eval-$prec/cmake.log /tmp/eval-$prec/build.log; exit 1
  fi
done
echo "built in $(( $(date +%s) - t0 )) s"
cd "$D" || exit 1
/tmp/eval-fp32/build/eval_main list.txt "$OUT/eval-strict.json" --strict-fp32 || exit 1
/tmp/eval-fp32/build/eval_main list.txt "$OUT/eval-tf32.json" || exit 1
/tmp/eval-fp16/build/eval_main list.txt "$OUT/eval-fp16.json" || exit 1
echo "eval done at $(( $(date +%s) - t0 )) s"
