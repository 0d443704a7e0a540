"""Tests of tools/oracle.py itself: the comparisons must catch what they claim to catch, and the reference data
must be what Ultralytics computes. Synthetic arrays for the comparison logic; a yolo26n checkpoint made once per
module for the rest."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import json  # noqa: E402
import math  # noqa: E402
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


def test_compare_rows_baseline_swap_at_cut_keeps_the_bound(layer_dirs, tmp_path):
    """PyTorch's fp32 rows may hold another candidate at the top-k cut (same class, another box): that row must
    not count as PyTorch's error, or the bound max(tol, 3x PyTorch's error) would excuse any error of ours."""
    ours, ref = layer_dirs
    base = tmp_path / "base"
    shutil.copytree(ref, base)
    r = np.load(ref / "output0.npy")

    def swap(a):
        a[0, -1, :4] = [300.0, 200.0, 420.0, 330.0]  # far from the ref's last row, same class, tied score
        a[0, -1, 4] = r[0, -1, 4] + 1e-6

    _edit(base / "output0.npy", swap)
    assert oracle.compare_layers(ours, ref, 1e-4, verbose=False, baseline=base)
    _edit(ours / "output0.npy", lambda a: a.__setitem__((0, 10, 0), a[0, 10, 0] + 1.0))  # 1 px at 640 > 1e-4
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False, baseline=base)


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


# ---------------------------------------------------------------------------------------------------------------------
# seg / pose / obb / classify: RLE masks, comparisons on synthetic JSON and rows
# ---------------------------------------------------------------------------------------------------------------------


def test_rle_is_coco_uncompressed_column_major():
    m = np.array([[0, 1, 1], [0, 1, 0]], bool)  # column-major: 0 0 | 1 1 | 1 0
    assert oracle.rle_encode(m) == {"size": [2, 3], "counts": [2, 3, 1]}
    assert oracle.rle_encode(~m) == {"size": [2, 3], "counts": [0, 2, 3, 1]}  # starts with a (zero) run of 0s
    assert oracle.rle_encode(np.zeros((4, 5), bool)) == {"size": [4, 5], "counts": [20]}
    rng = np.random.default_rng(0)
    for _ in range(5):
        r = rng.random((37, 53)) < rng.uniform(0.05, 0.95)
        assert np.array_equal(oracle.rle_decode(oracle.rle_encode(r)), r)


def test_rle_decode_refuses_bad_counts():
    with pytest.raises(oracle.OracleError):
        oracle.rle_decode({"size": [2, 3], "counts": [2, 3]})  # 5 != 6 pixels
    with pytest.raises(oracle.OracleError):
        oracle.rle_decode({"size": [2, 3], "counts": [7, -1]})


def _blob(h, w, cx, cy, rx, ry):
    yy, xx = np.mgrid[:h, :w]
    return ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1


H_IMG, W_IMG = 120, 160


def _seg_dets(n=8, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        cx, cy = rng.uniform(30, 130), rng.uniform(25, 95)
        rx, ry = rng.uniform(12, 25), rng.uniform(10, 20)
        m = _blob(H_IMG, W_IMG, cx, cy, rx, ry)
        out.append({"class_id": int(rng.integers(0, 80)), "score": float(0.9 - 0.05 * i),
                    "box": [cx - rx, cy - ry, cx + rx, cy + ry], "mask": oracle.rle_encode(m)})
    return out


def _write_task(path, task, dets=None, **extra):
    body = {"task": task, "image": {"width": W_IMG, "height": H_IMG}, "imgsz": [W_IMG, W_IMG], "conf": 0.25,
            "max_det": 300}
    body.update(extra)  # gain 1: a prototype cell is 4x4 pixels, mask_cells=4 allows 64 pixels
    if dets is not None:
        body["detections"] = dets
    path.write_text(json.dumps(body))
    return path


def _ours_seg(tmp_path, edit):
    dets = _seg_dets()
    edit(dets)
    return _write_task(tmp_path / "ours.json", "segment", dets)


def _edit_mask(d, fn):
    m = oracle.rle_decode(d["mask"])
    fn(m)
    d["mask"] = oracle.rle_encode(m)


@pytest.fixture
def seg_ref(tmp_path):
    return _write_task(tmp_path / "ref.json", "segment", _seg_dets())


def test_compare_seg_exact_passes(tmp_path, seg_ref):
    assert oracle.compare_detections(_ours_seg(tmp_path, lambda d: d.reverse()), seg_ref, verbose=False)


def test_compare_seg_boundary_pixel_passes(tmp_path, seg_ref):
    def edit(dets):
        m = oracle.rle_decode(dets[0]["mask"])
        ys, xs = np.nonzero(m)
        _edit_mask(dets[0], lambda a: a.__setitem__((ys[0], xs[0]), False))  # 1 pixel of several hundred

    assert oracle.compare_detections(_ours_seg(tmp_path, edit), seg_ref, verbose=False)


def test_compare_seg_perturbed_mask_fails(tmp_path, seg_ref):
    def edit(dets):
        _edit_mask(dets[2], lambda a: a.__setitem__(slice(None), np.roll(a, 4, axis=1)))  # 4 px to the right

    assert not oracle.compare_detections(_ours_seg(tmp_path, edit), seg_ref, verbose=False)


def test_compare_seg_transposed_rle_fails(tmp_path, seg_ref):
    """Row-major counts are a different mask (and a different size): the RLE must be column-major."""
    def edit(dets):
        m = oracle.rle_decode(dets[1]["mask"])
        dets[1]["mask"] = oracle.rle_encode(m.T.copy())
        dets[1]["mask"]["size"] = [H_IMG, W_IMG]

    assert not oracle.compare_detections(_ours_seg(tmp_path, edit), seg_ref, verbose=False)


def test_compare_seg_missing_or_bad_mask_fails(tmp_path, seg_ref):
    assert not oracle.compare_detections(_ours_seg(tmp_path, lambda d: d[0].pop("mask")), seg_ref, verbose=False)
    bad = {"size": [H_IMG, W_IMG], "counts": [5]}
    assert not oracle.compare_detections(_ours_seg(tmp_path, lambda d: d[3].__setitem__("mask", bad)), seg_ref,
                                         verbose=False)


def test_compare_seg_tiny_mask_may_differ_or_vanish(tmp_path):
    """The predictor drops empty masks: one of a few cells may be absent on one side, or differ entirely."""
    tiny = np.zeros((H_IMG, W_IMG), bool)
    tiny[50:55, 60:66] = True
    ref = _seg_dets() + [{"class_id": 5, "score": 0.6, "box": [60.0, 50.0, 66.0, 55.0],
                          "mask": oracle.rle_encode(tiny)}]
    r = _write_task(tmp_path / "r.json", "segment", ref)
    assert oracle.compare_detections(_write_task(tmp_path / "o.json", "segment", _seg_dets()), r, verbose=False)
    other = np.zeros_like(tiny)
    other[52:58, 61:68] = True
    ours = _seg_dets() + [dict(ref[-1], mask=oracle.rle_encode(other))]
    assert oracle.compare_detections(_write_task(tmp_path / "o.json", "segment", ours), r, verbose=False)


def test_compare_seg_allowance_is_in_prototype_cells(tmp_path):
    """The same 4-pixel shift is within 4 cells when the input is 40x40 (a cell: 16x16 image pixels), not at
    160x160 (4x4)."""
    ours = _seg_dets()
    _edit_mask(ours[2], lambda a: a.__setitem__(slice(None), np.roll(a, 4, axis=1)))
    o = _write_task(tmp_path / "o.json", "segment", ours)
    assert not oracle.compare_detections(o, _write_task(tmp_path / "r.json", "segment", _seg_dets()), verbose=False)
    coarse = _write_task(tmp_path / "r.json", "segment", _seg_dets(), imgsz=[40, 40])
    assert oracle.compare_detections(o, coarse, verbose=False)
    assert not oracle.compare_detections(o, coarse, verbose=False, mask_cells=1)


def test_compare_seg_missing_detection_fails(tmp_path, seg_ref):
    assert not oracle.compare_detections(_ours_seg(tmp_path, lambda d: d.pop(4)), seg_ref, verbose=False)


def _pose_dets(n=6, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x, y = rng.uniform(0, 100, 2)
        kp = np.concatenate([rng.uniform(0, 150, (17, 2)), rng.uniform(0, 1, (17, 1))], 1)
        out.append({"class_id": 0, "score": float(0.9 - 0.05 * i), "box": [x, y, x + 40.0, y + 60.0],
                    "keypoints": kp.tolist()})
    return out


@pytest.mark.parametrize("edit,ok", [
    (lambda d: None, True),
    (lambda d: d[1]["keypoints"][3].__setitem__(0, d[1]["keypoints"][3][0] + 0.6), True),
    (lambda d: d[1]["keypoints"][3].__setitem__(0, d[1]["keypoints"][3][0] + 2.0), False),
    (lambda d: d[2]["keypoints"][16].__setitem__(1, d[2]["keypoints"][16][1] - 1.5), False),
    (lambda d: d[0]["keypoints"][5].__setitem__(2, d[0]["keypoints"][5][2] + 5e-4), True),
    (lambda d: d[0]["keypoints"][5].__setitem__(2, d[0]["keypoints"][5][2] + 1e-2), False),
    (lambda d: d[3].__setitem__("keypoints", d[3]["keypoints"][:16]), False),
    (lambda d: d[3].pop("keypoints"), False),
], ids=["exact", "x+0.6px", "x+2px", "y-1.5px", "v+5e-4", "v+1e-2", "16-keypoints", "no-keypoints"])
def test_compare_pose(tmp_path, edit, ok):
    ref = _write_task(tmp_path / "r.json", "pose", _pose_dets())
    ours = _pose_dets()
    edit(ours)
    assert oracle.compare_detections(_write_task(tmp_path / "o.json", "pose", ours[::-1]), ref, verbose=False) == ok


def _obb_dets(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [{"class_id": int(rng.integers(0, 15)), "score": float(0.9 - 0.05 * i),
             "box": [float(rng.uniform(0, 1000)), float(rng.uniform(0, 700)), float(rng.uniform(20, 90)),
                     float(rng.uniform(100, 200))], "angle": float(rng.uniform(-2, 5))} for i in range(n)]


def _swap_wh(d):
    d["box"][2], d["box"][3] = d["box"][3], d["box"][2]
    d["angle"] += np.pi / 2


@pytest.mark.parametrize("edit,ok", [
    (lambda d: None, True),
    (lambda d: d[1].__setitem__("angle", d[1]["angle"] + 5e-4), True),
    (lambda d: d[1].__setitem__("angle", d[1]["angle"] + 3e-3), False),
    (lambda d: d[2].__setitem__("angle", d[2]["angle"] + np.pi), True),          # the same rectangle
    (lambda d: d[2].__setitem__("angle", d[2]["angle"] - 3 * np.pi), True),
    (lambda d: d[2].__setitem__("angle", d[2]["angle"] + np.pi / 2), False),     # w and h not swapped
    (lambda d: _swap_wh(d[3]), True),                                             # regularised form
    (lambda d: d[4]["box"].__setitem__(2, -d[4]["box"][2]), True),               # a negative width
    (lambda d: d[0]["box"].__setitem__(0, d[0]["box"][0] + 2.0), False),
    (lambda d: d[0]["box"].__setitem__(3, d[0]["box"][3] - 1.5), False),
    (lambda d: d[5].pop("angle"), False),
], ids=["exact", "+5e-4rad", "+3e-3rad", "+pi", "-3pi", "+pi/2-unswapped", "swapped-wh+pi/2", "negative-w",
        "cx+2px", "h-1.5px", "no-angle"])
def test_compare_obb(tmp_path, edit, ok):
    ref = _write_task(tmp_path / "r.json", "obb", _obb_dets())
    ours = _obb_dets()
    edit(ours)
    assert oracle.compare_detections(_write_task(tmp_path / "o.json", "obb", ours), ref, verbose=False) == ok


def _probs(seed=0, nc=1000):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(nc) * 3
    p = np.exp(z - z.max())
    return p / p.sum()


def _top5(p, order=None):
    order = np.argsort(-p, kind="stable")[:5] if order is None else order
    return [{"class_id": int(c), "class": f"n{int(c)}", "score": float(p[c])} for c in order]


@pytest.fixture
def cls_ref(tmp_path):
    p = _probs()
    return _write_task(tmp_path / "r.json", "classify", [], top5=_top5(p), probs=p.tolist()), p


def test_compare_cls_exact_passes(tmp_path, cls_ref):
    ref, p = cls_ref
    assert oracle.compare_detections(_write_task(tmp_path / "o.json", "classify", top5=_top5(p)), ref, verbose=False)


def test_compare_cls_probability_off_fails(tmp_path, cls_ref):
    ref, p = cls_ref
    t = _top5(p)
    t[2]["score"] += 2e-4
    assert not oracle.compare_detections(_write_task(tmp_path / "o.json", "classify", top5=t), ref, verbose=False)
    t[2]["score"] -= 1.5e-4  # 5e-5 off: within 1e-4
    assert oracle.compare_detections(_write_task(tmp_path / "o.json", "classify", top5=t), ref, verbose=False)


def test_compare_cls_order_and_classes(tmp_path, cls_ref):
    ref, p = cls_ref
    order = np.argsort(-p, kind="stable")
    for o, ok in [(order[[1, 0, 2, 3, 4]], False),     # swapped ranks with distinct probabilities
                  (order[[0, 1, 2, 3, 5]], False),     # the 6th class instead of the 5th
                  (order[:4], False),                  # four entries
                  (order[[0, 1, 2, 3, 3]], False)]:    # a class twice
        out = _write_task(tmp_path / "o.json", "classify", top5=_top5(p, o))
        assert oracle.compare_detections(out, ref, verbose=False) == ok, o
    assert not oracle.compare_detections(_write_task(tmp_path / "o.json", "classify"), ref, verbose=False)


def test_compare_cls_ties_may_swap(tmp_path):
    p = _probs()
    order = np.argsort(-p, kind="stable")
    p[order[3]] = p[order[4]] = p[order[5]] = (p[order[3]] + p[order[4]]) / 2  # a three-way tie at ranks 4-6
    p[order[4]] += 4e-7
    ref = _write_task(tmp_path / "r.json", "classify", [], top5=_top5(p, order[:5]), probs=p.tolist())
    for o in (order[[0, 1, 2, 4, 3]], order[[0, 1, 2, 3, 5]], order[[0, 1, 2, 5, 4]]):
        assert oracle.compare_detections(_write_task(tmp_path / "o.json", "classify", top5=_top5(p, o)), ref,
                                         verbose=False), o


def test_json_task_guess():
    assert oracle.json_task({"detections": [{"mask": {}}]}) == "segment"
    assert oracle.json_task({"detections": [{"keypoints": []}]}) == "pose"
    assert oracle.json_task({"detections": [{"angle": 0.0}]}) == "obb"
    assert oracle.json_task({"top5": []}) == "classify"
    assert oracle.json_task({"detections": []}) == "detect"
    assert oracle.json_task({"task": "pose", "detections": []}) == "pose"


@pytest.mark.parametrize("ncol", [38, 57, 7])
def test_compare_layers_rows_with_extra_channels(tmp_path, ncol):
    """seg (…,38), pose (…,57), obb (…,7) rows: matched by class and nearest row, every column checked."""
    rng = np.random.default_rng(ncol)
    rows = _rows(rng, nc=15)
    extra = rng.standard_normal((1, 300, ncol - 6)).astype(np.float32) * (50 if ncol == 57 else 2)
    r = np.concatenate([rows, extra], 2)
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    ref.mkdir()
    ours.mkdir()
    np.save(ref / "output0.npy", r)
    np.save(ours / "output0.npy", r[:, np.random.default_rng(1).permutation(300)])
    assert oracle.compare_layers(ours, ref, 1e-4, verbose=False)
    o = r.copy()
    o[0, 7, ncol - 1] += 1e-3 * np.abs(r[..., ncol - 1]).max()  # the last extra column of one row
    np.save(ours / "output0.npy", o)
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


def test_compare_layers_probability_vector(tmp_path):
    p = _probs()[None].astype(np.float32)
    ref, ours = tmp_path / "ref", tmp_path / "ours"
    ref.mkdir()
    ours.mkdir()
    for name in ("layer_10.npy", "output0.npy"):
        np.save(ref / name, p)
        np.save(ours / name, p)
    assert oracle.compare_layers(ours, ref, 1e-4, verbose=False)
    q = p.copy()
    q[0, 123] += 1e-3 * p.max()
    np.save(ours / "output0.npy", q)
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)
    np.save(ours / "output0.npy", p[:, ::-1])  # the right values in the wrong order
    assert not oracle.compare_layers(ours, ref, 1e-4, verbose=False)


# ---------------------------------------------------------------------------------------------------------------------
# seg / pose / obb / classify on real n checkpoints: checkpoints, reference layers, predictor output
# ---------------------------------------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
# task -> (config suffix, imgsz, model class, nc of the released checkpoints, head layer index, head shape)
TASKS = {
    "segment": ("-seg", 640, "SegmentationModel", 80, 23, (1, 300, 38)),
    "pose": ("-pose", 640, "PoseModel", 1, 23, (1, 300, 57)),
    "obb": ("-obb", 1024, "OBBModel", 15, 23, (1, 300, 7)),
    "classify": ("-cls", 224, "ClassificationModel", 1000, 10, (1, 1000)),
}


@pytest.fixture(scope="module", params=list(TASKS))
def task_ref(request, tmp_path_factory):
    """A yolo26n checkpoint of the task, its reference layers on bus.jpg, and the predictor's output on it."""
    pytest.importorskip("ultralytics")
    task = request.param
    sfx, imgsz = TASKS[task][:2]
    d = tmp_path_factory.mktemp(task)
    pt = oracle.make_checkpoint(f"yolo26n{sfx}.yaml", d / "a" / f"yolo26n{sfx}.pt", seed=0)
    image = oracle.sample_image("bus.jpg")
    oracle.make_input(image, imgsz, d / "bus.npy", task=task)
    oracle.reference_layers(pt, d / "bus.npy", d / "layers")
    ref = oracle.reference_predict(pt, image, imgsz, 0.25, d / "bus.json", save_input=d / "fed.npy")
    return task, d, pt, ref


