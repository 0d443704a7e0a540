"""Tests of carve.checkpoint: the torch-free .pt / .safetensors reader.

Fixtures are created with torch + ultralytics (skipped cleanly when they are missing); the
reader itself never imports torch. Malicious-pickle and corruption tests need only numpy.
"""

from __future__ import annotations

import copy
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.checkpoint import Checkpoint, ModuleInfo, read_checkpoint, write_safetensors  # noqa: E402
from carve.errors import CarveError  # noqa: E402

TOOL = REPO / "tools" / "pt_to_safetensors.py"


# --------------------------------------------------------------------------------------
# torch fixtures
# --------------------------------------------------------------------------------------


def _torch():
    torch = pytest.importorskip("torch")
    pytest.importorskip("ultralytics")
    return torch


def _build(cls_name: str, yaml: str):
    torch = _torch()
    import ultralytics.nn.tasks as tasks

    torch.manual_seed(0)
    return getattr(tasks, cls_name)(yaml, verbose=False)


def _stripped(model, half=True, **extra):
    """A checkpoint dict the way Ultralytics' strip_optimizer writes it."""
    m = copy.deepcopy(model)
    if half:
        m = m.half()
    for p in m.parameters():
        p.requires_grad_(False)
    task = {"DetectionModel": "detect", "SegmentationModel": "segment", "PoseModel": "pose",
            "OBBModel": "obb", "ClassificationModel": "classify"}[type(model).__name__]
    imgsz = 224 if task == "classify" else 640
    m.args = {"task": task, "imgsz": imgsz}
    ck = {
        "date": "2026-01-01T00:00:00",
        "version": "8.4.0",
        "license": "AGPL-3.0",
        "docs": "https://docs.ultralytics.com",
        "epoch": -1,
        "best_fitness": None,
        "model": m,
        "ema": None,
        "updates": None,
        "optimizer": None,
        "scaler": None,
        "train_args": {"task": task, "imgsz": imgsz},
        "train_metrics": {"metrics/mAP50(B)": 0.5},
        "train_results": None,
        "git": {"root": None},
    }
    ck.update(extra)
    return ck


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """Model building runs a few tiny forward passes; threads only contend for them."""
    try:
        import torch
    except ImportError:
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def det_model():
    return _build("DetectionModel", "yolo26n.yaml")


@pytest.fixture(scope="module")
def files(tmp_path_factory, det_model):
    """Checkpoint files shared by the tests of this module."""
    torch = _torch()
    d = tmp_path_factory.mktemp("ckpt")
    out = {}
    out["fp16"] = d / "yolo26n.pt"
    torch.save(_stripped(det_model), out["fp16"])

    out["fp32"] = d / "yolo26n_fp32.pt"
    torch.save(_stripped(det_model, half=False), out["fp32"])

    # In-training style: model None, ema = fp16 module with IterableSimpleNamespace args, an
    # optimizer state dict, saved through a buffer like the trainer (zip prefix 'archive/').
    from ultralytics.utils import IterableSimpleNamespace

    ema = copy.deepcopy(det_model).half()
    ema.args = IterableSimpleNamespace(task="detect", imgsz=320, save_dir=Path("/tmp/runs/x"))
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1, momentum=0.9)
    opt.zero_grad()
    opt.state_dict()
    buf = io.BytesIO()
    torch.save(
        {
            "epoch": 3,
            "model": None,
            "ema": ema,
            "updates": 10,
            "optimizer": opt.state_dict(),
            "train_args": {"task": "detect", "imgsz": 320, "project": PurePosixPath("/tmp/runs")},
        },
        buf,
    )
    out["ema"] = d / "last.pt"
    out["ema"].write_bytes(buf.getvalue())
    return out


@pytest.fixture(scope="module")
def det16(files):
    return read_checkpoint(files["fp16"])


# --------------------------------------------------------------------------------------
# reading real checkpoints
# --------------------------------------------------------------------------------------


