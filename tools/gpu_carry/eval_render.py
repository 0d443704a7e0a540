#!/usr/bin/env python3
"""On the GPU machine (tools/gpu_carry/eval_device.sh): renders the held-out images that CARRY/list.txt names with
tools/train_demo.py's render_image (seed and pixel hashes from CARRY/hashes.json, written by prepare_eval.sh) into
CARRY/images, and writes OUT/render.json: how many images rendered and how many differ from the pixels rendered
where the carry was made (0 expected; a different NumPy or OpenCV could change them, and the scores would then be
of other images: still a valid comparison of the three configurations with each other).

    eval_render.py CARRY OUT
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path



def main() -> int:
    carry, out = Path(sys.argv[1]), Path(sys.argv[2])
    sys.path.insert(0, str(Path.cwd() / "tools"))
    import cv2
    import train_demo

    meta = json.loads((carry / "hashes.json").read_text())
    (carry / "images").mkdir(exist_ok=True)
    done, differ = 0, []
    for line in (carry / "list.txt").read_text().split("\n"):
        if not line.strip():
            continue
        image_id, rel = line.split()
        name = Path(rel).name
        img, _ = train_demo.render_image(meta["seed"], int(image_id) - 1)  # image_id = index + 1 (bench/eval.py)
        if not cv2.imwrite(str(carry / rel), img):
            print(f"eval_render: {carry / rel}: cannot write it", file=sys.stderr)
            return 1
        if hashlib.sha256(img.tobytes()).hexdigest() != meta["sha256"][name]:
            differ.append(name)
        done += 1
    (out / "render.json").write_text(json.dumps({"images": done, "differ": len(differ), "first_differ": differ[:5]}))
    print(f"eval_render: {done} images, {len(differ)} differ from the carry's pixels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
