"""The fuzz targets of the generator's readers, without atheris, so that pytest can replay the
inputs under tests/security/regression/ (tests/generator/test_security_regressions.py) and the
atheris drivers (fuzz_checkpoint.py, fuzz_manifest.py) can instrument and fuzz them.

The contract of both: whatever the bytes, only CarveError may escape; anything else is a finding.

checkpoint_input(data): first byte % 4 picks the kind of input
  0  the bytes are a whole .pt file
  1  the bytes are a whole .safetensors file
  2  the bytes are data.pkl inside the zip of the shipped demo checkpoint (assets/yolo26n-shapes.pt,
     its real storages kept): a hostile or mangled pickle with real tensors beside it; when it reads,
     the frontend builds the graph of manifests/yolo26n-shapes.yaml at 64 from it
  3  the demo checkpoint with one zip entry (chosen by the next two bytes) replaced by the rest,
     stored or deflated (bit 0 of the third byte): storage size mismatches, missing or corrupt
     entries, odd byte orders

manifest_input(data): the bytes are a manifest file next to a copy of manifests/arch/; when it
loads, its architecture file is read too.
"""

from __future__ import annotations

import atexit
import io
import os
import shutil
import struct
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))

from carve import checkpoint  # noqa: E402
from carve.errors import CarveError  # noqa: E402
from carve.frontend.yolo26 import build_graph  # noqa: E402
from carve.manifest import load_architecture, load_manifest  # noqa: E402

DEMO = REPO / "assets" / "yolo26n-shapes.pt"
_TMP_ROOT = Path("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())


def _sweep_stale() -> None:
    """libFuzzer ends the process with exit() from C, so no Python cleanup runs: remove the scratch
    folders of fuzzing processes that are gone (named carve-fuzz-<pid>-*)."""
    for d in _TMP_ROOT.glob("carve-fuzz-*-*"):
        try:
            pid = int(d.name.split("-")[2])
            os.kill(pid, 0)
        except (ValueError, IndexError):
            continue
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            continue


_sweep_stale()
_TMP = Path(tempfile.mkdtemp(prefix=f"carve-fuzz-{os.getpid()}-", dir=_TMP_ROOT))
atexit.register(shutil.rmtree, _TMP, True)  # normal exits (pytest replays); libFuzzer's: swept next time
_state: dict = {}


def _demo():
    if not _state:
        with zipfile.ZipFile(DEMO) as z:
            _state["entries"] = [(i.filename, z.read(i.filename)) for i in z.infolist()]
        _state["pkl"] = next(n for n, _ in _state["entries"] if n.endswith("data.pkl"))
        _state["manifest"] = load_manifest(REPO / "manifests" / "yolo26n-shapes.yaml")
        _state["arch"] = load_architecture(_state["manifest"])
        shutil.copytree(REPO / "manifests" / "arch", _TMP / "arch")
    return _state


def demo_zip(replace: dict, deflate: bool = False) -> bytes:
    """The demo checkpoint's zip with some entries replaced (None: removed)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED) as z:
        for name, data in _demo()["entries"]:
            new = replace.get(name, data)
            if new is not None:
                z.writestr(name, new)
    return buf.getvalue()


def _read(data: bytes, suffix: str):
    f = _TMP / f"input{suffix}"
    f.write_bytes(data)
    return checkpoint.read_checkpoint(f)


def checkpoint_input(data: bytes) -> None:
    if not data:
        return
    kind, body = data[0] % 4, data[1:]
    try:
        if kind == 0:
            _read(body, ".pt")
        elif kind == 1:
            _read(body, ".safetensors")
        elif kind == 2:
            st = _demo()
            ck = _read(demo_zip({st["pkl"]: body}), ".pt")
            build_graph(st["manifest"], st["arch"], ck, 64)
        elif len(body) >= 3:
            entries = _demo()["entries"]
            name = entries[struct.unpack("<H", body[:2])[0] % len(entries)][0]
            _read(demo_zip({name: body[3:] if len(body) > 3 else None}, deflate=body[2] & 1 == 1), ".pt")
    except CarveError:
        pass


def manifest_input(data: bytes) -> None:
    _demo()
    f = _TMP / "manifest.yaml"
    f.write_bytes(data)
    try:
        m = load_manifest(f)
        load_architecture(m)
    except CarveError:
        pass


def checkpoint_seeds() -> dict:
    st = _demo()
    pkl = dict(st["entries"])[st["pkl"]]
    tiny = io.BytesIO()
    with zipfile.ZipFile(tiny, "w") as z:
        z.writestr("a/data.pkl", b"\x80\x02}q\x00X\x05\x00\x00\x00modelq\x01Ns.")
        z.writestr("a/byteorder", "little")
    header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"carve.task":"detect"}}'
    return {
        "demo-pickle": b"\x02" + pkl,
        "demo-byteorder": b"\x03\x03\x00\x00big",
        "demo-small-storage": b"\x03\x05\x00\x01" + b"\x00" * 64,
        "tiny-pt": b"\x00" + tiny.getvalue(),
        "safetensors": b"\x01" + struct.pack("<Q", len(header)) + header + b"\0" * 8,
    }


def manifest_seeds() -> dict:
    return {p.name: p.read_bytes() for p in sorted((REPO / "manifests").glob("*.yaml"))[:8]}