def _assert_same_state(ck: Checkpoint, model, half=True):
    sd = model.state_dict()
    assert list(ck.tensors) == list(sd)  # same keys, same order as torch's state_dict()
    for k, v in sd.items():
        a = ck.tensors[k]
        ref = (v.half().float() if half and v.is_floating_point() else v).numpy()
        assert a.shape == tuple(v.shape), k
        if v.is_floating_point():
            assert a.dtype == np.float32 and a.flags.c_contiguous, k
        else:
            assert a.dtype == ref.dtype, k
        np.testing.assert_array_equal(a, ref, err_msg=k)


def test_fp16_stripped(det16, det_model, files):
    ck = det16
    assert isinstance(ck, Checkpoint)
    assert ck.format == "pt" and ck.path == str(files["fp16"])
    import hashlib

    assert ck.sha256 == hashlib.sha256(files["fp16"].read_bytes()).hexdigest()
    assert len(ck.tensors) == 708
    _assert_same_state(ck, det_model)
    assert ck.tensors["model.0.bn.num_batches_tracked"].dtype == np.int64
    assert ck.dtypes["model.0.conv.weight"] == "F16"
    assert ck.dtypes["model.0.bn.num_batches_tracked"] == "I64"

    assert ck.top_type == "ultralytics.nn.tasks.DetectionModel"
    assert ck.task == "detect" and ck.imgsz == 640
    assert ck.stride == [8.0, 16.0, 32.0]
    assert ck.names == {i: str(i) for i in range(80)}
    assert ck.yaml["scale"] == "n" and ck.yaml["nc"] == 80 and ck.yaml["end2end"] is True
    assert len(ck.yaml["backbone"]) + len(ck.yaml["head"]) == 24


def test_module_info(det16):
    mods = det16.modules
    assert all(isinstance(m, ModuleInfo) for m in mods.values())
    assert mods[""].type == "ultralytics.nn.tasks.DetectionModel"
    assert mods["model"].type == "torch.nn.modules.container.Sequential"
    assert mods["model.0"].type == "ultralytics.nn.modules.conv.Conv"
    assert mods["model.0"].attrs["i"] == 0 and mods["model.0"].attrs["f"] == -1
    assert mods["model.0"].attrs["type"] == "ultralytics.nn.modules.conv.Conv"
    conv = mods["model.0.conv"]
    assert conv.type == "torch.nn.modules.conv.Conv2d"
    assert conv.attrs["kernel_size"] == (3, 3) and conv.attrs["stride"] == (2, 2)
    assert conv.attrs["padding"] == (1, 1) and conv.attrs["groups"] == 1
    assert conv.attrs["in_channels"] == 3 and conv.attrs["out_channels"] == 16
    # BatchNorm eps/momentum of every BN
    bns = [m for m in mods.values() if m.type.endswith("BatchNorm2d")]
    assert bns and all(m.attrs["eps"] == 1e-3 for m in bns)
    # activations are decided by the object, not the class
    assert mods["model.0.act"].type == "torch.nn.modules.activation.SiLU"
    assert mods["model.9.cv1.act"].type == "torch.nn.modules.linear.Identity"
    assert mods["model.9.cv2.act"].type == "torch.nn.modules.activation.SiLU"
    assert mods["model.10.m.0.attn.qkv.act"].type == "torch.nn.modules.linear.Identity"
    assert mods["model.10.m.0.ffn.1.act"].type == "torch.nn.modules.linear.Identity"
    assert mods["model.23.one2one_cv2.0.0.act"].type == "torch.nn.modules.activation.SiLU"
    assert mods["model.23.one2one_cv2.0.2"].type == "torch.nn.modules.conv.Conv2d"
    assert mods["model.9.m"].type == "torch.nn.modules.pooling.MaxPool2d"
    assert mods["model.9.m"].attrs["kernel_size"] == 5 and mods["model.9.m"].attrs["padding"] == 2
    up = mods["model.11"]
    assert up.type == "torch.nn.modules.upsampling.Upsample"
    assert up.attrs["scale_factor"] == 2.0 and up.attrs["mode"] == "nearest"
    head = mods["model.23"]
    assert head.type == "ultralytics.nn.modules.head.Detect"
    assert head.attrs["nc"] == 80 and head.attrs["nl"] == 3 and head.attrs["reg_max"] == 1
    assert head.attrs["end2end"] is True and head.attrs["max_det"] == 300
    assert head.attrs["f"] == [16, 19, 22]
    assert head.attrs["stride"] == [8.0, 16.0, 32.0]  # small attribute tensors become lists


