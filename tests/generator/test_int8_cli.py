"""Bad input to ``carve generate --precision int8`` (issue 19, item 6: the generator's side), on the shipped demo
checkpoint at imgsz 64 (no torch needed). Every refusal is one ``carve: error:`` line naming what is wrong (the
option, the calibration folder, or each unreadable file), exit status 1, no traceback, and nothing written: a new
output folder does not exist afterwards, an existing one (with --force) keeps its bytes.

  * --calib without --precision int8, --precision int8 without --calib;
  * --precision int8 on the cuda backend (refused before the calibration folder is read), with --weights-dtype f16
    (refused: int8 weights are stored as int8), with several manifests;
  * the calibration folder missing, a file instead of a folder, empty, holding only hidden files or only
    sub-folders, too few readable images (31 of the 32 needed), a non-image file among 32 images (named, with
    the images left alone), only non-image files (each named), a truncated PNG among images (named).

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


# ---- the options ---------------------------------------------------------------------------------------------

def test_calib_without_int8(capsys, tmp_path, calib):
    out = tmp_path / "pkg"
    err = _refused(capsys, "--calib", calib, "--out", out)
    assert "--calib" in err and "--precision int8" in err
    assert not out.exists()


def test_int8_without_calib(capsys, tmp_path):
    out = tmp_path / "pkg"
    err = _refused(capsys, "--precision", "int8", "--out", out)
    assert "--precision int8 needs --calib DIR" in err
    assert not out.exists()


def test_cuda_refuses_int8_before_reading_the_folder(capsys, tmp_path):
    """The cuda backend computes in float32: refused at once, the (missing) calibration folder never looked at."""
    out = tmp_path / "pkg"
    err = _refused(capsys, "--precision", "int8", "--calib", tmp_path / "no-such-folder", "--out", out,
                   backend="cuda")
    assert "--precision int8: the cuda backend computes in float32 only" in err
    assert "no-such-folder" not in err
    assert not out.exists()


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_int8_with_f16_weights(capsys, tmp_path, calib, backend):
    """Before this refusal existed, the pass ran for its 30 s and the f16 packer crashed (a ValueError traceback)."""
    out = tmp_path / "pkg"
    err = _refused(capsys, "--precision", "int8", "--calib", calib, "--weights-dtype", "f16", "--out", out,
                   backend=backend)
    assert "--weights-dtype f16: an int8 package stores its weights as int8" in err
    assert not out.exists()


def test_int8_with_several_manifests(capsys, tmp_path, calib):
    out = tmp_path / "pkg"
    rc = cli.main(["generate", str(SHAPES), str(SHAPES), "--backend", "portable", "--checkpoint", str(PT),
                   "--checkpoint", str(PT), "--precision", "int8", "--calib", str(calib), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "--precision int8: one model per package" in err and "Traceback" not in err
    assert not out.exists()


# ---- the calibration folder ------------------------------------------------------------------------------------

def _folder(tmp_path: Path, case: str) -> tuple:
    """(the --calib path, the words the error must hold) of a bad calibration folder."""
    d = tmp_path / f"calib-{case}"
    if case == "missing":
        return d, [str(d), "no such folder"]
    if case == "a file":
        _ppm(tmp_path / "one.ppm", 0)
        return tmp_path / "one.ppm", [str(tmp_path / "one.ppm"), "not a folder"]
    d.mkdir()
    if case == "empty":
        return d, [str(d), "holds no files"]
    if case == "hidden files only":
        _ppm(d / ".hidden.ppm", 0)
        (d / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
        return d, [str(d), "holds no files"]
    if case == "sub-folders only":
        _images(d / "train", MIN_IMAGES)
        return d, [str(d), "holds no files"]
    if case == "too few images":
        _images(d, MIN_IMAGES - 1)
        return d, [str(d), f"{MIN_IMAGES - 1} image(s), at least {MIN_IMAGES} are needed"]
    if case == "a non-image among images":
        _images(d, MIN_IMAGES)
        (d / "notes.txt").write_text("labels are in another folder\n")
        return d, [str(d), f"1 of {MIN_IMAGES + 1} file(s) are not images", str(d / "notes.txt")]
    if case == "non-images only":
        names = ["a.txt", "b.json", "c.pt"]
        for n in names:
            (d / n).write_bytes(b"not an image " * 8)
        return d, [str(d), "3 of 3 file(s) are not images", *(str(d / n) for n in names)]
    if case == "a truncated PNG":
        import cv2
        _images(d, MIN_IMAGES)
        ok, png = cv2.imencode(".png", np.full((40, 40, 3), 200, np.uint8))
        assert ok
        (d / "cut.png").write_bytes(png.tobytes()[:60])
        return d, [str(d), f"1 of {MIN_IMAGES + 1} file(s) are not images", str(d / "cut.png")]
    raise AssertionError(case)


CASES = ["missing", "a file", "empty", "hidden files only", "sub-folders only", "too few images",
         "a non-image among images", "non-images only", "a truncated PNG"]


@pytest.mark.parametrize("case", CASES)
def test_bad_calibration_folder_writes_nothing(capsys, tmp_path, case):
    folder, words = _folder(tmp_path, case)
    before = _tree(folder) if folder.is_dir() else None
    out = tmp_path / "pkg"
    err = _refused(capsys, "--precision", "int8", "--calib", folder, "--out", out)
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    assert not out.exists(), "a refused generation left an output folder"
    if before is not None:
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
