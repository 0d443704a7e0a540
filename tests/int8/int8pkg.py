"""int8 packages of the trained demo model for the tests (tests/int8, tests/firmware/no_malloc.py,
tests/security/run_security.py), made by ``carve generate --precision int8`` once per build folder and shared.

* Calibration images (``calib_dir``): ``CALIB_COUNT`` (the pass's minimum, quant/images.py MIN_IMAGES) images
  rendered by tools/train_demo.py with ``CALIB_SEED`` = 5, a seed no other image set uses (training 0, validation
  1, the assets' samples 1000, the demo test 2000, make eval 3000), in ``WORK/int8/calib-s5-n32``.
* Packages (``package``): ``./carve generate manifests/yolo26n-shapes.yaml --backend B --checkpoint
  assets/yolo26n-shapes.pt --precision int8 --calib <calib_dir> --imgsz N [flags]`` into
  ``WORK/int8/pkg-<B>-<N>[...]``, reused while nothing it depends on changed: the folder holds a key (the SHA-256 of
  every file of generator/, templates/ and runtime/, the manifest, the checkpoint, the calibration images' bytes,
  the arguments and the numpy version) and is regenerated when the key differs. Generation and builds are
  serialised by a lock file, so tests run in parallel (ctest -j) share one generation. A test must not write into
  a shared package folder (``demo`` builds into its ``build/`` under the lock).

The quantization pass's cost grows with images x pixels, hence the minimum 32 images at a small input size: about
5 s at 128 and 4 s at 64 on one BLAS thread (as the command runs it; OpenBLAS's own threads made it a minute on the
busy 2-core machine).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "generator"), str(REPO / "tools"), str(REPO / "tests" / "portable")]

MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"
WEIGHTS = REPO / "assets" / "yolo26n-shapes.pt"
PREFIX = "yolo26n_shapes"
CALIB_SEED = 5      # tools/train_demo.py render_image(CALIB_SEED, i): a seed no other image set uses
CALIB_COUNT = 32    # quant/images.py MIN_IMAGES: the fewest the pass takes
IMGSZ = 128         # the tests' input size: calibration cost scales with images x pixels
SOURCES = ("generator", "templates", "runtime")


def root(work) -> Path:
    p = Path(work).resolve() / "int8"
    p.mkdir(parents=True, exist_ok=True)
    return p


@contextmanager
def locked(work, name: str):
    """An exclusive lock on WORK/int8/.lock-<name> (released when the block ends, or the process dies)."""
    with open(root(work) / f".lock-{name}", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def calib_dir(work) -> Path:
    """The calibration folder (rendered on first use; a complete folder is never rewritten)."""
    out = root(work) / f"calib-s{CALIB_SEED}-n{CALIB_COUNT}"
    with locked(work, "calib"):
        if not (out / ".complete").exists():
            import cv2
            import train_demo
            tmp = out.with_name(out.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
            for i in range(CALIB_COUNT):
                cv2.imwrite(str(tmp / f"calib-{i:02d}.png"), train_demo.render_image(CALIB_SEED, i)[0])
            (tmp / ".complete").write_text("")
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
    return out


def _hash_tree(h, base: Path) -> None:
    for p in sorted(base.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(REPO)).encode() + b"\0" + p.read_bytes() + b"\0")


def key(backend: str, imgsz: int, calib: Path, flags: tuple) -> str:
    """What a generated package depends on (module docstring), as a hex digest."""
    h = hashlib.sha256()
    for d in SOURCES:
        _hash_tree(h, REPO / d)
    for p in (MANIFEST, WEIGHTS, *sorted(p for p in calib.iterdir() if not p.name.startswith("."))):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    h.update(repr((backend, imgsz, flags, np.__version__, sys.version_info[:2])).encode())
    return h.hexdigest()


def generate(out: Path, backend: str, imgsz: int, calib: Path, *flags) -> subprocess.CompletedProcess:
    """``carve generate --precision int8`` as a user runs it (the CLI, in a child process)."""
    cmd = [str(REPO / "carve"), "generate", str(MANIFEST), "--backend", backend, "--checkpoint", str(WEIGHTS),
           "--precision", "int8", "--calib", str(calib), "--imgsz", str(imgsz), "--out", str(out), "--force",
           *map(str, flags)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
        raise SystemExit(f"int8pkg: {' '.join(cmd)} failed with exit code {r.returncode}")
    return r


def package(work, backend: str, imgsz: int = IMGSZ, *flags) -> Path:
    """The shared int8 package for (backend, imgsz, flags): regenerated when its key changed (module docstring)."""
    calib = calib_dir(work)
    name = f"pkg-{backend}-{imgsz}" + "".join(f"-{str(f).lstrip('-')}" for f in flags)
    out = root(work) / name
    want = key(backend, imgsz, calib, tuple(map(str, flags)))
    with locked(work, name):
        stamp = out / ".carve-test-key"
        if not (stamp.exists() and stamp.read_text() == want):
            tmp = out.with_name(name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            print(f"int8pkg: generating {name} (--precision int8, {CALIB_COUNT} calibration images)", flush=True)
            generate(tmp, backend, imgsz, calib, *flags)
            stamp_tmp = tmp / ".carve-test-key"
            stamp_tmp.write_text(want)
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
    return out


def package_files(pkg: Path) -> dict:
    """{relative path: bytes} of a generated package (its build folder and the test's key left out)."""
    return {str(p.relative_to(pkg)): p.read_bytes() for p in sorted(pkg.rglob("*"))
            if p.is_file() and p.name != ".carve-test-key" and "build" not in p.relative_to(pkg).parts}


def write_package(files: dict, out: Path) -> Path:
    """Writes {relative path: bytes} to the folder ``out``, leaving it (and its build) alone when it already holds
    exactly these files."""
    if out.is_dir() and package_files(out) == files:
        return out
    shutil.rmtree(out, ignore_errors=True)
    for rel, data in files.items():
        f = out / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    return out


def demo(work, pkg: Path, backend: str) -> Path:
    """The package's demo (compare_backends.build: the README's plain cc build), rebuilt when the package's files
    changed."""
    import compare_backends
    with locked(work, pkg.name):
        h = hashlib.sha256()
        for rel, data in package_files(pkg).items():
            h.update(rel.encode() + b"\0" + data + b"\0")
        stamp = pkg / "build" / ".built-key"
        exe = pkg / "build" / f"{PREFIX}_demo"
        if not (stamp.exists() and stamp.read_text() == h.hexdigest() and exe.exists()):
            shutil.rmtree(pkg / "build", ignore_errors=True)
            exe = compare_backends.build(pkg, PREFIX, backend)
            stamp.write_text(h.hexdigest())
    return exe


def package_graph(work, pkg: Path, backend: str, imgsz: int = IMGSZ):
    """The quantized graph the package ``pkg`` was generated from, rebuilt without the (slow) sensitivity pass and
    proven to be that graph:

    the float graph (compiler.float_graph), the pass's calibration on the same folder (images.load_images,
    calibrate.calibrate and calibrate.ranges: deterministic), then rewrite.quantize with the conv / add ops that
    the package's quant.json lists as float32 kept in float, as quant.pipeline.quantize_model does after
    sensitivity.choose. Proof: the graph emitted for ``backend`` (compile_model with the graph as graph_hook, as
    tests/generator/test_xnnpack_int8.py does) must be the package's files byte for byte (every weight record,
    multiplier, zero point, table and descriptor is in them), and its tensors' scales and zero points those of
    quant.json; SystemExit naming the first difference otherwise. About 1 s at 128 (calibration on one BLAS thread),
    without the sensitivity pass (every conv / add alone on 8 images) that compiler.quantized_graph runs."""
    import json
    from carve import compiler
    from carve.quant import calibrate, images, rewrite
    fgraph = compiler.float_graph(str(MANIFEST), str(WEIGHTS), imgsz)
    imgs = images.load_images(calib_dir(work), fgraph.meta["task"], tuple(fgraph.meta["input_hw"]))
    ranges = calibrate.ranges(fgraph, calibrate.calibrate(fgraph, imgs))
    report = json.loads((pkg / "quant.json").read_bytes())
    keep = tuple(sorted(r["name"] for r in report["ops"] if r["kind"] in rewrite.QUANTIZABLE
                        and r["precision"] == "float32"))
    graph = rewrite.quantize(fgraph, ranges, keep).graph
    tensors = {n: dict(shape=list(t.shape), scale=float(t.quant.scale), zero_point=int(t.quant.zero_point))
               for n, t in sorted(graph.tensors.items()) if t.dtype == "i8"}
    if tensors != report["tensors"]:
        raise SystemExit(f"int8pkg: the rebuilt graph's int8 tensors are not {pkg}/quant.json's")
    files = compiler.compile_model(str(MANIFEST), backend, str(WEIGHTS), imgsz, graph_hook=lambda g: graph).files
    have = package_files(pkg)
    have.pop(compiler.QUANT_JSON)
    if files != have:
        diff = sorted(set(files) ^ set(have)) or [k for k in files if files[k] != have[k]]
        raise SystemExit(f"int8pkg: the rebuilt graph does not emit {pkg}'s files (first difference: {diff[0]})")
    return graph


def letterboxed(images, imgsz: int = IMGSZ) -> dict:
    """{image path: the network input (h, w, 3) float32} exactly as a package's demo computes it from the file:
    the runtime's own stb decode + carve_letterbox + /255 (quant/images.py's C preprocessor, built from the
    runtime's carve_io.c / carve_pre.c)."""
    from carve.quant import images as qimages
    out = {}
    for path, px, reason in qimages.preprocess([Path(p) for p in images], "letterbox", (imgsz, imgsz)):
        if px is None:
            raise SystemExit(f"int8pkg: {path}: {reason}")
        out[path] = qimages.to_input(px)
    return out


def save_nchw(x_hwc: np.ndarray, path: Path) -> Path:
    """A (h, w, 3) input as the demo's --input tensor: float32 (1, 3, h, w)."""
    np.save(path, np.ascontiguousarray(x_hwc.transpose(2, 0, 1)[None], np.float32))
    return path


def run_demo(exe: Path, *args) -> subprocess.CompletedProcess:
    """Runs a package's demo; SystemExit with its stderr when it fails."""
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"int8pkg: {exe.name} {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr[-2000:]}")
    return r