def test_fp32(files, det_model):
    ck = read_checkpoint(files["fp32"])
    _assert_same_state(ck, det_model, half=False)
    assert ck.dtypes["model.0.conv.weight"] == "F32"


def test_ema_training_checkpoint(files, det_model):
    ck = read_checkpoint(files["ema"])
    _assert_same_state(ck, det_model)
    assert ck.task == "detect" and ck.imgsz == 320
    assert ck.train_args["project"] == "/tmp/runs"
    args = ck.modules[""].attrs["args"]
    assert args["__type__"] == "ultralytics.utils.IterableSimpleNamespace"
    assert args["imgsz"] == 320 and args["save_dir"] == "/tmp/runs/x"
    assert not any(k.startswith("optimizer") for k in ck.tensors)


@pytest.mark.parametrize(
    "cls_name,yaml,task,count",
    [
        ("SegmentationModel", "yolo26n-seg.yaml", "segment", 844),
        ("PoseModel", "yolo26n-pose.yaml", "pose", 879),
        ("OBBModel", "yolo26n-obb.yaml", "obb", 792),
        ("ClassificationModel", "yolo26n-cls.yaml", "classify", 236),
    ],
)
def test_other_tasks(tmp_path, cls_name, yaml, task, count):
    torch = _torch()
    model = _build(cls_name, yaml)
    if task == "classify":
        from ultralytics.data.augment import classify_transforms

        model.transforms = classify_transforms(224)
    f = tmp_path / "m.pt"
    ck = _stripped(model)
    del ck["train_args"]  # task from model.args / the model class
    ck["model"].args = {}
    torch.save(ck, f)
    r = read_checkpoint(f)
    assert r.task == task and len(r.tensors) == count
    _assert_same_state(r, model)
    if task == "classify":
        assert all(m.attrs["eps"] == 1e-5 for m in r.modules.values() if m.type.endswith("BatchNorm2d"))
        tr = r.modules[""].attrs["transforms"]
        assert [t["__type__"].rsplit(".", 1)[1] for t in tr["transforms"]] == ["Resize", "CenterCrop", "ToTensor", "Normalize"]
        assert tr["transforms"][0]["interpolation"] == "bilinear"
        assert tr["transforms"][3]["mean"] == [0.0, 0.0, 0.0]
    else:
        head = r.modules["model.23"]
        assert head.attrs["end2end"] is True and head.attrs["reg_max"] == 1
    if task == "segment":
        assert head.attrs["nm"] == 32 and r.modules["model.23.proto.upsample"].type.endswith("ConvTranspose2d")
    if task == "pose":
        assert head.attrs["kpt_shape"] == [17, 3]


# --------------------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------------------


def _same_ckpt(a: Checkpoint, b: Checkpoint):
    assert list(a.tensors) == list(b.tensors)
    for k in a.tensors:
        assert a.tensors[k].dtype == b.tensors[k].dtype, k
        np.testing.assert_array_equal(a.tensors[k], b.tensors[k], err_msg=k)
    assert a.modules == b.modules
    for f in ("yaml", "names", "stride", "task", "imgsz", "top_type", "train_args", "dtypes"):
        assert getattr(a, f) == getattr(b, f), f


@pytest.mark.parametrize("fp32", [False, True])
def test_safetensors_round_trip(files, det16, tmp_path, fp32):
    out = tmp_path / "yolo26n.safetensors"
    cmd = [sys.executable, str(TOOL), str(files["fp16"]), str(out)] + (["--fp32"] if fp32 else [])
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    st = read_checkpoint(out)
    assert st.format == "safetensors"
    if fp32:
        assert st.dtypes["model.0.conv.weight"] == "F32"
        st.dtypes = det16.dtypes
    _same_ckpt(det16, st)
    assert st.modules["model.0.conv"].attrs["kernel_size"] == (3, 3)
    assert st.names[0] == "0"
    # standard layout: 8-byte length, JSON header with string metadata, contiguous data
    raw = out.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert all(isinstance(v, str) for v in header["__metadata__"].values())
    assert {"carve.yaml", "carve.names", "carve.stride", "carve.task", "carve.imgsz", "carve.modules"} <= set(header["__metadata__"])
    assert header["model.0.conv.weight"]["dtype"] == ("F32" if fp32 else "F16")
    assert max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__") == len(raw) - 8 - n