def test_task_checkpoint(task_ref):
    """Deterministic, loads in Ultralytics as the task's model with the released nc, and its embedded layer
    lists are those of the manifests' architecture file (what carve's frontend checks)."""
    import torch
    import yaml

    task, d, pt, _ = task_ref
    sfx, imgsz, cls_name, nc = TASKS[task][:4]
    oracle.make_checkpoint(f"yolo26n{sfx}.yaml", d / "b" / pt.name, seed=0)
    assert (d / "b" / pt.name).read_bytes() == pt.read_bytes()
    ck = torch.load(pt, map_location="cpu", weights_only=False)
    m = ck["model"]
    assert type(m).__name__ == cls_name and m.nc == nc and len(m.names) == nc
    assert ck["train_args"]["task"] == task and ck["train_args"]["imgsz"] == imgsz
    manifest = yaml.safe_load((REPO / "manifests" / f"yolo26n{sfx}.yaml").read_text())
    assert manifest["task"] == task and manifest["input"]["imgsz"] == imgsz
    arch = yaml.safe_load((REPO / "manifests" / manifest["architecture"]["config"]).read_text())
    for part in ("backbone", "head"):
        assert m.yaml[part] == arch[part], part
    if task == "pose":
        assert list(m.kpt_shape) == arch["kpt_shape"] == [17, 3]


