"""The accuracy harness's own logic (bench/eval.py; `make eval` itself is too slow for CI): the rendered ground
truth in COCO terms, the scoring, the cache of rendered sets, the package sync and the report's verdicts.

    python3 -m pytest -q tests/bench/test_eval.py      # a few seconds; needs pycocotools and OpenCV
"""
from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import eval as harness  # noqa: E402
import train_demo  # noqa: E402  (bench/eval.py put tools/ on the path)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Six real held-out images and their ground truth (the first of each of the eval seed's image sizes)."""
    folder = tmp_path_factory.mktemp("eval") / "images"
    items = harness.render(folder, harness.EVAL_SEED, 6)
    return folder, items, harness.coco_ground_truth(items, train_demo.NAMES)


def test_seeds_are_held_out():
    used = {train_demo.TRAIN_SEED, train_demo.VAL_SEED, train_demo.SAMPLE_SEED, train_demo.TEST_SEED}
    assert harness.EVAL_SEED == 3000 and harness.EVAL_SEED not in used
    assert harness.CALIB_SEED == train_demo.TRAIN_SEED  # calibration: training images, never the held-out ones


def test_ground_truth_round_trips(rendered):
    folder, items, gt = rendered
    assert sum(len(it[4]) for it in items) == len(gt["annotations"]) > 6  # 1-6 objects an image
    back = harness.labels_from_coco(gt)
    for image_id, name, w, h, labels in items:
        img, again = train_demo.render_image(harness.EVAL_SEED, image_id - 1)
        assert (img.shape[1], img.shape[0]) == (w, h)
        assert [tuple(x) for x in again] == [tuple(x) for x in labels]
        assert [b[0] for b in back[image_id]] == [b[0] for b in labels]
        assert [v for b in back[image_id] for v in b[1:]] == pytest.approx([v for b in labels for v in b[1:]])
    assert [c["id"] for c in gt["categories"]] == [1, 2, 3, 4, 5]  # class + 1: the demo's --coco category_id


def test_rendered_folder_holds_only_the_images(rendered):
    import cv2
    import numpy as np

    folder, items, _ = rendered
    assert sorted(p.name for p in folder.iterdir()) == sorted(it[1] for it in items)  # usable as --calib DIR
    img = cv2.imread(str(folder / items[2][1]))
    assert np.array_equal(img, train_demo.render_image(harness.EVAL_SEED, 2)[0])  # PNG: lossless


def test_render_is_cached_and_redone_when_incomplete(rendered):
    folder, items, _ = rendered
    first = folder / items[0][1]
    stamp = first.stat().st_mtime_ns
    assert harness.render(folder, harness.EVAL_SEED, 6) == items
    assert first.stat().st_mtime_ns == stamp  # not re-rendered
    (folder / items[3][1]).unlink()
    assert harness.render(folder, harness.EVAL_SEED, 6) == items
    assert (folder / items[3][1]).is_file()


def _as_detections(gt, score=0.9):
    return [harness.coco_detection(a["image_id"], a["category_id"] - 1, a["bbox"][0], a["bbox"][1],
                                   a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3], score)
            for a in gt["annotations"]]


def test_ground_truth_as_detections_scores_one(rendered):
    gt = rendered[2]
    r = harness.score(gt, _as_detections(gt))
    assert r["map50_95"] == pytest.approx(1.0) and r["map50"] == pytest.approx(1.0)
    assert r["detections"] == len(gt["annotations"])


def test_worse_detections_score_lower(rendered):
    gt = rendered[2]
    perfect = harness.score(gt, _as_detections(gt))["map50_95"]
    shifted = _as_detections(gt)
    x, y, w, h = shifted[0]["bbox"]
    shifted[0]["bbox"] = [x + 0.2 * w, y, w, h]  # IoU 0.67: a hit at 0.5, a miss from 0.7 up
    r = harness.score(gt, shifted)
    assert r["map50"] == pytest.approx(1.0) and r["map50_95"] < perfect
    wrong = _as_detections(gt)
    wrong[1]["category_id"] = wrong[1]["category_id"] % 5 + 1
    r = harness.score(gt, wrong)
    assert r["map50"] < 1.0 and r["map50_95"] < perfect
    assert harness.score(gt, _as_detections(gt)[1:])["map50_95"] < perfect  # a missed object
    assert harness.score(gt, []) == {"map50_95": 0.0, "map50": 0.0, "detections": 0}


