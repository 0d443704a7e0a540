"""generator/carve/coco.py, the demo's --coco category ids, against Ultralytics' own tables: COCO's 80 class names
(ultralytics/cfg/datasets/coco.yaml) and converter.coco80_to_coco91_class()."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "generator"))

from carve.coco import COCO80_NAMES, COCO80_TO_91, category_ids  # noqa: E402

pytest.importorskip("ultralytics")


def test_tables_are_ultralytics():
    from ultralytics.data.converter import coco80_to_coco91_class
    from ultralytics.utils import YAML
    from ultralytics.utils.checks import check_yaml
    assert list(COCO80_NAMES) == list(YAML.load(check_yaml("coco.yaml"))["names"].values())
    assert list(COCO80_TO_91) == coco80_to_coco91_class()


def test_rule():
    assert category_ids(COCO80_NAMES)[0] == COCO80_TO_91
    assert category_ids(["circle", "square"])[0] == (1, 2)
    assert category_ids(["person"])[0] == (1,)  # COCO-pose's one class: COCO's person id either way
    assert category_ids(list(COCO80_NAMES[:79]))[0] == tuple(range(1, 80))  # not all 80: index + 1
