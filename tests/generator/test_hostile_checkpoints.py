"""Hostile and broken checkpoints, beyond tests/generator/test_checkpoint.py: each is refused with a
CarveError naming the file (and the tensor, layer or class), and nothing runs.

* Code-execution payloads built with the stock ``pickle`` from real ``__reduce__`` objects (os.system,
  eval, exec, subprocess, functools.partial, operator.attrgetter, importlib, runpy, numpy's
  ``runstring``...), and by hand with the BUILD (``__setstate__`` injection), INST, OBJ, EXT and
  STACK_GLOBAL opcodes, nested ``getattr`` chains, renamed and dotted globals, and hostile persistent
  ids. Every payload is first run with the stock unpickler in a child process, which must create
  its marker file (so the payload is live); then carve's reader, inside the real demo checkpoint's
  zip, must refuse it and the marker must not appear.
* Unexpected dtypes (complex, qint8, a float8 storage, int weights), NaN and infinite weights named
  with their tensor, truncated and corrupt zips, storage entries missing, short or oversized.
* Real checkpoints of other families built with Ultralytics from their yamls
  (tests/security/make_family_checkpoints.py): YOLOv8, YOLOv8-seg, YOLOv10, YOLO11, YOLO11-pose,
  RT-DETR: the refusal names the class found, its layer, the model yaml, and the supported classes.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(REPO / "tests" / "security"))

from carve import compiler  # noqa: E402
from carve.checkpoint import read_checkpoint  # noqa: E402
from carve.errors import CarveError  # noqa: E402
from test_checkpoint import _storage_of  # noqa: E402  (same folder: pytest puts it on sys.path)

DEMO = REPO / "assets" / "yolo26n-shapes.pt"
DEMO_MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"

with zipfile.ZipFile(DEMO) as _z:
    ENTRIES = [(i.filename, _z.read(i.filename)) for i in _z.infolist()]
PKL = next(n for n, _ in ENTRIES if n.endswith("data.pkl"))
PREFIX = PKL[: -len("data.pkl")]


def demo_zip(path: Path, replace: dict, compression=zipfile.ZIP_STORED) -> Path:
    """The shipped demo checkpoint with some entries replaced (None: removed)."""
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in ENTRIES:
            new = replace.get(name, data)
            if new is not None:
                z.writestr(name, new)
    return path


def refused(path: Path) -> str:
    with pytest.raises(CarveError) as ei:
        read_checkpoint(path)
    msg = str(ei.value)
    assert str(path) in msg, msg
    return msg


# --------------------------------------------------------------------------------------
# Code-execution payloads
# --------------------------------------------------------------------------------------


def _u(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _g(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


class Reduce:
    """An object whose pickle calls ``fn(*args)`` on load (the classic payload)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def payloads(marker: Path) -> dict:
    """name -> pickle bytes that create ``marker`` when loaded with the stock unpickler."""
    import functools
    import importlib
    import operator
    import runpy
    import subprocess as sp

    touch = f"touch {marker}"
    code = f"open({str(marker)!r}, 'w').close()"
    dumps = lambda obj, proto=2: pickle.dumps({"model": obj}, protocol=proto)  # noqa: E731
    out = {
        "reduce os.system": dumps(Reduce(os.system, touch)),
        "reduce eval": dumps(Reduce(eval, code)),
        "reduce exec": dumps(Reduce(exec, code)),
        "reduce subprocess.call": dumps(Reduce(sp.call, ["touch", str(marker)])),
        "reduce subprocess.Popen protocol 4": dumps(Reduce(sp.Popen, ["touch", str(marker)]), 4),
        "reduce functools.partial(os.system)": dumps(Reduce(functools.partial(os.system, touch))),
        "reduce runpy._run_code": dumps(Reduce(runpy._run_code, code, {})),
        "reduce importlib.import_module": pickle.dumps(
            Reduce(operator.methodcaller("system", touch), Reduce(importlib.import_module, "os")), protocol=2),
        "operator.attrgetter(system)(importlib.import_module(os))": b"\x80\x02" + _g("operator", "attrgetter")
        + b"(" + _u("system") + b"tR(" + _g("importlib", "import_module") + b"(" + _u("os") + b"tRtR(" + _u(touch) + b"tR.",
        "getattr(__import__('os'), 'system')": b"\x80\x02" + _g("builtins", "getattr") + b"("
        + _g("builtins", "__import__") + b"(" + _u("os") + b"tR" + _u("system") + b"tR(" + _u(touch) + b"tR.",
        "numpy runstring": b"\x80\x02" + _g("numpy.testing._private.utils", "runstring")
        + b"(" + _u(code) + b"}tR.",
        "BUILD __setstate__ injection": b"\x80\x02" + _g("types", "SimpleNamespace") + b")R}" + _u("__setstate__")
        + _g("os", "system") + b"sb" + _u(touch) + b"b.",
        "INST os.system": b"(" + _u(touch) + b"ios\nsystem\n.",
        "OBJ subprocess.Popen": b"\x80\x02(" + _g("subprocess", "Popen") + b"]" + _u("touch") + b"a" + _u(str(marker)) + b"ao.",
        "STACK_GLOBAL dotted builtins.eval": b"\x80\x04" + _u("builtins") + _u("eval") + b"\x93(" + _u(code) + b"tR.",
        "renamed global __builtin__.exec": b"\x80\x02" + _g("__builtin__", "exec") + b"(" + _u(code) + b"tR.",
        "dotted name os.path.os.system": b"\x80\x04" + _u("os") + _u("path.os.system") + b"\x93(" + _u(touch) + b"tR.",
        "nested under an ultralytics module": b"\x80\x04" + _u("ultralytics.utils") + _u("os.system")
        + b"\x93(" + _u(touch) + b"tR.",
        "codecs + eval": b"\x80\x02" + _g("builtins", "eval") + b"(" + _g("_codecs", "encode") + b"(" + _u(code)
        + _u("latin1") + b"tRtR.",
    }
    return out


