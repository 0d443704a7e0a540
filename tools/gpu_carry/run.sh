#!/bin/bash
# On the GPU machine (see tools/gpu_carry/prepare.sh): build the carve cuda packages with nvcc for this GPU (sm_90;
# edit CMAKE_CUDA_ARCHITECTURES below for another) and compare with the CPU (xnnpack) results computed beforehand.
# Every package in pkgs/ is built and run on bus.png with its layer dumps (pkgs/n640 without); n320 also without
# the CUDA Graph, n320f16 also with caller-owned memory (--caller-memory), and n640 is timed.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export CPATH=$D/stb/include LIBRARY_PATH=$D/stb/lib LD_LIBRARY_PATH=$D/stb/lib PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc --version | tail -1
[ -d $D/pkgs/n640 ] && cp $D/pkgs/n320/yolo26n_weights.bin $D/pkgs/n640/
mkdir -p $OUT
for dir in $D/pkgs/*/; do
  p=$(basename $dir)
  cmake -S $dir -B /tmp/b-$p -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTB_LIBRARY=$D/stb/lib/libstb.so > /tmp/cm-$p.log 2>&1 || { tail -20 /tmp/cm-$p.log; exit 1; }
  cmake --build /tmp/b-$p -j 16 > /tmp/bd-$p.log 2>&1 || { tail -30 /tmp/bd-$p.log; exit 1; }
  demo=$(ls /tmp/b-$p/*_demo)
  echo "built $p"
  if [ $p = n640 ]; then
    $demo $D/bus.png --json --runs 1 > $OUT/$p.json || exit 1
    echo "== latency yolo26n 640 (bus.jpg 810x1080, run_image: upload + letterbox + network + e2e + copy back)"
    for m in "" "--no-graph"; do $demo $D/bus.png --runs 200 $m | tail -2; done
    $demo $D/bus.png --runs 20 --profile | tail -8
    continue
  fi
  $demo $D/bus.png --dump /tmp/d-$p --json > $OUT/$p.json || exit 1
  if [ $p = n320 ]; then
    $demo $D/bus.png --dump /tmp/d-n320-nograph --json --no-graph --runs 3 > /dev/null || exit 1
  fi
  if [ $p = n320f16 ]; then  # f16 weights in a file (the default path is the package folder's copy)
    $demo $D/bus.png --dump /tmp/d-n320f16-caller --json --caller-memory > $OUT/n320f16-caller.json || exit 1
  fi
done
python3 $D/compare.py $D/ref /tmp $OUT
