"""Bad input to ``carve generate --precision int8`` (issue 19, item 6: the generator's side) that
tests/generator/test_quant.py does not cover, on the shipped demo checkpoint at imgsz 64 (no torch needed). Every
refusal is one ``carve: error:`` line naming what is wrong, exit status 1, no traceback, and nothing written: a new
output folder does not exist afterwards, an existing one (with --force) keeps its bytes.

test_quant.py has: --calib without --precision int8 and the reverse, several manifests, cuda (before the folder is
read), a missing folder, a file, an empty folder / hidden files only, 5 images, and a non-image and a truncated PNG
among 32 images. Here:

  * --precision int8 with --weights-dtype f16 (portable and xnnpack): refused up front (before, the pass ran for
    half a minute and the f16 packer crashed with a ValueError traceback);
  * a folder whose images are all in sub-folders (which are not searched), one of non-image files only (each named);
  * a bad folder (31 images; a non-image among 32) with --force into an existing package: its bytes unchanged;
  * the ./carve launcher's exit status.

The folders' images are tiny binary PPMs (stb_image reads them, as a package's demo does); no test here reaches the
calibration itself, so each takes about a second (the calibration reader, a small C tool, is compiled once into
carve's cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))

from carve import cli  # noqa: E402
from carve.quant.images import MIN_IMAGES  # noqa: E402

PT = REPO / "assets" / "yolo26n-shapes.pt"
SHAPES = REPO / "manifests" / "yolo26n-shapes.yaml"
IMGSZ = "64"


def _ppm(path: Path, seed: int, w: int = 24, h: int = 16) -> Path:
    rgb = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    path.write_bytes(f"P6\n{w} {h}\n255\n".encode() + rgb.tobytes())
    return path


def _images(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        _ppm(folder / f"img-{i:02d}.ppm", i)
    return folder


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(capsys, *argv, backend: str = "portable") -> str:
    """Runs ``carve generate`` in this process; the one error line (asserted: exit 1, no traceback)."""
    rc = cli.main(["generate", str(SHAPES), "--backend", backend, "--checkpoint", str(PT), "--imgsz", IMGSZ,
                   *map(str, argv)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("carve: error: ")]
    assert len(lines) == 1, err
    return err[err.index("carve: error: "):]


@pytest.fixture(scope="module")
def calib(tmp_path_factory) -> Path:
    return _images(tmp_path_factory.mktemp("calib") / "images", MIN_IMAGES)


# ---- --weights-dtype f16 ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_int8_with_f16_weights(capsys, tmp_path, calib, backend):
    """Before this refusal existed, the pass ran for its 30 s and the f16 packer crashed (a ValueError traceback)."""
    out = tmp_path / "pkg"
    err = _refused(capsys, "--precision", "int8", "--calib", calib, "--weights-dtype", "f16", "--out", out,
                   backend=backend)
    assert "--weights-dtype f16: an int8 package stores its weights as int8" in err
    assert not out.exists()


# ---- the calibration folder ------------------------------------------------------------------------------------

def _folder(tmp_path: Path, case: str) -> tuple:
    """(the --calib path, the words the error must hold) of a bad calibration folder."""
    d = tmp_path / f"calib-{case}"
    d.mkdir()
    if case == "sub-folders only":
        _images(d / "train", MIN_IMAGES)
        return d, [str(d), "holds no files"]
    if case == "non-images only":
        names = ["a.txt", "b.json", "c.pt"]
        for n in names:
            (d / n).write_bytes(b"not an image " * 8)
        return d, [str(d), "3 of 3 file(s) are not images", *(str(d / n) for n in names)]
    if case == "too few images":
        _images(d, MIN_IMAGES - 1)
        return d, [str(d), f"{MIN_IMAGES - 1} image(s), at least {MIN_IMAGES} are needed"]
    if case == "a non-image among images":
        _images(d, MIN_IMAGES)
        (d / "notes.txt").write_text("labels are in another folder\n")
        return d, [str(d), f"1 of {MIN_IMAGES + 1} file(s) are not images", str(d / "notes.txt")]
    raise AssertionError(case)


CASES = ["sub-folders only", "non-images only"]   # the other folders: test_quant.py


@pytest.mark.parametrize("case", CASES)
def test_bad_calibration_folder_writes_nothing(capsys, tmp_path, case):
    folder, words = _folder(tmp_path, case)
    before = _tree(folder)
    out = tmp_path / "pkg"
    err = _refused(capsys, "--precision", "int8", "--calib", folder, "--out", out)
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    assert not out.exists(), "a refused generation left an output folder"
    assert _tree(folder) == before, "the calibration folder was changed"


@pytest.mark.parametrize("case", ["too few images", "a non-image among images"])
def test_bad_calibration_folder_keeps_an_existing_package(capsys, tmp_path, case):
    """With --force into an existing package folder: refused, the folder's bytes unchanged."""
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "yolo26n_shapes.c").write_text("// the previous package\n")
    before = _tree(out)
    folder, words = _folder(tmp_path, case)
    err = _refused(capsys, "--precision", "int8", "--calib", folder, "--out", out, "--force")
    assert all(w in err for w in words), err
    assert _tree(out) == before


def test_launcher_exit_status(tmp_path):
    """The ./carve launcher: exit status 1 and the folder named on stderr, no traceback."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    folder = _images(tmp_path / "few", 3)
    out = tmp_path / "pkg"
    r = subprocess.run([str(REPO / "carve"), "generate", str(SHAPES), "--backend", "xnnpack", "--checkpoint", str(PT),
                        "--imgsz", IMGSZ, "--precision", "int8", "--calib", str(folder), "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stderr
    assert "carve: error: " in r.stderr and str(folder) in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
