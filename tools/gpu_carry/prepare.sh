#!/bin/sh
# Prepare a folder to carry to a GPU machine that has nvcc and CMake but no XNNPACK, Ultralytics or network (the
# `device` tool's machines): the cuda packages (yolo26n at 320 and 640, yolo26n-seg at 320), the CPU (xnnpack)
# package's layer dumps and detections on the same image, stb, and run.sh + compare.py; and yolo26n at 320 once more
# with --weights-format file --weights-dtype f16 (cuda and xnnpack, the options the host emulation alone checked in
# CI). On the GPU machine:
#   bash DIR/run.sh        (writes compare.txt and the JSON outputs to $OUT)
# Usage: tools/gpu_carry/prepare.sh DIR CHECKPOINTS   (CHECKPOINTS holds yolo26n.pt and yolo26n-seg.pt, e.g. made by
#        python3 tools/oracle.py make-checkpoint --cfg yolo26n.yaml --out CHECKPOINTS/yolo26n.pt)
set -eu
DIR=$1 CK=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
rm -rf "$DIR" && mkdir -p "$DIR/pkgs" "$DIR/ref" "$DIR/stb/include" "$DIR/stb/lib"
cp -r /usr/include/stb "$DIR/stb/include/" && cp -a /usr/lib/x86_64-linux-gnu/libstb.so* "$DIR/stb/lib/"
python3 -c "import cv2, ultralytics, os, sys; cv2.imwrite(sys.argv[1], cv2.imread(os.path.join(os.path.dirname(ultralytics.__file__), 'assets', 'bus.jpg')))" "$DIR/bus.png"
for spec in "yolo26n 320 n320" "yolo26n 640 n640" "yolo26n-seg 320 seg320"; do
  set -- $spec
  for be in cuda xnnpack; do
    "$here/carve" generate "$here/manifests/$1.yaml" --backend $be --weights "$CK/$1.pt" --imgsz $2 --out "$tmp/$3-$be"
  done
  cmake -S "$tmp/$3-xnnpack" -B "$tmp/$3-xnnpack/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$tmp/$3-xnnpack/build" -j 2 >/dev/null
  demo=$(ls "$tmp/$3-xnnpack/build/"*_demo)
  if [ $3 = n640 ]; then "$demo" "$DIR/bus.png" --json > "$DIR/ref/$3.json"
  else "$demo" "$DIR/bus.png" --json --dump "$DIR/ref/$3" > "$DIR/ref/$3.json"; fi
  cp -r "$tmp/$3-cuda" "$DIR/pkgs/$3"
done
rm -f "$DIR/pkgs/n640/"*.bin "$DIR/ref/seg320.json" "$DIR/ref/seg320/layer_0"[0-2].npy   # n640: n320's weights (run.sh copies them); seg: the 160x160 layers n320 covers   # the same weights as n320 (run.sh copies them): carry less
# f16 weights in a file: the CPU package with the same rounded weights is the reference
"$here/carve" generate "$here/manifests/yolo26n.yaml" --backend cuda --weights "$CK/yolo26n.pt" --imgsz 320 \
  --weights-format file --weights-dtype f16 --out "$tmp/n320f16-cuda"
"$here/carve" generate "$here/manifests/yolo26n.yaml" --backend xnnpack --weights "$CK/yolo26n.pt" --imgsz 320 \
  --weights-format file --weights-dtype f16 --out "$tmp/n320f16-xnnpack"
cmake -S "$tmp/n320f16-xnnpack" -B "$tmp/n320f16-xnnpack/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/n320f16-xnnpack/build" -j 2 >/dev/null
"$tmp/n320f16-xnnpack/build/yolo26n_demo" "$DIR/bus.png" --json --dump "$DIR/ref/n320f16" > "$DIR/ref/n320f16.json"
cp -r "$tmp/n320f16-cuda" "$DIR/pkgs/n320f16"
cp "$here/tools/gpu_carry/run.sh" "$here/tools/gpu_carry/compare.py" "$DIR/"
rm -rf "$tmp"
du -sh "$DIR"
