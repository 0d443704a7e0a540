"""carve: an ahead-of-time compiler from Ultralytics YOLO26 checkpoints to standalone C."""

__version__ = "0.1.0"
