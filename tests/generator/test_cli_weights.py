"""``carve generate``'s weights options: ``--checkpoint PT``, ``--weights FORMAT`` (blob, c-array, file),
``--weights PT`` (the short form of --checkpoint) and ``--weights-format FORMAT``.

  * the spellings that mean the same thing produce byte-identical packages;
  * conflicting or missing values are one-line errors (exit 1) that name the values, and write nothing;
  * a format keyword that is also a file in the working folder is refused as ambiguous.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

import irsim  # noqa: E402
from carve import cli  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

MANIFEST = REPO / "manifests" / "yolo26n.yaml"
IMGSZ = "64"


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return irsim.save_checkpoint(irsim.build_yolo26("n", seed=0), tmp_path_factory.mktemp("w") / "yolo26n.pt")


def _generate(capsys, out: Path, *flags) -> tuple[int, str]:
    rc = cli.main(["generate", str(MANIFEST), "--backend", "portable", "--imgsz", IMGSZ, "--out", str(out), *flags])
    return rc, capsys.readouterr().err


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", ["file", "c-array"])
def test_spellings_give_identical_packages(capsys, tmp_path, weights, fmt):
    spellings = {
        "checkpoint+weights": ["--checkpoint", str(weights), "--weights", fmt],
        "weights+weights": ["--weights", str(weights), "--weights", fmt],
        "weights+weights-format": ["--weights", str(weights), "--weights-format", fmt],
    }
    trees = {}
    for key, flags in spellings.items():
        rc, err = _generate(capsys, tmp_path / key, *flags)
        assert rc == 0, err
        trees[key] = _tree(tmp_path / key)
    first = next(iter(trees.values()))
    marker = "yolo26n.weights" if fmt == "file" else "yolo26n_weights.c"
    assert marker in first, sorted(first)
    for key, tree in trees.items():
        assert tree == first, f"{key} differs"


def test_default_format_is_blob(capsys, tmp_path, weights):
    rc, err = _generate(capsys, tmp_path / "p", "--checkpoint", str(weights))
    assert rc == 0, err
    assert (tmp_path / "p" / "yolo26n_weights.S").is_file()


@pytest.mark.parametrize("flags, message", [
    (["--weights", "file"], "no checkpoint given"),
    (["--checkpoint", "a.pt", "--weights", "b.pt"], "two checkpoints given: a.pt, b.pt"),
    (["--checkpoint", "a.pt", "--weights", "file", "--weights-format", "blob"], "two weights formats given"),
    (["--checkpoint", "a.pt", "--weights", "file", "--weights", "c-array"], "two weights formats given"),
])
def test_conflicts_are_refused(capsys, tmp_path, flags, message):
    out = tmp_path / "p"
    rc, err = _generate(capsys, out, *flags)
    assert rc == 1
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_keyword_that_is_also_a_file_is_ambiguous(capsys, tmp_path, weights, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_bytes(Path(weights).read_bytes())
    rc, err = _generate(capsys, tmp_path / "p", "--weights", "file")
    assert rc == 1
    assert "'file' is both a weights format and a file here" in err and "--checkpoint ./file" in err, err
    rc, err = _generate(capsys, tmp_path / "p", "--checkpoint", "./file", "--weights", "file")
    assert rc == 0, err
