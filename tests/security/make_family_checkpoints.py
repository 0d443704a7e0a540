#!/usr/bin/env python3
"""Real checkpoints built with Ultralytics from their yamls (random weights, no calibration, saved
the way Ultralytics' strip_optimizer saves them: fp16 under 'model'), in one process:

* FAMILIES: model families carve does not support; tests/generator/test_hostile_checkpoints.py checks
  that each is refused with what was found and what is supported;
* YOLO26: the small segment and classify models the per-task API tests of tests/security compile
  (run_security.py setup-tasks); cheaper than tools/oracle.py make-checkpoint, whose calibration
  the API tests do not need.

  python3 tests/security/make_family_checkpoints.py --out DIR [NAME ...]

NAME is a key of FAMILIES or YOLO26 (default: all FAMILIES); DIR/<name>.pt is written, or kept when
it exists. Needs torch and ultralytics (tools/install.sh --test).
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
YOLO26 = {
    "yolo26n-seg": ("SegmentationModel", "yolo26n-seg.yaml", "segment"),
    "yolo26n-cls": ("ClassificationModel", "yolo26n-cls.yaml", "classify"),
}


def make(name: str, out: Path) -> Path:
    path = out / f"{name}.pt"
    if path.is_file():
        return path
    import torch
    import ultralytics.nn.tasks as tasks

    cls, yaml, task = {**FAMILIES, **YOLO26}[name]
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
    p.add_argument("names", nargs="*", help=f"of {', '.join([*FAMILIES, *YOLO26])}")
    a = p.parse_args()
    unknown = [n for n in a.names if n not in FAMILIES and n not in YOLO26]
    if unknown:
        p.error(f"unknown model(s) {unknown}")
    for name in a.names or FAMILIES:
        print(make(name, a.out))


if __name__ == "__main__":
    main()
