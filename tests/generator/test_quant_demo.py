"""--precision int8 on the trained demo model (assets/yolo26n-shapes.pt, 320x320): the simulated int8 graph against
the float graph on held-out images (docs/quantization.md#measured-on-the-demo-model).

Calibration images: tools/train_demo.py's renderer, seed 0 (the training set's seed); held-out images: seed 4000
(used nowhere else). By default 32 calibration and 24 held-out images (about a minute); with CARVE_TEST_FULL=1
(`make test-full`) 200 and 100, the figures of docs/quantization.md.

* the float detections spread (many boxes, scores from low to high: a comparison of flat outputs proves nothing);
* every confident float detection (score > 0.5) has an int8 detection of the same class at IoU > 0.9, and at
  Ultralytics' default threshold 0.25 nearly all do; the scores differ by little on average;
* the sensitivity pass earns its keep: with an outlier channel planted in one layer (a channel shifted by +1000,
  its reader's bias compensating), the layers that the shared range ruins stay in float and the int8 detections
  still match, while forcing them into int8 loses detections.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(REPO / "tools"))

from carve.compiler import quantized_graph  # noqa: E402
from carve.quant import evaluate, images, rewrite  # noqa: E402

cv2 = pytest.importorskip("cv2")
import train_demo  # noqa: E402

PT = REPO / "assets" / "yolo26n-shapes.pt"
SHAPES = REPO / "manifests" / "yolo26n-shapes.yaml"
FULL = os.environ.get("CARVE_TEST_FULL") == "1"
N_CALIB = 200 if FULL else images.MIN_IMAGES
N_HELD = 100 if FULL else 24
CALIB_SEED, HELD_SEED = 0, 4000


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CARVE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "carve-cache"))


def _render(folder: Path, seed: int, count: int) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        img, _ = train_demo.render_image(seed, i)
        p = folder / f"{seed}_{i:05d}.png"
        cv2.imwrite(str(p), img)
        paths.append(p)
    return paths


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    d = tmp_path_factory.mktemp("calib")
    _render(d, CALIB_SEED, N_CALIB)
    return d


@pytest.fixture(scope="module")
def held(tmp_path_factory):
    paths = _render(tmp_path_factory.mktemp("held"), HELD_SEED, N_HELD)
    out = []
    for p, px, why in images.preprocess(paths, "letterbox", (320, 320)):
        assert px is not None, f"{p}: {why}"
        out.append(images.to_input(px))
    return out


@pytest.fixture(scope="module")
def quant(calib):
    return quantized_graph(str(SHAPES), str(PT), str(calib))


def test_int8_detections_match_float(quant, held):
    g, q = quant.float_graph, quant.graph
    scores = []
    for x in held[:8]:
        rows = evaluate.floatexec.run(g, x, postprocess=True)["output0"][0]
        scores += [float(r[4]) for r in rows if r[4] > 0.05]
    assert len(scores) >= 20 and np.std(scores) > 0.15, f"float scores do not spread: {np.round(scores, 2)}"
    confident = evaluate.compare(g, q, held, 0.5)
    default = evaluate.compare(g, q, held, 0.25)
    kinds = [op.kind for op in q.ops]
    print(f"\nint8 demo model, {len(held)} held-out images, {N_CALIB} calibration images: "
          f"{kinds.count('qconv2d')} qconv2d, {sum(1 for k in quant.summary['float_ops'] if k[1] == 'conv2d')} "
          f"conv2d kept float ({', '.join(n for n, k, _ in quant.summary['float_ops'] if k == 'conv2d')})")
    print(f"  conf 0.5:  {confident.line()}")
    print(f"  conf 0.25: {default.line()}")
    assert confident.reference >= 2 * len(held)
    assert confident.matched == confident.reference
    assert default.matched >= 0.97 * default.reference
    assert default.extra <= max(2, 0.02 * default.reference)
    assert np.mean(default.score_diffs) < 0.04
    assert np.mean(default.ious) > 0.95


def plant_outlier(g, conv="model.16.m.0.cv3", reader="model.16.cv2", slot=64, channel=3, shift=1000.0):
    """Shift channel ``channel`` of ``conv``'s pre-activation by ``shift`` (SiLU is then the identity on it: the
    channel holds z + shift instead of silu(z)) and take shift * weight off the bias of its only reader (a 1x1
    conv reading it through a concat at ``slot``): the float model still detects as before, but the channel's
    range (about [-1, 1000]) is shared by every tensor of the concat's QParams group."""
    ops = {o.name: o for o in g.ops}
    w = dict(g.weights)
    b = w[ops[conv].params["bias"]].copy()
    b[channel] += np.float32(shift)
    w[ops[conv].params["bias"]] = b
    wr = w[ops[reader].params["weight"]][:, slot + channel, 0, 0].astype(np.float64)
    w[ops[reader].params["bias"]] = (w[ops[reader].params["bias"]].astype(np.float64) - wr * shift).astype(np.float32)
    return g.replace(weights=w)


def test_sensitivity_keeps_an_outlier_layer_in_float(calib, held):
    qr = quantized_graph(str(SHAPES), str(PT), str(calib), graph_hook=plant_outlier, sens_images=4)
    float_convs = {n for n, k, _ in qr.summary["float_ops"] if k == "conv2d"}
    assert {"model.16.m.0.cv3", "model.16.cv2"} <= float_convs, float_convs
    rows = {r["name"]: r for r in qr.report["ops"]}
    assert rows["model.16.cv2"]["output_sqnr_db"] < 25.0
    chosen = evaluate.compare(qr.float_graph, qr.graph, held, 0.25)
    forced = evaluate.compare(qr.float_graph, rewrite.quantize(qr.float_graph, qr.ranges).graph, held, 0.25)
    print(f"\noutlier in model.16.m.0.cv3: float {sorted(float_convs)}\n  sensitivity's choice: {chosen.line()}\n"
          f"  all in int8:          {forced.line()}")
    assert chosen.reference >= 2 * len(held)
    assert chosen.matched >= 0.97 * chosen.reference
    assert forced.matched < 0.9 * forced.reference or np.mean(forced.score_diffs) > 3 * np.mean(chosen.score_diffs)
