#!/bin/sh
# Prepare issue 20's accuracy gate for a GPU machine without network (the `device` tool's): the demo model's cuda
# packages (fp32, fp16) and the list and ground truth of the first N images of `make eval`'s held-out set
# (bench/eval.py: 500 images of seed 3000, the demo model at 320). The images themselves (about 200 KB each: 500 of
# them would not fit the device tool's 64 MiB) are rendered again there by tools/train_demo.py, which travels with
# the repository, and checked against the pixels' SHA-256 rendered here (hashes.json). On the GPU machine, from the
# repository root:
#   OUT=$OUT bash DIR/eval_device.sh     ($OUT/eval-{strict,tf32,fp16}.json: COCO results files; render.json)
# then here: python3 tools/gpu_carry/eval_score.py DIR OUT_FOLDER     (mAP of each, the gates met or not)
# Usage: tools/gpu_carry/prepare_eval.sh DIR [IMAGES]   (DIR inside the repository and ignored by git, e.g.
# build/eval_carry, about 16 MB; IMAGES default 500)
set -eu
DIR=$1 N=${2:-500}
here=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$DIR" && mkdir -p "$DIR/pkgs" "$DIR/stb/include" "$DIR/stb/lib"
cp -r /usr/include/stb "$DIR/stb/include/" && cp -a /usr/lib/x86_64-linux-gnu/libstb.so* "$DIR/stb/lib/"
python3 - "$here" "$DIR" "$N" <<'PY'
import importlib.util, json, sys
from pathlib import Path
root, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
spec = importlib.util.spec_from_file_location("carve_bench_eval", root / "bench" / "eval.py")
ev = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ev)
gt, images, _ = ev.prepare_data(root / "build" / "eval")
keep = sorted(im["id"] for im in gt["images"])[:n]
sub = dict(gt, images=[im for im in gt["images"] if im["id"] in keep],
           annotations=[a for a in gt["annotations"] if a["image_id"] in keep])
import cv2, hashlib
lines, hashes = [], {}
for im in sub["images"]:
    lines.append(f"{im['id']} images/{im['file_name']}")
    pixels = cv2.imread(str(images / im["file_name"]), cv2.IMREAD_COLOR)
    hashes[im["file_name"]] = hashlib.sha256(pixels.tobytes()).hexdigest()
(out / "list.txt").write_text("\n".join(lines) + "\n")
(out / "gt.json").write_text(json.dumps(sub))
(out / "hashes.json").write_text(json.dumps({"seed": ev.EVAL_SEED, "sha256": hashes}))
print(f"prepare_eval: {len(sub['images'])} images, {len(sub['annotations'])} objects, conf {ev.CONF}")
PY
for prec in fp32 fp16; do
  opts=""
  [ "$prec" = fp16 ] && opts="--precision fp16"
  # shellcheck disable=SC2086
  "$here/carve" generate "$here/manifests/yolo26n-shapes.yaml" --backend cuda --weights "$here/assets/yolo26n-shapes.pt" \
    --out "$DIR/pkgs/$prec" $opts
done
cp "$here/tools/gpu_carry/eval_main.cu" "$here/tools/gpu_carry/eval_device.sh" "$here/tools/gpu_carry/eval_render.py" "$here/tools/gpu_carry/wrap_build.sh" "$DIR/"
du -sh "$DIR"