def _write_st(path, header: dict, body: bytes):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + body)


def test_safetensors_plain_and_bf16(tmp_path):
    """A safetensors file without carve metadata; BF16 and I64 tensors."""
    f = tmp_path / "plain.safetensors"
    a = np.array([1.5, -2.0, 3.25], dtype=np.float32)
    bf = (a.view(np.uint32) >> 16).astype("<u2").tobytes()
    i = np.array([7], dtype="<i8").tobytes()
    _write_st(f, {"a": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]},
                  "n": {"dtype": "I64", "shape": [], "data_offsets": [6, 14]}}, bf + i)
    ck = read_checkpoint(f)
    np.testing.assert_array_equal(ck.tensors["a"], a)
    assert ck.tensors["n"].dtype == np.int64 and ck.tensors["n"].shape == () and int(ck.tensors["n"]) == 7
    assert ck.modules == {} and ck.yaml is None and ck.names is None and ck.task is None and ck.imgsz is None
    # and it writes back identically (BF16 kept)
    g = tmp_path / "again.safetensors"
    write_safetensors(ck, g)
    ck2 = read_checkpoint(g)
    np.testing.assert_array_equal(ck2.tensors["a"], a)
    assert ck2.dtypes == {"a": "BF16", "n": "I64"}


@pytest.mark.parametrize(
    "header,body,words",
    [
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, ["'w'", "past the end"]),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, b"\0" * 8, ["'w'", "size mismatch"]),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, ["'w'", "data_offsets"]),
        ({"w": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8, ["'w'", "unsupported dtype"]),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
         np.array([1, np.nan], np.float32).tobytes(), ["'w'", "NaN"]),
        ({"__metadata__": {"carve.yaml": 3}}, b"", ["__metadata__"]),
    ],
)
def test_safetensors_errors(tmp_path, header, body, words):
    f = tmp_path / "bad.safetensors"
    _write_st(f, header, body)
    with pytest.raises(CarveError) as ei:
        read_checkpoint(f)
    msg = str(ei.value)
    assert str(f) in msg
    for w in words:
        assert w in msg


def test_safetensors_truncated_header(tmp_path):
    f = tmp_path / "t.safetensors"
    f.write_bytes(struct.pack("<Q", 1000) + b"{}")
    with pytest.raises(CarveError, match="header length"):
        read_checkpoint(f)


# --------------------------------------------------------------------------------------
# malicious pickles (no torch needed)
# --------------------------------------------------------------------------------------


def _u(s: str) -> bytes:  # BINUNICODE
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _g(module: str, name: str) -> bytes:  # GLOBAL
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _call(func: bytes, *args: bytes) -> bytes:  # func(*args) via MARK ... TUPLE REDUCE
    return func + b"(" + b"".join(args) + b"tR"


def _ckpt_zip(path: Path, pkl: bytes, prefix="archive/", extra: dict | None = None):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(prefix + "data.pkl", pkl)
        z.writestr(prefix + "byteorder", "little")
        z.writestr(prefix + "version", "3\n")
        for k, v in (extra or {}).items():
            z.writestr(prefix + k, v)


