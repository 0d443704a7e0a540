"""Tests of tools/oracle.py itself: the comparisons must catch what they claim to catch, and the reference data
must be what Ultralytics computes. Synthetic arrays for the comparison logic; a yolo26n checkpoint made once per
module for the rest."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import json  # noqa: E402
import shutil  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import oracle  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------------
# compare_layers on synthetic arrays
# ---------------------------------------------------------------------------------------------------------------------


def _rows(rng, k=300, nc=80, size=640.0):
    """Detection rows (1, k, 6) sorted by score, distinct boxes, like the head's y."""
    xy = rng.uniform(0, size * 0.8, (k, 2))
    wh = rng.uniform(4, size * 0.2, (k, 2))
    score = np.sort(rng.uniform(0.05, 0.99, k))[::-1]
    cls = rng.integers(0, nc, k)
    return np.concatenate([xy, xy + wh, score[:, None], cls[:, None]], 1)[None].astype(np.float32)


@pytest.fixture
def layer_dirs(tmp_path):
    rng = np.random.default_rng(0)
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    ref.mkdir()
    arrays = {
        "layer_00.npy": rng.standard_normal((1, 4, 8, 8)).astype(np.float32),
        "layer_01.npy": rng.standard_normal((1, 6, 4, 4)).astype(np.float32) * 10,
        "layer_02.npy": _rows(rng),
        "output0.npy": None,
    }
    arrays["output0.npy"] = arrays["layer_02.npy"]
    for name, a in arrays.items():
        np.save(ref / name, a)
    shutil.copytree(ref, ours)
    return ours, ref


def _edit(path, fn):
    a = np.load(path)
    fn(a)
    np.save(path, a)


def test_compare_layers_exact_copy_passes(layer_dirs):
    ours, ref = layer_dirs
    assert oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_layers_empty_ref_fails(tmp_path):
    (tmp_path / "ref").mkdir()
    (tmp_path / "ours").mkdir()
    assert not oracle.compare_layers(tmp_path / "ours", tmp_path / "ref", 1e-4, verbose=False)


def test_compare_layers_perturbed_element_fails(layer_dirs):
    ours, ref = layer_dirs
    scale = np.abs(np.load(ref / "layer_01.npy")).max()

    def bump(a):
        a[0, 3, 2, 1] += 1e-3 * scale  # 10x the tolerance

    _edit(ours / "layer_01.npy", bump)
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_layers_within_tolerance_passes(layer_dirs):
    ours, ref = layer_dirs
    scale = np.abs(np.load(ref / "layer_01.npy")).max()
    _edit(ours / "layer_01.npy", lambda a: a.__iadd__(np.float32(0.3e-4 * scale)))
    assert oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_layers_missing_file_fails(layer_dirs):
    ours, ref = layer_dirs
    (ours / "layer_00.npy").unlink()
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_layers_shape_mismatch_fails(layer_dirs):
    ours, ref = layer_dirs
    a = np.load(ref / "layer_00.npy")
    np.save(ours / "layer_00.npy", a.reshape(1, 4, 4, 16))  # same data, wrong layout
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_layers_nan_fails(layer_dirs):
    ours, ref = layer_dirs
    _edit(ours / "layer_00.npy", lambda a: a.__setitem__((0, 0, 0, 0), np.nan))
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_rows_reordered_passes(layer_dirs):
    """Row order is not significant: near-equal scores may come out in a different order."""
    ours, ref = layer_dirs
    for name in ("layer_02.npy", "output0.npy"):
        _edit(ours / name, lambda a: a.__setitem__(0, a[0, np.random.default_rng(1).permutation(a.shape[1])]))
    assert oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_rows_swap_at_cut_passes(layer_dirs):
    """The last row may be a different candidate when its score ties the cut."""
    ours, ref = layer_dirs
    r = np.load(ref / "output0.npy")
    lowest = r[0, -1, 4]

    def swap(a):
        a[0, -1] = [1.0, 2.0, 30.0, 40.0, lowest + 1e-6, (a[0, -1, 5] + 1) % 80]

    _edit(ours / "output0.npy", swap)
    assert oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_rows_replaced_top_row_fails(layer_dirs):
    ours, ref = layer_dirs
    _edit(ours / "output0.npy", lambda a: a.__setitem__((0, 0, 5), (a[0, 0, 5] + 1) % 80))  # class of best row
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_rows_moved_box_fails(layer_dirs):
    ours, ref = layer_dirs
    _edit(ours / "output0.npy", lambda a: a.__setitem__((0, 10, 0), a[0, 10, 0] + 1.0))  # 1 px at 640 > 1e-4
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_rows_score_judged_on_its_own_scale(layer_dirs):
    """A score error of 0.01 is small next to 640-pixel boxes but must still fail."""
    ours, ref = layer_dirs
    _edit(ours / "output0.npy", lambda a: a.__setitem__((0, 5, 4), a[0, 5, 4] + 0.01))
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


