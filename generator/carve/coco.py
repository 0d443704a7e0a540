"""COCO category ids of a model's classes, for the demo's ``--coco`` results file.

The rule is Ultralytics' (``DetectionValidator.init_metrics``, ``save_json``): a model whose classes are COCO's 80,
in COCO's order, gets COCO's own category ids (``converter.coco80_to_coco91_class``: 1 .. 90 with gaps), so its
results score against COCO's annotation files as they are; any other model gets its class index + 1.
"""

from __future__ import annotations

# Ultralytics' ultralytics/cfg/datasets/coco.yaml names, in order (tests/demo/coco.py checks them against it).
COCO80_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow",
    "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee",
    "skis", "snowboard", "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard",
    "tennis racket", "bottle", "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple",
    "sandwich", "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors", "teddy bear",
    "hair drier", "toothbrush",
)

# converter.coco80_to_coco91_class(): COCO's category id of each of the 80 classes.
COCO80_TO_91 = (
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32, 33, 34,
    35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90,
)


def category_ids(names) -> tuple[tuple[int, ...], str]:
    """The COCO category id of each class, and a phrase saying which rule gave them (for the generated comment)."""
    names = tuple(names)
    if names == COCO80_NAMES:
        return COCO80_TO_91, "COCO's category ids (the classes are COCO's 80)"
    return tuple(range(1, len(names) + 1)), "the class index + 1"