def _payloads(marker: str):
    cmd = f"touch {marker}"
    ev = f"__import__('os').system('touch {marker}')"
    p2 = b"\x80\x02"
    p4 = b"\x80\x04"
    wrap = lambda body: p2 + b"}" + _u("model") + body + b"s."  # {'model': <body>}
    return {
        "os.system": wrap(_call(_g("os", "system"), _u(cmd))),
        "posix.system": p2 + _call(_g("posix", "system"), _u(cmd)) + b".",
        "builtins.eval": p2 + _call(_g("builtins", "eval"), _u(ev)) + b".",
        "__builtin__.eval": p2 + _call(_g("__builtin__", "eval"), _u(ev)) + b".",
        "builtins.exec": p2 + _call(_g("builtins", "exec"), _u(ev)) + b".",
        "subprocess.Popen": p2 + _call(_g("subprocess", "Popen"), b"]" + _u("touch") + b"a" + _u(marker) + b"a") + b".",
        "subprocess.check_call": p2 + _call(_g("subprocess", "check_call"), _u(cmd)) + b".",
        "getattr(builtins, eval)": p2
        + _call(_call(_g("builtins", "getattr"), _call(_g("builtins", "__import__"), _u("builtins")), _u("eval")), _u(ev))
        + b".",
        "getattr(OrderedDict, ...)": p2
        + _call(_g("builtins", "getattr"), _g("collections", "OrderedDict"), _u("__init__"))
        + b".",
        "getattr(rebuild, __globals__)": p2
        + _call(_g("builtins", "getattr"), _g("torch._utils", "_rebuild_tensor_v2"), _u("__globals__"))
        + b".",
        "getattr(InterpolationMode, __class__)": p2
        + _call(_g("builtins", "getattr"), _g("torchvision.transforms.functional", "InterpolationMode"), _u("__class__"))
        + b".",
        "renamed module ultralytics...conv.os": wrap(_call(_g("ultralytics.nn.modules.conv.os", "system"), _u(cmd))),
        "module attr ultralytics...conv os": p2 + _g("ultralytics.nn.modules.conv", "os") + b".",
        "torch.os.system": wrap(_call(_g("torch.os", "system"), _u(cmd))),
        "torch.load": p2 + _call(_g("torch", "load"), _u("x.pt")) + b".",
        "torch.storage._load_from_bytes": p2 + _call(_g("torch.storage", "_load_from_bytes"), _u("x")) + b".",
        "copyreg._reconstructor": p2 + _call(_g("copyreg", "_reconstructor"), _g("os", "system"), _u(cmd)) + b".",
        "nested name": p4 + _u("ultralytics.nn.modules.conv") + _u("Conv.__init__") + b"\x93" + b".",
        "stack_global os.system": p4 + _u("os") + _u("system") + b"\x93" + b"(" + _u(cmd) + b"tR.",
        "BUILD on an allowed function": p2 + _g("torch._utils", "_rebuild_tensor_v2") + b"}" + _u("x") + _u("y") + b"sb.",
        "BUILD slot state on a function": p2 + _g("torch._utils", "_rebuild_parameter")
        + b"N}" + _u("__defaults__") + b")s\x86b.",
        "BUILD on a storage type": p2 + _g("torch", "HalfStorage") + b"N}" + _u("np_dtype") + _u("O") + b"s\x86b.",
        "pathlib + os": p2 + _call(_g("pathlib", "PosixPath"), _call(_g("os", "system"), _u(cmd))) + b".",
    }


def test_malicious_pickles_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "MARKER"
    for name, pkl in _payloads(str(marker)).items():
        f = tmp_path / f"evil_{abs(hash(name))}.pt"
        _ckpt_zip(f, pkl)
        with pytest.raises(CarveError) as ei:
            read_checkpoint(f)
        msg = str(ei.value)
        assert str(f) in msg, (name, msg)
        assert "refusing" in msg, (name, msg)
        assert not marker.exists(), name
    # sanity: the os.system payload really is live with the stock unpickler
    assert b"system" in _payloads(str(marker))["os.system"]


def test_unknown_ultralytics_class_is_inert(tmp_path):
    """A class-like name under ultralytics.nn.modules is stubbed, never imported, then refused."""
    marker = tmp_path / "MARKER"
    pkl = b"\x80\x02}" + _u("model") + _call(_g("ultralytics.nn.modules.block", "Evil"), _u(f"touch {marker}")) + b"s."
    f = tmp_path / "evil.pt"
    _ckpt_zip(f, pkl)
    with pytest.raises(CarveError, match=r"unsupported module class 'ultralytics\.nn\.modules\.block\.Evil'.*YOLO26"):
        read_checkpoint(f)
    assert not marker.exists()


def test_real_checkpoint_with_payload(tmp_path, det_model):
    """A genuine checkpoint carrying an os.system payload next to the model."""
    torch = _torch()
    marker = tmp_path / "MARKER"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    f = tmp_path / "trojan.pt"
    torch.save(_stripped(det_model, train_metrics={"x": Evil()}), f)
    with pytest.raises(CarveError, match=r"refusing to load global '(posix|os|nt)\.system'"):
        read_checkpoint(f)
    assert not marker.exists()


