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
for prec in fp32 fp16; do  # /tmp/eval-PREC/build/eval_main, in the background
  EMULATE=$EMULATE ARCH=$ARCH bash "$D/wrap_build.sh" "/tmp/eval-$prec" "$D/pkgs/$prec" "$D/eval_main.cu" yolo26n_shapes \
    "$D/stb/lib" "" 'MODEL=yolo26n_shapes MODEL_HEADER="yolo26n_shapes.h"' &
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