def _stock_unpickle_runs(pkl: bytes, marker: Path) -> bool:
    """Positive control: the stock unpickler, in a child process, runs the payload."""
    r = subprocess.run([sys.executable, "-c", "import pickle, sys; pickle.loads(sys.stdin.buffer.read())"],
                       input=pkl, capture_output=True, cwd=marker.parent, timeout=60)
    ran = marker.exists()
    marker.unlink(missing_ok=True)
    return ran


@pytest.mark.parametrize("name", list(payloads(Path("/x"))))
def test_code_payload_is_refused_and_never_runs(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "MARKER"
    pkl = payloads(marker)[name]
    assert _stock_unpickle_runs(pkl, marker), f"{name}: the payload is not live, the test would prove nothing"
    f = demo_zip(tmp_path / "evil.pt", {PKL: pkl})
    msg = refused(f)
    assert "refusing" in msg or "unsupported" in msg, msg
    assert not marker.exists()
    # and through the whole CLI: exit 1, one line, no package
    out = tmp_path / "pkg"
    from carve import cli
    assert cli.main(["generate", str(DEMO_MANIFEST), "--backend", "xnnpack", "--weights", str(f),
                     "--out", str(out)]) == 1
    assert not out.exists() and not marker.exists()


def test_payload_inside_a_real_checkpoint_beside_the_model(tmp_path):
    """The demo checkpoint's own pickle with an os.system reduce appended to its dict."""
    marker = tmp_path / "MARKER"
    pkl = dict(ENTRIES)[PKL]
    assert pkl.endswith(b"u.") or pkl.endswith(b"s.") or pkl.endswith(b".")
    evil = pkl[:-1] + _u("evil") + _g("posix", "system") + b"(" + _u(f"touch {marker}") + b"tRs."
    msg = refused(demo_zip(tmp_path / "trojan.pt", {PKL: evil}))
    assert "refusing to load global 'posix.system'" in msg
    assert not marker.exists()


@pytest.mark.parametrize("pid,words", [
    (b"(" + _u("storage") + _g("os", "system") + _u("0") + _u("cpu") + b"K\x04t", ["refusing", "os.system"]),
    (b"(" + _u("storage") + _g("torch", "FloatStorage") + _u("../../etc/passwd") + _u("cpu") + b"K\x04t",
     ["bad storage key"]),
    (b"(" + _u("storage") + _g("torch", "FloatStorage") + _u("0") + _u("cpu") + b"J\xff\xff\xff\xfft",
     ["negative size"]),
    (b"(" + _u("module") + _u("os") + b"t", ["unsupported persistent id"]),
    (_u("storage"), ["unsupported persistent id"]),
], ids=["storage-type-os.system", "key-traversal", "negative-numel", "module-pid", "string-pid"])
def test_hostile_persistent_ids(tmp_path, pid, words):
    pkl = b"\x80\x02}" + _u("model") + pid + b"Qs."
    msg = refused(demo_zip(tmp_path / "pid.pt", {PKL: pkl}))
    for w in words:
        assert w in msg, msg


def test_ext_opcode_is_refused(tmp_path):
    """EXT1 looks a global up in copyreg's extension registry: registered or not, it is refused."""
    import copyreg

    copyreg.add_extension("os", "system", 0xF0)
    try:
        marker = tmp_path / "MARKER"
        pkl = b"\x80\x02\x82\xf0(" + _u(f"touch {marker}") + b"tR."
        msg = refused(demo_zip(tmp_path / "ext.pt", {PKL: pkl}))
        assert "os.system" in msg and not marker.exists()
    finally:
        copyreg.remove_extension("os", "system", 0xF0)


# --------------------------------------------------------------------------------------
# dtypes, values, zips, storages
# --------------------------------------------------------------------------------------


def _storage_entries(key="model.0.conv.weight") -> str:
    """Zip entry of the storage behind a state-dict key of the demo checkpoint (through the reader)."""
    return _storage_of(DEMO, key)


@pytest.mark.parametrize("storage", ["ComplexFloatStorage", "QInt8Storage", "Float8_e4m3fnStorage"])
def test_unexpected_storage_dtype_is_named(tmp_path, storage):
    pkl = dict(ENTRIES)[PKL]
    assert b"HalfStorage" in pkl
    evil = pkl.replace(b"torch\nHalfStorage\n", f"torch\n{storage}\n".encode(), 1)
    msg = refused(demo_zip(tmp_path / "dtype.pt", {PKL: evil}))
    assert f"unsupported tensor dtype: storage class 'torch.{storage}'" in msg and "HalfStorage" in msg


def test_integer_weights_are_refused_by_the_frontend(tmp_path):
    """A state dict whose conv weights are int16 (same byte size as fp16): read fine, refused by name."""
    pkl = dict(ENTRIES)[PKL].replace(b"torch\nHalfStorage\n", b"torch\nShortStorage\n")
    f = demo_zip(tmp_path / "int.pt", {PKL: pkl})
    with pytest.raises(CarveError) as ei:
        compiler.compile_model(str(DEMO_MANIFEST), "xnnpack", str(f), 64)
    msg = str(ei.value)
    assert "model.0.conv.weight: dtype I16 where a floating-point weight is expected" in msg


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_weight_is_named(tmp_path, value):
    entry = _storage_entries("model.6.m.0.cv1.conv.weight")
    data = bytearray(dict(ENTRIES)[entry])
    data[2:4] = np.array([value], dtype="<f2").tobytes()
    msg = refused(demo_zip(tmp_path / "nan.pt", {entry: bytes(data)}))
    assert "NaN or infinite" in msg and "'model.6.m.0.cv1.conv.weight'" in msg


def test_storage_entry_missing_short_long(tmp_path):
    entry = _storage_entries("model.0.conv.weight")
    data = dict(ENTRIES)[entry]
    msg = refused(demo_zip(tmp_path / "missing.pt", {entry: None}))
    assert "missing" in msg and "'model.0.conv.weight'" in msg and entry in msg
    msg = refused(demo_zip(tmp_path / "short.pt", {entry: data[:-2]}))
    assert "size mismatch" in msg and "'model.0.conv.weight'" in msg
    msg = refused(demo_zip(tmp_path / "long.pt", {entry: data + b"\0" * 8192}))
    assert "size mismatch" in msg and entry in msg


def test_zip_bomb_entry_is_refused_before_decompressing(tmp_path):
    """data.pkl declaring 1 GiB of zeros (deflated to ~1 MB): refused from its declared size."""
    f = tmp_path / "bomb.pt"
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open(f"{PREFIX}data.pkl", "w", force_zip64=True) as w:
            chunk = b"\0" * (1 << 20)
            for _ in range(300):
                w.write(chunk)
    msg = refused(f)
    assert "data.pkl" in msg and "zip bomb" in msg


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9, 0.999])
def test_truncated_demo_checkpoint(tmp_path, cut):
    raw = DEMO.read_bytes()
    f = tmp_path / "cut.pt"
    f.write_bytes(raw[: int(len(raw) * cut)])
    refused(f)


