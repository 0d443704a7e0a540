#!/bin/sh
# Prepare a folder to carry to a GPU machine that has nvcc and CMake but no XNNPACK, Ultralytics or network (the
# `device` tool's machines): cuda packages, the CPU (xnnpack) packages' layer dumps and JSON output on the same
# image (the reference), stb, and run.sh + compare.py. On the GPU machine:
#   bash DIR/run.sh        (writes compare.txt and the JSON outputs to $OUT)
# Usage: tools/gpu_carry/prepare.sh DIR CHECKPOINTS [detect|tasks]
#   detect (default): yolo26n at 320 and 640, yolo26n-seg at 320, and yolo26n at 320 once more with
#                     --weights-format file --weights-dtype f16 (run with create and with caller-owned memory);
#                     CHECKPOINTS holds yolo26n.pt and yolo26n-seg.pt
#   tasks:            yolo26n-pose and yolo26n-obb at 320, yolo26n-cls at 224; CHECKPOINTS holds their .pt
# Checkpoints e.g. from python3 tools/oracle.py make-checkpoint --cfg yolo26n.yaml --out CHECKPOINTS/yolo26n.pt.
# The device tool carries at most 64 MiB with the working tree: the references keep only some layers' dumps.
set -eu
DIR=$1 CK=$2 SET=${3:-detect}
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
rm -rf "$DIR" && mkdir -p "$DIR/pkgs" "$DIR/ref" "$DIR/stb/include" "$DIR/stb/lib"
cp -r /usr/include/stb "$DIR/stb/include/" && cp -a /usr/lib/x86_64-linux-gnu/libstb.so* "$DIR/stb/lib/"
python3 -c "import cv2, ultralytics, os, sys; cv2.imwrite(sys.argv[1], cv2.imread(os.path.join(os.path.dirname(ultralytics.__file__), 'assets', 'bus.jpg')))" "$DIR/bus.png"

# package MANIFEST IMGSZ NAME [generate options]: the cuda package to carry and the xnnpack package's output on bus.png
package() {
  m=$1 size=$2 name=$3
  shift 3
  for be in cuda xnnpack; do
    "$here/carve" generate "$here/manifests/$m.yaml" --backend $be --weights "$CK/$m.pt" --imgsz $size \
      --out "$tmp/$name-$be" "$@"
  done
  cmake -S "$tmp/$name-xnnpack" -B "$tmp/$name-xnnpack/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$tmp/$name-xnnpack/build" -j 2 >/dev/null
  demo=$(ls "$tmp/$name-xnnpack/build/"*_demo)
  if [ $name = n640 ]; then "$demo" "$DIR/bus.png" --json > "$DIR/ref/$name.json"
  else "$demo" "$DIR/bus.png" --json --dump "$DIR/ref/$name" > "$DIR/ref/$name.json"; fi
  cp -r "$tmp/$name-cuda" "$DIR/pkgs/$name"
}

if [ "$SET" = detect ]; then
  package yolo26n 320 n320
  package yolo26n 640 n640
  package yolo26n-seg 320 seg320
  package yolo26n 320 n320f16 --weights-format file --weights-dtype f16
  rm -f "$DIR/pkgs/n640/"*.bin            # n320's weights: run.sh copies them
  rm -f "$DIR/ref/seg320.json" "$DIR/ref/seg320/layer_0"[0-2].npy "$DIR/ref/n320f16/layer_0"*.npy  # n320 covers these
elif [ "$SET" = tasks ]; then
  package yolo26n-pose 320 pose320
  package yolo26n-obb 320 obb320
  package yolo26n-cls 224 cls224
  rm -f "$DIR/ref/"*/layer_0*.npy         # the early layers are detect's (checked by the detect set)
else
  echo "prepare.sh: unknown set '$SET' (detect or tasks)" >&2; exit 2
fi
cp "$here/tools/gpu_carry/run.sh" "$here/tools/gpu_carry/compare.py" "$DIR/"
rm -rf "$tmp"
du -sh "$DIR"
