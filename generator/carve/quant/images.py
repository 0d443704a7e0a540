"""The calibration images of ``--calib DIR``, preprocessed exactly as a package's demo does before its network.

The demo reads an image with ``carve_image_load_rgb_msg`` (stb_image's formats: JPEG, PNG, BMP, GIF, TGA, PSD,
HDR, binary PNM; a JPEG turned upright by its Exif orientation; grayscale, palette and 16-bit images become 8-bit
RGB) and letterboxes it with ``carve_letterbox`` (detect, segment, pose, obb) or resizes and crops it with
``carve_classify_preprocess`` (classify), then /255. The generator is pure Python + numpy, so it runs that same C
code: ``calib_pre.c`` beside this file, compiled once with the system C compiler together with the runtime's
carve_io.c, carve_pre.c and carve_rt.c and linked with libstb like the demo. The executable is cached under
``$CARVE_CACHE_DIR`` (else ``$XDG_CACHE_HOME/carve``, else ``~/.cache/carve``; a temporary folder when none is
writable), named by the SHA-256 of its sources and compile command, so it is rebuilt when any of them changes.

The folder's rules (docs/quantization.md#calibration-images):

* every regular file directly in DIR whose name does not start with '.' is a calibration image (sub-folders are
  not searched); names are sorted (by their bytes), and the first ``MAX_IMAGES`` are used;
* each used file must decode: any that does not (not an image, a format stb_image does not read, corrupt or
  truncated) is an error that lists every such file with its reason, so a calibration never silently rests on
  fewer images than the folder suggests;
* at least ``MIN_IMAGES`` images: fewer make the activation ranges a guess.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CarveError
from ..paths import data_dir

MIN_IMAGES = 32         # fewer: the per-tensor ranges rest on too few images to be meaningful
MAX_IMAGES = 200        # the first 200 names (sorted) are used; more add time, not accuracy (docs/quantization.md)
TOOL_SOURCE = Path(__file__).resolve().parent / "calib_pre.c"
RUNTIME_FILES = ("carve_io.c", "carve_io.h", "carve_pre.c", "carve_pre.h", "carve_pre_math.h", "carve_rt.c",
                 "carve_rt.h", "carve_pool.h")
CFLAGS = ("-std=c11", "-O2", "-DCARVE_RT_NO_THREADS")
STATUS_NAMES = {1: "invalid argument", 2: "out of memory", 4: "cannot read", 5: "unsupported", 7: "bad image"}
NO_COMPILER_HINT = "install a C compiler and libstb (apt-get install gcc libstb-dev), or pass --precision fp32"


@dataclass(frozen=True)
class CalibImages:
    """The used images: ``names`` (file names, sorted), ``sha256`` (of each file's bytes), ``pixels`` (n, h, w, 3)
    uint8 (the network input is pixels / 255 in float32: ``to_input``), ``total`` (candidate files in the folder)."""

    folder: str
    names: tuple
    sha256: tuple
    pixels: np.ndarray
    total: int

    def __len__(self) -> int:
        return len(self.names)

    def input(self, i: int) -> np.ndarray:
        return to_input(self.pixels[i])


_TO_FLOAT = (np.arange(256, dtype=np.float32) / np.float32(255)).astype(np.float32)


def to_input(pixels: np.ndarray) -> np.ndarray:
    """The network input of preprocessed pixels: (float)v / 255.0f, bit for bit what the runtime computes."""
    return _TO_FLOAT[pixels]


# ---------------------------------------------------------------------------
# The folder
# ---------------------------------------------------------------------------

def list_images(folder) -> tuple:
    """(used paths sorted, number of candidate files): checks that the folder exists, is a folder and has files."""
    p = Path(folder)
    if not p.exists():
        raise CarveError("--calib: no such folder", location=str(p), hint="give a folder of calibration images")
    if not p.is_dir():
        raise CarveError("--calib: not a folder", location=str(p), hint="give a folder of calibration images")
    try:
        entries = sorted(os.scandir(p), key=lambda e: os.fsencode(e.name))
    except OSError as exc:
        raise CarveError(f"--calib: cannot list the folder: {exc.strerror or exc}", location=str(p)) from None
    files = [Path(e.path) for e in entries if not e.name.startswith(".") and e.is_file()]
    if not files:
        raise CarveError("--calib: the folder holds no files", location=str(p),
                         hint=f"put at least {MIN_IMAGES} images like the ones the model will see in it")
    return files[:MAX_IMAGES], len(files)


# ---------------------------------------------------------------------------
# The C preprocessor
# ---------------------------------------------------------------------------

def find_compiler() -> str:
    """$CC, else cc, gcc or clang on PATH; CarveError when there is none."""
    tried = []
    env = os.environ.get("CC")
    for name in ([env] if env else []) + ["cc", "gcc", "clang"]:
        tried.append(name)
        path = shutil.which(name)
        if path:
            return path
    raise CarveError(f"--precision int8: no C compiler found (tried {', '.join(tried)}); carve builds a small tool "
                     "from its runtime to read the calibration images as the package's demo does",
                     hint=NO_COMPILER_HINT)


def _cache_root() -> Path:
    if os.environ.get("CARVE_CACHE_DIR"):
        return Path(os.environ["CARVE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "carve"


def _tool_key(cc: str) -> str:
    h = hashlib.sha256()
    rt = data_dir("runtime")
    for path in [TOOL_SOURCE] + [rt / f for f in RUNTIME_FILES]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update("\0".join((cc,) + CFLAGS).encode())
    return h.hexdigest()[:16]


def _compile(cc: str, out: Path) -> None:
    rt = data_dir("runtime")
    cmd = [cc, *CFLAGS, f"-I{rt}", str(TOOL_SOURCE), str(rt / "carve_io.c"), str(rt / "carve_pre.c"),
           str(rt / "carve_rt.c"), "-lstb", "-lm", "-o", str(out)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CarveError(f"--precision int8: cannot run the C compiler {cc}: {exc}", hint=NO_COMPILER_HINT) from None
    if r.returncode != 0:
        tail = "\n    ".join((r.stderr or r.stdout).strip().splitlines()[-6:])
        hint = ("install libstb (apt-get install libstb-dev): the demo and the calibration reader decode images "
                "with it" if "stb" in (r.stderr or "") else NO_COMPILER_HINT)
        raise CarveError(f"--precision int8: building the calibration image reader failed ({cc}):\n    {tail}",
                         hint=hint)


def preprocessor(cache_root=None) -> Path:
    """The compiled calibration preprocessor (built on first use, then taken from the cache)."""
    cc = find_compiler()
    key = _tool_key(cc)
    roots = [Path(cache_root) if cache_root else _cache_root()]
    for root in roots:
        exe = root / f"calib-pre-{key}" / "carve_calib_pre"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
        try:
            exe.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".carve_calib_pre.", dir=exe.parent)
            os.close(fd)
        except OSError:
            continue
        try:
            _compile(cc, Path(tmp))
            os.chmod(tmp, 0o755)
            os.replace(tmp, exe)      # atomic: a concurrent carve sees the old state or the whole tool
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return exe
    tmpdir = Path(tempfile.mkdtemp(prefix="carve-calib-pre-"))  # no writable cache: this run only
    exe = tmpdir / "carve_calib_pre"
    _compile(cc, exe)
    return exe


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if data is None or len(data) != n:
        raise CarveError("--calib: the calibration image reader stopped early (killed, or out of memory?)")
    return data


def preprocess(paths, mode: str, out_hw: tuple, cache_root=None, progress=None):
    """Yield (path, pixels (h, w, 3) uint8 | None, reason) for each path in order, through the C preprocessor.
    ``mode``: "letterbox" (detect, segment, pose, obb) or "classify"."""
    exe = preprocessor(cache_root)
    h, w = out_hw
    proc = subprocess.Popen([str(exe), mode, str(w), str(h)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    payload = b"".join(os.fsencode(str(p)) + b"\0" for p in paths)

    def feed():
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
        except OSError:
            pass
    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        for p in paths:
            status, _sw, _sh, n = struct.unpack("<iiiI", _read_exact(proc.stdout, 16))
            data = _read_exact(proc.stdout, n)
            if status == 0:
                yield p, np.frombuffer(data, np.uint8).reshape(h, w, 3), ""
            else:
                reason = data.decode("utf-8", "replace") or STATUS_NAMES.get(status, f"status {status}")
                yield p, None, reason
    finally:
        writer.join(timeout=5)
        proc.stdout.close()
        err = proc.stderr.read().decode("utf-8", "replace")
        proc.stderr.close()
        rc = proc.wait()
    if rc != 0:
        raise CarveError(f"--calib: the calibration image reader failed (exit {rc}): {err.strip()}")


def load_images(folder, task: str, input_hw: tuple, cache_root=None, progress=None) -> CalibImages:
    """The calibration images of ``folder`` for a model of ``task`` with input (height, width), preprocessed;
    CarveError naming the folder or every unreadable file."""
    paths, total = list_images(folder)
    mode = "classify" if task == "classify" else "letterbox"
    pixels, names, digests, bad = [], [], [], []
    for i, (p, px, reason) in enumerate(preprocess(paths, mode, tuple(input_hw), cache_root)):
        if px is None:
            bad.append(f"{p}: {reason}")
            continue
        pixels.append(px)
        names.append(p.name)
        digests.append(hashlib.sha256(p.read_bytes()).hexdigest())
        if progress and (i + 1) % 50 == 0:
            progress(f"reading calibration images: {i + 1}/{len(paths)}")
    if bad:
        shown = "\n  ".join(bad[:10]) + (f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise CarveError(f"--calib: {len(bad)} of {len(paths)} file(s) are not images carve can read:\n  {shown}",
                         location=str(folder),
                         hint="the folder must hold only images (JPEG, PNG, BMP, GIF, TGA, PSD, HDR, PNM); "
                              "move other files out; nothing was written")
    if len(pixels) < MIN_IMAGES:
        raise CarveError(f"--calib: {len(pixels)} image(s), at least {MIN_IMAGES} are needed to measure the "
                         "activation ranges", location=str(folder),
                         hint="add images like the ones the model will see (a few hundred is best)")
    return CalibImages(folder=str(folder), names=tuple(names), sha256=tuple(digests), pixels=np.stack(pixels),
                       total=total)