def test_corrupt_deflate_stream(tmp_path):
    f = demo_zip(tmp_path / "deflated.pt", {}, zipfile.ZIP_DEFLATED)
    raw = bytearray(f.read_bytes())
    with zipfile.ZipFile(f) as z:
        info = z.getinfo(PKL)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for i in range(start + 100, start + 400):
        raw[i] ^= 0x5A
    f.write_bytes(bytes(raw))
    msg = refused(f)
    assert "data.pkl" in msg or "corrupt" in msg


# --------------------------------------------------------------------------------------
# other model families, built with Ultralytics
# --------------------------------------------------------------------------------------

FAMILY_CASES = {
    "yolov8n": ("ultralytics.nn.modules.block.C2f", "at 'model.2'"),
    "yolov8n-seg": ("ultralytics.nn.modules.block.C2f", "at 'model.2'"),
    "yolov10n": ("ultralytics.nn.modules.block.C2f", "at 'model.2'"),
    "yolo11n": ("ultralytics.nn.modules.block.DFL", "at 'model.23.dfl'"),
    "yolo11n-pose": ("ultralytics.nn.modules.head.Pose", "at 'model.23'"),
    "rtdetr-l": ("ultralytics.nn.tasks.RTDETRDetectionModel", "at the top of the model"),
}