@pytest.mark.parametrize("sfx", ["", "-seg", "-pose", "-obb", "-cls"])
def test_manifest_arch_files_are_ultralytics_configs(sfx):
    """manifests/arch/yolo26{sfx}.yaml holds the installed Ultralytics config's lists, scales and head keys."""
    pytest.importorskip("ultralytics")
    import yaml

    from ultralytics.utils import ROOT

    theirs = yaml.safe_load((ROOT / "cfg" / "models" / "26" / f"yolo26{sfx}.yaml").read_text())
    for scale in "nsmlx":
        manifest = yaml.safe_load((REPO / "manifests" / f"yolo26{scale}{sfx}.yaml").read_text())
        assert manifest["architecture"]["scale"] == scale
        ours = yaml.safe_load((REPO / "manifests" / manifest["architecture"]["config"]).read_text())
        for key in ("backbone", "head", "scales", "nc", "end2end", "reg_max", "kpt_shape"):
            assert ours.get(key) == theirs.get(key), (scale, key)


def test_task_reference_layers(task_ref):
    task, d, _, ref = task_ref
    head, shape = TASKS[task][4:]
    meta = json.loads((d / "layers" / "layers.json").read_text())["layers"]
    assert [m["index"] for m in meta] == list(range(head + 1))
    y = np.load(d / "layers" / "output0.npy")
    assert y.shape == shape and np.array_equal(y, np.load(d / "layers" / f"layer_{head:02d}.npy"))
    assert np.all(np.isfinite(y))
    outputs = sorted(p.name for p in (d / "layers").glob("output*.npy"))
    assert outputs == (["output0.npy", "output1.npy"] if task == "segment" else ["output0.npy"])
    if task == "segment":
        assert np.load(d / "layers" / "output1.npy").shape == (1, 32, 160, 160)
    if task == "classify":
        assert y.sum() == pytest.approx(1.0, abs=1e-5) and y.max() > 0.05  # a peaked softmax (CLS_LOGIT_STD)
    else:
        assert np.all(np.diff(y[0, :, 4]) <= 0) and y[0, :, 5].max() < TASKS[task][3]
        assert len(ref["detections"]) >= 10