# --------------------------------------------------------------------------------------
# corrupt files
# --------------------------------------------------------------------------------------


def _rezip(src: Path, dst: Path, change):
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            data = change(info.filename, zi.read(info.filename))
            if data is not None:
                zo.writestr(info.filename, data)


def _err(path) -> str:
    with pytest.raises(CarveError) as ei:
        read_checkpoint(path)
    msg = str(ei.value)
    assert str(path) in msg
    return msg


def test_truncated_zip(files, tmp_path):
    raw = files["fp16"].read_bytes()
    f = tmp_path / "trunc.pt"
    f.write_bytes(raw[: len(raw) // 2])
    assert "truncated" in _err(f)


def test_not_a_zip(tmp_path):
    f = tmp_path / "junk.pt"
    f.write_bytes(b"hello world")
    assert "not a zip" in _err(f)
    assert "no such file" in _err(tmp_path / "missing.pt")


def test_zip_without_data_pkl(tmp_path):
    f = tmp_path / "nopkl.pt"
    with zipfile.ZipFile(f, "w") as z:
        z.writestr("archive/version", "3\n")
    assert "no data.pkl" in _err(f)


def test_corrupt_pickle(tmp_path):
    f = tmp_path / "badpkl.pt"
    _ckpt_zip(f, b"\x80\x02}q\x00(X\x05\x00")
    assert "corrupt" in _err(f)


def _storage_of(path: Path, key: str) -> str:
    """Zip entry name of the storage behind state-dict key (found through the reader)."""
    prefix = [n for n in zipfile.ZipFile(path).namelist() if n.endswith("data.pkl")][0][: -len("data.pkl")]
    from carve import checkpoint as cp

    seen = {}
    orig = cp._Loader.storage_array

    def spy(self, ref, what):
        seen.setdefault(what, ref.key)
        return orig(self, ref, what)

    cp._Loader.storage_array = spy
    try:
        read_checkpoint(path)
    finally:
        cp._Loader.storage_array = orig
    return f"{prefix}data/{seen[key]}"


def test_missing_storage(files, tmp_path):
    entry = _storage_of(files["fp16"], "model.2.cv1.conv.weight")
    f = tmp_path / "nostorage.pt"
    _rezip(files["fp16"], f, lambda n, d: None if n == entry else d)
    msg = _err(f)
    assert "missing" in msg and entry in msg and "'model.2.cv1.conv.weight'" in msg


def test_storage_too_small(files, tmp_path):
    entry = _storage_of(files["fp16"], "model.2.cv1.conv.weight")
    f = tmp_path / "small.pt"
    _rezip(files["fp16"], f, lambda n, d: d[: len(d) // 2] if n == entry else d)
    msg = _err(f)
    assert "size mismatch" in msg and "'model.2.cv1.conv.weight'" in msg


def _dict(*pairs: bytes) -> bytes:  # {k: v, ...} via EMPTY_DICT MARK ... SETITEMS
    return b"}(" + b"".join(pairs) + b"u"


def _tiny_model(tensor: bytes) -> bytes:
    """{'model': DetectionModel stub with one parameter 'w'} built from raw opcodes."""
    state = _dict(_u("_parameters"), _dict(_u("w"), tensor), _u("_buffers"), b"}", _u("_modules"), b"}")
    model = _g("ultralytics.nn.tasks", "DetectionModel") + b")\x81" + state + b"b"  # NEWOBJ + BUILD
    return b"\x80\x02" + _dict(_u("model"), model) + b"."


def _tensor(numel: int, offset: int, size: bytes, stride: bytes) -> bytes:
    pid = b"(" + _u("storage") + _g("torch", "FloatStorage") + _u("0") + _u("cpu") + b"K" + bytes([numel]) + b"tQ"
    return _call(
        _g("torch._utils", "_rebuild_tensor_v2"), pid, b"K" + bytes([offset]), size, stride, b"\x89",
        _call(_g("collections", "OrderedDict")),
    )


def test_minimal_handmade_checkpoint(tmp_path):
    """A torch-free, hand-assembled checkpoint; then a view that reaches past its storage."""
    f = tmp_path / "tiny.pt"
    data = np.arange(4, dtype="<f4")
    _ckpt_zip(f, _tiny_model(_tensor(4, 1, b"(K\x03t", b"(K\x01t")), extra={"data/0": data.tobytes()})
    ck = read_checkpoint(f)
    np.testing.assert_array_equal(ck.tensors["w"], [1.0, 2.0, 3.0])
    assert ck.task == "detect" and ck.modules[""].type == "ultralytics.nn.tasks.DetectionModel"

    g = tmp_path / "view.pt"
    _ckpt_zip(g, _tiny_model(_tensor(4, 1, b"(K\x02K\x02t", b"(K\x02K\x01t")), extra={"data/0": data.tobytes()})
    msg = _err(g)
    assert "'w'" in msg and "does not fit" in msg

    # a validated tensor record cannot be altered afterwards by a BUILD
    h = tmp_path / "build.pt"
    evil = _tensor(4, 0, b"(K\x04t", b"(K\x01t") + b"N}" + _u("offset") + b"J\xf0\xff\xff\xffs\x86b"
    _ckpt_zip(h, _tiny_model(evil), extra={"data/0": data.tobytes()})
    assert "refusing to apply pickled state" in _err(h)


def test_nan_weight(det_model, tmp_path):
    torch = _torch()
    ck = _stripped(det_model)
    with torch.no_grad():
        ck["model"].model[4].cv2.conv.weight[0, 0, 0, 0] = float("nan")
    f = tmp_path / "nan.pt"
    torch.save(ck, f)
    msg = _err(f)
    assert "'model.4.cv2.conv.weight'" in msg and "NaN" in msg


def test_bare_state_dict(det_model, tmp_path):
    torch = _torch()
    f = tmp_path / "sd.pt"
    torch.save(det_model.state_dict(), f)
    msg = _err(f)
    assert "no 'model' or 'ema'" in msg and "state_dict" in msg


def test_legacy_torch_format(det_model, tmp_path):
    torch = _torch()
    f = tmp_path / "legacy.pt"
    torch.save({"model": None}, f, _use_new_zipfile_serialization=False)
    assert "legacy" in _err(f)


@pytest.mark.parametrize(
    "yaml,cls,where",
    [("yolov8n.yaml", "ultralytics.nn.modules.block.C2f", "'model.2'"),
     ("yolo11n.yaml", "ultralytics.nn.modules.block.DFL", "'model.23.dfl'")],
)
def test_other_families_refused(tmp_path, yaml, cls, where):
    torch = _torch()
    model = _build("DetectionModel", yaml)
    f = tmp_path / "other.pt"
    torch.save(_stripped(model), f)
    msg = _err(f)
    assert f"unsupported module class '{cls}'" in msg and where in msg and "YOLO26" in msg and "C3k2" in msg


def test_head_without_one2one(det_model, tmp_path):
    torch = _torch()
    ck = _stripped(det_model)
    head = ck["model"].model[-1]
    del head.one2one_cv2
    del head.one2one_cv3
    f = tmp_path / "noo2o.pt"
    torch.save(ck, f)
    msg = _err(f)
    assert "one-to-one" in msg and "model.23" in msg


# --------------------------------------------------------------------------------------
# performance
# --------------------------------------------------------------------------------------


def test_reader_needs_no_torch(files):
    """The reader runs in a process where torch/ultralytics are never imported."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from carve.checkpoint import read_checkpoint; c = read_checkpoint(sys.argv[2]); "
        "bad = [m for m in ('torch', 'ultralytics', 'torchvision') if m in sys.modules]; "
        "assert not bad, bad; print(len(c.tensors))"
    )
    res = subprocess.run([sys.executable, "-c", code, str(REPO / "generator"), str(files["fp16"])],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "708"
    src = (REPO / "generator" / "carve" / "checkpoint.py").read_text()
    for forbidden in ("import torch", "torch.load(", "pickle.load(", "pickle.loads("):
        assert forbidden not in src


def test_read_speed(files):
    """A few MB read in well under a second (yolo26x, 118 MB, reads in about 1 s)."""
    t = time.perf_counter()
    read_checkpoint(files["fp16"])
    assert time.perf_counter() - t < 2.0