def test_score_leaves_its_input_alone_and_refuses_unknown_images(rendered):
    gt = rendered[2]
    dets = _as_detections(gt)
    before = copy.deepcopy((gt, dets))
    harness.score(gt, dets)
    assert (gt, dets) == before
    with pytest.raises(harness.EvalError, match="image_id"):
        harness.score(gt, dets + [harness.coco_detection(9999, 0, 1, 1, 5, 5, 0.5)])


def test_sync_tree_rewrites_only_what_changed(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "runtime").mkdir(parents=True)
    (src / "a.c").write_text("a")
    (src / "runtime" / "b.c").write_text("b")
    harness.sync_tree(src, dst)
    (dst / "build").mkdir()
    (dst / "build" / "demo").write_text("exe")
    (dst / "stale.c").write_text("old")
    os.utime(dst / "a.c", ns=(1, 1))
    (src / "runtime" / "b.c").write_text("b2")
    harness.sync_tree(src, dst)
    assert (dst / "a.c").stat().st_mtime_ns == 1  # unchanged: not rewritten
    assert (dst / "runtime" / "b.c").read_text() == "b2"
    assert not (dst / "stale.c").exists()
    assert (dst / "build" / "demo").read_text() == "exe"


def _row(system, precision, m=None, status="ok"):
    return {"system": system, "label": system, "precision": precision, "notes": "", "images": 500 if m else 0,
            "status": status, **({"map50_95": m, "map50": m + 0.1} if m is not None else {})}


def test_verdicts():
    rows = [_row("carve-fp32-xnnpack", "fp32", 0.80), _row("onnxruntime-int8", "int8", 0.78),
            _row("openvino-int8", "int8", 0.795), _row("carve-int8-xnnpack", "int8", 0.792)]
    v = harness.verdicts(rows)
    assert v[0] == "the best int8 peer: openvino-int8, mAP50-95 79.50 (carve int8's bar)"
    assert "-0.80 mAP50-95 points (meets the target: within 1.0)" in v[1]
    assert "best int8 peer (openvino-int8): -0.30 mAP50-95 points (MISSES" in v[2]
    rows[-1]["map50_95"] = 0.785
    assert "MISSES the target: within 1.0" in harness.verdicts(rows)[1]
    rows[-1]["map50_95"] = 0.7951
    assert "+0.01 mAP50-95 points (meets the target: at least as accurate)" in harness.verdicts(rows)[2]
    pending = rows[:3] + [_row("carve-int8-xnnpack", "int8", status="not available")]
    assert harness.verdicts(pending)[1:] == ["carve int8 (xnnpack): pending (not available)"]
    table = harness.markdown(pending, {"images": [{}] * 500, "annotations": []})
    assert table.count("\n| ") == 1 + 4 and "pending" in table  # the header and the rows


def test_generator_refusal_is_reported_not_fatal(monkeypatch, tmp_path):
    """carve int8: a generator that refuses gives a "not available" row with its error line; fp32: a failure."""
    class Refused:
        returncode, stdout = 2, ""
        stderr = "usage: carve [-h]\ncarve: error: unrecognized arguments: --precision int8\n"

    monkeypatch.setattr(harness.subprocess, "run", lambda *a, **k: Refused())
    ctx = harness.Context({"images": []}, tmp_path, tmp_path / "calib", tmp_path, 1)
    with pytest.raises(harness.Unavailable, match="^carve: error: unrecognized arguments: --precision int8$"):
        harness.carve_package(ctx, "portable", "int8")
    with pytest.raises(harness.EvalError, match="--backend portable failed: carve: error"):
        harness.carve_package(ctx, "portable", "fp32")
    rows = harness.evaluate(ctx, ["carve-int8-portable", "carve-fp32-portable"])
    assert [r["status"] for r in rows] == ["not available", "failed"]
    assert rows[0]["notes"] == "not available: carve: error: unrecognized arguments: --precision int8"