@pytest.fixture(scope="module")
def family_dir():
    pytest.importorskip("torch")
    pytest.importorskip("ultralytics")
    work = Path(os.environ.get("CARVE_WORK", REPO / "build" / "work")) / "families"
    return work


@pytest.mark.parametrize("name", list(FAMILY_CASES))
def test_other_family_is_refused_with_what_was_found(family_dir, name):
    import make_family_checkpoints

    f = make_family_checkpoints.make(name, family_dir)
    cls, where = FAMILY_CASES[name]
    msg = refused(f)
    assert f"unsupported module class '{cls}' {where}" in msg
    assert f"the checkpoint's model yaml is '{name}.yaml'" in msg
    assert "carve supports only YOLO26" in msg and "C3k2" in msg and "Detect" in msg
    assert "RT-DETR" in msg and "YOLOv8" in msg  # the hint names the families


def test_setstate_injection_into_a_stub_is_inert(tmp_path):
    """BUILD {'__setstate__': f} then BUILD x calls f(x) with the stock unpickler (see the live payload
    above). On carve's stand-ins the state lands in the record, never in the instance's namespace: the
    second BUILD reaches the stub's own __setstate__ and is refused as a malformed state, f is not called."""
    pkl = (b"\x80\x02}" + _u("model") + _g("types", "SimpleNamespace") + b")R}" + _u("__setstate__")
           + _g("_codecs", "encode") + b"sb" + _u("payload") + b"bs.")
    msg = refused(demo_zip(tmp_path / "inject.pt", {PKL: pkl}))
    assert "unexpected pickled state of type str" in msg, msg