def _unletterbox(in_hw, h0, w0):
    """(pad_x, pad_y, gain_x, gain_y) of ops.scale_boxes / scale_coords: the letterbox's rounded content size
    per axis over the image's, and its rounded left/top padding."""
    gain = min(in_hw[0] / h0, in_hw[1] / w0)
    nh, nw = max(round(h0 * gain), 1), max(round(w0 * gain), 1)
    return round((in_hw[1] - nw) / 2 - 0.1), round((in_hw[0] - nh) / 2 - 0.1), nw / w0, nh / h0


def _scale_xy(xy, in_hw, h0, w0, clip=True):
    """Input-pixel x, y (..., 2) to original-image pixels, clipped to [0, w0] x [0, h0]."""
    px, py, gx, gy = _unletterbox(in_hw, h0, w0)
    out = np.stack([(xy[..., 0] - px) / gx, (xy[..., 1] - py) / gy], -1)
    if clip:
        out[..., 0] = out[..., 0].clip(0, w0)
        out[..., 1] = out[..., 1].clip(0, h0)
    return out


def _taps(n_out, n_in):
    """F.interpolate's bilinear taps along one axis (align_corners=False): i0, i1, weight of i1."""
    s = np.maximum((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0.0)
    i0 = np.minimum(np.floor(s).astype(int), n_in - 1)
    return i0, np.minimum(i0 + 1, n_in - 1), s - i0


def _bilinear(a, out_h, out_w, rows=slice(None), cols=slice(None)):
    """F.interpolate(a[None], (out_h, out_w), mode='bilinear', align_corners=False)[0] of (N, h, w), in numpy;
    only the output rows / cols asked (each output pixel computed as in the whole image)."""
    y0, y1, ly = (t[rows] for t in _taps(out_h, a.shape[1]))
    x0, x1, lx = (t[cols] for t in _taps(out_w, a.shape[2]))
    r = a[:, y0] * (1 - ly[:, None]) + a[:, y1] * ly[:, None]
    return r[:, :, x0] * (1 - lx) + r[:, :, x1] * lx


def _retina_masks(coeffs, protos, boxes0, h0, w0):
    """ops.process_mask_native in numpy: logits = coeffs @ protos; bilinear x f (1, 2 or 4, the least that
    crops the letterbox on whole pixels); crop the padding; bilinear to (h0, w0); > 0; zero outside the box
    (column c kept when x1 <= c < x2, rows alike). One mask at a time, and only the box's pixels computed."""
    c, mh, mw = protos.shape
    gain = min(4 * mh / h0, 4 * mw / w0)
    pad = (4 * mh - max(round(h0 * gain), 1)) | (4 * mw - max(round(w0 * gain), 1))
    f = 4 // math.gcd(4, pad | pad // 2)
    hh, ww = f * mh, f * mw
    g = min(hh / h0, ww / w0)
    ch, cw = max(round(h0 * g), 1), max(round(w0 * g), 1)
    top, left = round((hh - ch) / 2 - 0.1), round((ww - cw) / 2 - 0.1)
    logits = (coeffs @ protos.reshape(c, -1)).reshape(-1, mh, mw)
    m = np.zeros((len(coeffs), h0, w0), bool)
    for k, (x1, y1, x2, y2) in enumerate(boxes0):
        r0, r1 = min(max(math.ceil(y1), 0), h0), min(max(math.ceil(y2), 0), h0)   # y1 <= row < y2
        c0, c1 = min(max(math.ceil(x1), 0), w0), min(max(math.ceil(x2), 0), w0)
        if r0 >= r1 or c0 >= c1:
            continue
        up = _bilinear(logits[k:k + 1], hh, ww) if f > 1 else logits[k:k + 1]
        crop = up[:, top:top + ch, left:left + cw]
        m[k, r0:r1, c0:c1] = _bilinear(crop, h0, w0, slice(r0, r1), slice(c0, c1))[0] > 0
    return m


def test_task_predict_matches_layers(task_ref):
    """The predictor's output is the head's y post-processed as documented (numpy here, C in the demo): rows
    above conf scaled back to the image (boxes clipped; obb: pad off cx, cy, all four divided by the gain, no
    clip, angle as is; keypoints like boxes, visibility as is), seg masks by _retina_masks (empty ones
    dropped), classify's top-5 of the probabilities."""
    task, d, _, ref = task_ref
    imgsz = TASKS[task][1]
    x, fed = np.load(d / "bus.npy"), np.load(d / "fed.npy")
    assert np.array_equal(x, fed)  # make_input is what the predictor feeds, classify's crop included
    h0, w0 = ref["image"]["height"], ref["image"]["width"]
    y = np.load(d / "layers" / "output0.npy")[0].astype(np.float64)
    out = {"task": task, "image": ref["image"]}
    if task == "classify":
        order = np.argsort(-y, kind="stable")[:5]
        out["top5"] = [{"class_id": int(c), "score": float(y[c])} for c in order]
    else:
        y = y[y[:, 4] > 0.25]
        dets = []
        if task == "obb":
            c = _scale_xy(y[:, :2], (imgsz, imgsz), h0, w0, clip=False)
            _, _, gx, gy = _unletterbox((imgsz, imgsz), h0, w0)
            wh = y[:, 2:4] / np.array([gx, gy])
            for r, ci, whi in zip(y, c, wh):
                dets.append({"class_id": int(r[5]), "score": float(r[4]), "box": [*map(float, ci), *map(float, whi)],
                             "angle": float(r[6])})
        else:
            boxes = _scale_xy(y[:, :4].reshape(-1, 2, 2), (imgsz, imgsz), h0, w0).reshape(-1, 4)
            for r, b in zip(y, boxes):
                dets.append({"class_id": int(r[5]), "score": float(r[4]), "box": [float(v) for v in b]})
            if task == "pose":
                k = y[:, 6:].reshape(len(y), 17, 3)
                xy = _scale_xy(k[..., :2], (imgsz, imgsz), h0, w0)
                for det, kxy, kv in zip(dets, xy, k[..., 2:]):
                    det["keypoints"] = np.concatenate([kxy, kv], -1).tolist()
            if task == "segment":
                protos = np.load(d / "layers" / "output1.npy")[0]
                masks = _retina_masks(y[:, 6:].astype(np.float32), protos, boxes.astype(np.float32), h0, w0)
                for det, m in zip(dets, masks):
                    det["mask"] = oracle.rle_encode(m)
                dets = [det for det, m in zip(dets, masks) if m.any()]
        out["detections"] = dets
    p = d / "from_layers.json"
    p.write_text(json.dumps(out))
    # prob_tol: the predictor's probabilities and the layer dump's are two float32 runs of the same fused model,
    # equal to about 1e-6 but not bit for bit on every CPU (an AMD EPYC gave 1.67e-6 on class 691's 0.57, a
    # Sapphire Rapids less than 1e-6); 1e-5 still fails a wrong softmax or a wrong class order by far
    assert oracle.compare_detections(p, d / "bus.json", 0.05, 1e-4, verbose=True, mask_iou=0.999, mask_cells=1,
                                     kpt_px=0.05, kpt_vis_tol=1e-4, angle_tol=1e-4, prob_tol=1e-5)


def test_task_compare_self_and_perturbed(task_ref, tmp_path):
    """The reference passes against itself; a small change of the task's own output fails."""
    task, d, _, ref = task_ref
    assert oracle.compare_detections(d / "bus.json", d / "bus.json", verbose=False)
    bad = json.loads((d / "bus.json").read_text())
    if task == "classify":
        bad["top5"][0]["score"] += 1e-3
    else:
        det = max(bad["detections"], key=lambda det: det["score"])
        if task == "segment":
            m = oracle.rle_decode(det["mask"])
            det["mask"] = oracle.rle_encode(np.roll(m, 3, axis=1))
        elif task == "pose":
            det["keypoints"][0][0] += 2.0
        else:
            det["angle"] += 0.01
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    assert not oracle.compare_detections(p, d / "bus.json", verbose=False)
