#!/usr/bin/env python3
"""Real checkpoints of model families carve does not support, built with Ultralytics from their
yamls (random weights, saved the way Ultralytics' strip_optimizer saves them: fp16 under 'model').

  python3 tests/security/make_family_checkpoints.py --out DIR [NAME ...]

NAME is one of FAMILIES (default: all); DIR/<name>.pt is written, or kept when it exists.
tests/generator/test_hostile_checkpoints.py uses it to check that each is refused with what was
found and what is supported. Needs torch and ultralytics (tools/install.sh --test).
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

# name -> (Ultralytics model class in ultralytics.nn.tasks, yaml, task)
FAMILIES = {
    "yolov8n": ("DetectionModel", "yolov8n.yaml", "detect"),
    "yolov8n-seg": ("SegmentationModel", "yolov8n-seg.yaml", "segment"),
    "yolov10n": ("DetectionModel", "yolov10n.yaml", "detect"),
    "yolo11n": ("DetectionModel", "yolo11n.yaml", "detect"),
    "yolo11n-pose": ("PoseModel", "yolo11n-pose.yaml", "pose"),
    "rtdetr-l": ("RTDETRDetectionModel", "rtdetr-l.yaml", "detect"),
}


def make(name: str, out: Path) -> Path:
    path = out / f"{name}.pt"
    if path.is_file():
        return path
    import torch
    import ultralytics.nn.tasks as tasks

    cls, yaml, task = FAMILIES[name]
    torch.manual_seed(0)
    model = getattr(tasks, cls)(yaml, verbose=False)
    m = copy.deepcopy(model).half()
    for p in m.parameters():
        p.requires_grad_(False)
    m.args = {"task": task, "imgsz": 640}
    out.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"model": m, "ema": None, "train_args": {"task": task, "imgsz": 640}, "epoch": -1,
                "version": "8.4.190"}, tmp)
    tmp.rename(path)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("names", nargs="*", choices=[[], *FAMILIES], default=[])
    a = p.parse_args()
    for name in a.names or FAMILIES:
        print(make(name, a.out))


if __name__ == "__main__":
    main()
