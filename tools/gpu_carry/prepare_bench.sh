#!/bin/sh
# Prepare the speed comparison of issue 20 for a GPU machine with nvcc, CMake and PyTorch but no network and no
# Ultralytics (the `device` tool's machines): carve cuda packages of yolo26n (TF32 by default, --strict-fp32 at
# run time; fp16 where `carve generate --precision fp16` exists, every batch size; fp16 with --head nms: "fp16nms"),
# batch 1 and 32, the checkpoint, Ultralytics'
# source (pure Python, imported from there), stb, bus.png and the scripts. On the GPU machine:
#   bash DIR/bench.sh          (writes $OUT/bench.jsonl and $OUT/table.md; about 4 minutes on an H100)
# Usage: tools/gpu_carry/prepare_bench.sh DIR CHECKPOINT [IMGSZ] [BATCHES]
#   CHECKPOINT: a yolo26n .pt (e.g. python3 tools/oracle.py make-checkpoint --cfg yolo26n.yaml --out x.pt, random
#   weights: speed does not depend on them); IMGSZ default 640; BATCHES default "1 32".
# DIR must be inside the repository and ignored by git (e.g. build/bench_carry, or a folder listed in
# .git/info/exclude) so that the device tool's `carry` can name it (about 30 MB).
set -eu
DIR=$1 CK=$2 IMGSZ=${3:-640} BATCHES=${4:-1 32}
here=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$DIR" && mkdir -p "$DIR/pkgs" "$DIR/py" "$DIR/stb/include" "$DIR/stb/lib"
cp -r /usr/include/stb "$DIR/stb/include/" && cp -a /usr/lib/x86_64-linux-gnu/libstb.so* "$DIR/stb/lib/"
python3 -c "import cv2, ultralytics, os, sys; cv2.imwrite(sys.argv[1], cv2.imread(os.path.join(os.path.dirname(ultralytics.__file__), 'assets', 'bus.jpg')))" "$DIR/bus.png"
# Ultralytics' source (its Python files and cfg yamls; no caches, assets or compiled files)
src=$(python3 -c "import ultralytics, os; print(os.path.dirname(ultralytics.__file__))")
(cd "$(dirname "$src")" && tar cf - --exclude=__pycache__ --exclude='*.pyc' --exclude=assets ultralytics) | (cd "$DIR/py" && tar xf -)
cp "$CK" "$DIR/yolo26n.pt"
echo "$IMGSZ" > "$DIR/imgsz"

gen() {  # gen NAME [generate options]: the cuda package DIR/pkgs/NAME
  name=$1
  shift
  "$here/carve" generate "$here/manifests/yolo26n.yaml" --backend cuda --weights "$CK" --imgsz "$IMGSZ" \
    --out "$DIR/pkgs/$name" "$@"
}
first=""  # the first batch size: its package keeps the weight blob, bench.sh copies it to the others
for b in $BATCHES; do
  gen "tf32-b$b" --batch "$b"
  [ -z "$first" ] && first=$b || rm -f "$DIR/pkgs/tf32-b$b/yolo26n_weights.bin"
done
# fp16 (the cuda backend's --precision fp16, issue 20 item 1) when this carve has it: the hook for that package
for b in $BATCHES; do
  if gen "fp16-b$b" --batch "$b" --precision fp16 2>"$DIR/fp16.log"; then
    echo "fp16-b$b: generated"
    [ "$b" = "$first" ] || rm -f "$DIR/pkgs/fp16-b$b/yolo26n_weights.bin"
  else
    echo "fp16: not available in this carve ($(tail -1 "$DIR/fp16.log")): skipped"
    rm -rf "$DIR/pkgs/fp16-b$b"
    break
  fi
done
# fp16 with the one-to-many head + NMS (--head nms; its own weights: the one-to-many branch), every batch size
if [ -d "$DIR/pkgs/fp16-b$first" ]; then
  for b in $BATCHES; do
    gen "fp16nms-b$b" --batch "$b" --precision fp16 --head nms
    [ "$b" = "$first" ] || rm -f "$DIR/pkgs/fp16nms-b$b/yolo26n_weights.bin"
  done
fi
echo "$first" > "$DIR/first_batch"
rm -f "$DIR/fp16.log"
cp "$here/tools/gpu_carry/bench.sh" "$here/tools/gpu_carry/bench_main.cu" "$here/tools/gpu_carry/torch_bench.py" \
   "$here/tools/gpu_carry/bench_table.py" "$here/tools/gpu_carry/ncu.sh" "$here/tools/gpu_carry/ncu_sum.py" \
   "$here/tools/gpu_carry/device_run.sh" "$here/tools/gpu_carry/ncu_detail.sh" "$here/tools/gpu_carry/wrap_build.sh" \
   "$here/tools/gpu_carry/ncu_lines.py" "$here/tools/gpu_carry/rows.py" "$DIR/"
du -sh "$DIR"
