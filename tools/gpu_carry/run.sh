#!/bin/bash
# On the GPU machine (see tools/gpu_carry/prepare.sh): build the carve cuda packages with nvcc for this GPU (sm_90;
# edit CMAKE_CUDA_ARCHITECTURES below for another) and compare with the CPU (xnnpack) results computed beforehand.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export CPATH=$D/stb/include LIBRARY_PATH=$D/stb/lib LD_LIBRARY_PATH=$D/stb/lib PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc --version | tail -1
cp $D/pkgs/n320/yolo26n_weights.bin $D/pkgs/n640/
for p in n320 n640 seg320 n320f16; do
  cmake -S $D/pkgs/$p -B /tmp/b-$p -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSTB_LIBRARY=$D/stb/lib/libstb.so > /tmp/cm-$p.log 2>&1 || { tail -20 /tmp/cm-$p.log; exit 1; }
  cmake --build /tmp/b-$p -j 16 > /tmp/bd-$p.log 2>&1 || { tail -30 /tmp/bd-$p.log; exit 1; }
  echo "built $p"
done
mkdir -p $OUT
/tmp/b-n320/yolo26n_demo $D/bus.png --dump /tmp/d-n320 --json > $OUT/n320.json || exit 1
/tmp/b-n320/yolo26n_demo $D/bus.png --dump /tmp/d-n320-nograph --json --no-graph --runs 3 > /dev/null || exit 1
/tmp/b-seg320/yolo26n_seg_demo $D/bus.png --dump /tmp/d-seg320 --json > /dev/null || exit 1
/tmp/b-n640/yolo26n_demo $D/bus.png --json --runs 1 > $OUT/n640.json || exit 1
# f16 weights in a file (the default path is the package folder's copy), with create and with caller-owned memory
/tmp/b-n320f16/yolo26n_demo $D/bus.png --dump /tmp/d-n320f16 --json > $OUT/n320f16.json || exit 1
/tmp/b-n320f16/yolo26n_demo $D/bus.png --dump /tmp/d-n320f16-caller --json --caller-memory > $OUT/n320f16-caller.json || exit 1
echo "== latency yolo26n 640 (bus.jpg 810x1080, run_image: upload + letterbox + network + e2e + copy back)"
for m in "" "--no-graph"; do /tmp/b-n640/yolo26n_demo $D/bus.png --runs 200 $m | tail -2; done
/tmp/b-n640/yolo26n_demo $D/bus.png --runs 20 --profile | tail -8
python3 $D/compare.py $D/ref /tmp $OUT