# ---------------------------------------------------------------------------------------------------------------------
# compare_detections on synthetic JSON
# ---------------------------------------------------------------------------------------------------------------------


def _dets(n=12, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x, y = rng.uniform(0, 600, 2)
        out.append({"class_id": int(rng.integers(0, 80)), "score": float(0.9 - 0.05 * i),
                    "box": [float(x), float(y), float(x + rng.uniform(10, 200)), float(y + rng.uniform(10, 200))]})
    return out


def _write(path, dets, **extra):
    path.write_text(json.dumps({"image": {"width": 810, "height": 1080}, "conf": 0.25, "max_det": 300,
                                "detections": dets, **extra}))
    return path


@pytest.fixture
def det_ref(tmp_path):
    return _write(tmp_path / "ref.json", _dets())


def test_compare_detections_exact_passes(tmp_path, det_ref):
    ours = [dict(d, **{"class": "name"}) for d in _dets()][::-1]  # order and extra keys do not matter
    assert oracle.compare_detections(_write(tmp_path / "ours.json", ours, timing_ms=1.0), det_ref, verbose=False)


def test_compare_detections_small_box_error_passes(tmp_path, det_ref):
    ours = _dets()
    ours[3]["box"][2] += 0.5
    ours[4]["score"] += 5e-4
    assert oracle.compare_detections(_write(tmp_path / "ours.json", ours), det_ref, 1.0, 1e-3, verbose=False)


def test_compare_detections_moved_box_fails(tmp_path, det_ref):
    ours = _dets()
    ours[3]["box"][1] += 2.0
    assert not oracle.compare_detections(_write(tmp_path / "ours.json", ours), det_ref, 1.0, 1e-3, verbose=False)


def test_compare_detections_wrong_class_fails(tmp_path, det_ref):
    ours = _dets()
    ours[0]["class_id"] = (ours[0]["class_id"] + 1) % 80
    assert not oracle.compare_detections(_write(tmp_path / "ours.json", ours), det_ref, verbose=False)


def test_compare_detections_wrong_score_fails(tmp_path, det_ref):
    ours = _dets()
    ours[2]["score"] -= 0.01
    assert not oracle.compare_detections(_write(tmp_path / "ours.json", ours), det_ref, verbose=False)


def test_compare_detections_missing_fails(tmp_path, det_ref):
    ours = _dets()
    del ours[5]
    assert not oracle.compare_detections(_write(tmp_path / "ours.json", ours), det_ref, verbose=False)


def test_compare_detections_extra_fails(tmp_path, det_ref):
    ours = _dets() + [{"class_id": 3, "score": 0.7, "box": [1.0, 2.0, 3.0, 4.0]}]
    assert not oracle.compare_detections(_write(tmp_path / "ours.json", ours), det_ref, verbose=False)


def test_compare_detections_image_size_mismatch_fails(tmp_path, det_ref):
    p = _write(tmp_path / "ours.json", _dets())
    d = json.loads(p.read_text())
    d["image"]["width"] = 640
    p.write_text(json.dumps(d))
    assert not oracle.compare_detections(p, det_ref, verbose=False)


def test_compare_detections_borderline_may_differ(tmp_path):
    """A detection whose score sits on the conf threshold may be present on one side only."""
    ref = _dets() + [{"class_id": 7, "score": 0.2503, "box": [5.0, 5.0, 50.0, 50.0]}]
    ours = _dets() + [{"class_id": 9, "score": 0.2502, "box": [60.0, 5.0, 90.0, 50.0]}]
    assert oracle.compare_detections(_write(tmp_path / "o.json", ours), _write(tmp_path / "r.json", ref),
                                     verbose=False)


# ---------------------------------------------------------------------------------------------------------------------
# checkpoint, input and reference data, on a yolo26n checkpoint
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    pytest.importorskip("ultralytics")
    d = tmp_path_factory.mktemp("oracle")
    oracle.make_checkpoint("yolo26n.yaml", d / "a" / "yolo26n.pt", seed=0)
    return d


@pytest.fixture(scope="module")
def ckpt(work):
    import torch

    return torch.load(work / "a" / "yolo26n.pt", map_location="cpu", weights_only=False)


@pytest.fixture(scope="module")
def bus(work):
    """Reference layers and predictor output for bus.jpg at 640."""
    image = oracle.sample_image("bus.jpg")
    oracle.make_input(image, 640, work / "bus.npy")
    oracle.reference_layers(work / "a" / "yolo26n.pt", work / "bus.npy", work / "layers")
    ref = oracle.reference_predict(work / "a" / "yolo26n.pt", image, 640, 0.25, work / "bus.json",
                                   save_input=work / "fed.npy")
    return work, ref


def test_checkpoint_deterministic(work):
    oracle.make_checkpoint("yolo26n.yaml", work / "b" / "yolo26n.pt", seed=0)
    assert (work / "a" / "yolo26n.pt").read_bytes() == (work / "b" / "yolo26n.pt").read_bytes()


def test_checkpoint_seed_matters(work, ckpt):
    import torch

    oracle.make_checkpoint("yolo26n.yaml", work / "c" / "yolo26n.pt", seed=1)
    other = torch.load(work / "c" / "yolo26n.pt", map_location="cpu", weights_only=False)
    a, b = ckpt["model"].state_dict(), other["model"].state_dict()
    assert not torch.equal(a["model.0.conv.weight"], b["model.0.conv.weight"])


def test_checkpoint_layout_like_strip_optimizer(ckpt):
    import torch

    from ultralytics.utils import DEFAULT_CFG_KEYS

    assert set(ckpt) == {"date", "version", "license", "docs", "epoch", "best_fitness", "model", "ema", "updates",
                         "optimizer", "scaler", "train_args", "train_metrics", "train_results", "git"}
    assert ckpt["epoch"] == -1 and ckpt["ema"] is None and ckpt["optimizer"] is None and ckpt["best_fitness"] is None
    assert set(ckpt["train_args"]) <= set(DEFAULT_CFG_KEYS)
    assert ckpt["train_args"]["task"] == "detect" and ckpt["train_args"]["imgsz"] == 640
    m = ckpt["model"]
    assert isinstance(m.args, dict) and m.criterion is None
    params = list(m.parameters())
    assert all(p.dtype == torch.float16 and not p.requires_grad for p in params)
    assert all(b.dtype == torch.float16 for n, b in m.named_buffers() if "running" in n)
    assert len(m.state_dict()) == 708  # spec §5.1, det n


def test_checkpoint_bn_statistics_are_not_identity(ckpt):
    import torch

    bns = [b for b in ckpt["model"].modules() if isinstance(b, torch.nn.BatchNorm2d)]
    assert len(bns) > 100
    for b in bns:
        assert b.eps == pytest.approx(1e-3)
    means = torch.cat([b.running_mean.float() for b in bns])
    vars_ = torch.cat([b.running_var.float() for b in bns])
    gammas = torch.cat([b.weight.float() for b in bns])
    betas = torch.cat([b.bias.float() for b in bns])
    assert (means != 0).float().mean() > 0.99 and means.abs().mean() > 0.01
    assert (vars_ != 1).float().mean() > 0.99 and bool(torch.all(vars_ > 0))
    # U(0.5, 1.5), except the attention q/k channels, tempered by oracle.ATTN_QK_GAIN
    assert 0.5 * oracle.ATTN_QK_GAIN <= float(gammas.min()) and float(gammas.max()) <= 1.5 and gammas.std() > 0.2
    assert betas.abs().mean() > 0.05
    # Calibrated on real images: no per-layer variance collapses to the initial value
    for b in bns:
        assert not torch.allclose(b.running_var.float(), torch.ones_like(b.running_var.float()))


def test_make_input_is_what_the_predictor_feeds(bus):
    work, _ = bus
    x, fed = np.load(work / "bus.npy"), np.load(work / "fed.npy")
    assert x.shape == (1, 3, 640, 640) and x.dtype == np.float32
    assert np.array_equal(x, fed)
    assert 0.0 <= x.min() and x.max() <= 1.0
    # bus.jpg is 810x1080 (portrait): the full square letterbox pads left and right with 114
    assert np.all(x[0, :, :, 0] == np.float32(114 / 255))


def test_reference_layers_files(bus):
    work, _ = bus
    d = work / "layers"
    meta = json.loads((d / "layers.json").read_text())["layers"]
    assert [m["index"] for m in meta] == list(range(24))
    for m in meta:
        a = np.load(d / f"layer_{m['index']:02d}.npy")
        assert a.dtype == np.float32 and list(a.shape) == m["shape"] and np.all(np.isfinite(a))
    assert np.load(d / "layer_00.npy").shape == (1, 16, 320, 320)
    y = np.load(d / "output0.npy")
    assert y.shape == (1, 300, 6)
    assert np.array_equal(y, np.load(d / "layer_23.npy"))
    assert np.all(np.diff(y[0, :, 4]) <= 0)  # sorted by score
    assert len(np.unique(y[0, :, 4])) > 250  # head biases perturbed: scores are not all identical
    assert np.all(y[0, :, 5] == np.round(y[0, :, 5])) and y[0, :, 5].max() < 80


def test_reference_predict_matches_layers(bus):
    """The predictor's detections are output0's rows above conf, scaled back to the image."""
    from ultralytics.utils import ops

    work, ref = bus
    assert ref["image"] == {"width": 810, "height": 1080}
    assert len(ref["detections"]) > 0
    y = np.load(work / "layers" / "output0.npy")[0]
    y = y[y[:, 4] > 0.25]
    import torch

    boxes = ops.scale_boxes((640, 640), torch.from_numpy(y[:, :4].copy()), (1080, 810)).numpy()
    dets = [{"class_id": int(r[5]), "score": float(r[4]), "box": [float(v) for v in b]} for r, b in zip(y, boxes)]
    p = work / "from_layers.json"
    p.write_text(json.dumps({"image": ref["image"], "detections": dets}))
    assert oracle.compare_detections(p, work / "bus.json", 0.05, 1e-4, verbose=False)


def test_compare_layers_on_real_reference(bus, tmp_path):
    work, _ = bus
    ours = tmp_path / "ours"
    shutil.copytree(work / "layers", ours)
    assert oracle.compare_layers(ours, work / "layers", 1e-4, verbose=False)
    a = np.load(ours / "layer_13.npy")
    a[0, 7, 11, 13] += 1e-2 * np.abs(a).max()
    np.save(ours / "layer_13.npy", a)
    assert not oracle.compare_layers(ours, work / "layers", 1e-4, verbose=False)


def test_cli_exit_codes(bus, tmp_path):
    work, _ = bus
    ours = tmp_path / "ours"
    shutil.copytree(work / "layers", ours)
    assert oracle.main(["compare-layers", "--ours", str(ours), "--ref", str(work / "layers")]) == 0
    np.save(ours / "output0.npy", np.load(ours / "output0.npy")[:, :299])
    assert oracle.main(["compare-layers", "--ours", str(ours), "--ref", str(work / "layers")]) == 1
    assert oracle.main(["compare-detections", "--ours", str(work / "bus.json"), "--ref", str(work / "bus.json")]) == 0
    assert oracle.main(["make-checkpoint", "--cfg", "yolo99n.yaml", "--out", str(tmp_path / "x.pt")]) == 1
