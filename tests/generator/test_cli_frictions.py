"""What a new user meets first (issue 18, item 5), on the shipped demo checkpoint (no torch needed):

  * ``carve generate model.pt --backend B`` (or ``--checkpoint model.pt`` alone) picks the shipped manifest
    from the checkpoint's task and scale, and gives the package the named manifest gives;
  * a checkpoint where a manifest is expected is named as such, with a hint;
  * a task or scale mismatch names the right manifest (the task's own, e.g. yolo26s-seg.yaml);
  * a manifest or backend error, and a checkpoint whose task or scale is not the manifest's, come before
    "output folder exists";
  * the default output folder is generated/<model>-<backend> under the current directory;
  * the ./carve launcher works from any directory and through (chains of relative) symlinks.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))

from carve import cli  # noqa: E402
from carve.checkpoint import read_checkpoint  # noqa: E402
from carve.compiler import compile_model, infer_manifest  # noqa: E402
from carve.errors import CarveError  # noqa: E402
from carve.manifest import load_architecture, load_manifest  # noqa: E402

PT = REPO / "assets" / "yolo26n-shapes.pt"
SHAPES = REPO / "manifests" / "yolo26n-shapes.yaml"
IMGSZ = "64"


@pytest.fixture(scope="module")
def ckpt():
    return read_checkpoint(PT)


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _error(capsys, *argv) -> str:
    rc = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("carve: error: ")]
    assert len(lines) == 1, err
    return lines[0]


# ---- the manifest picked from the checkpoint ---------------------------------------------------------------

@pytest.mark.parametrize("spelling", ["positional", "--checkpoint", "--weights"])
def test_checkpoint_without_manifest(capsys, tmp_path, spelling):
    """The demo checkpoint's class names pick yolo26n-shapes.yaml (not yolo26n.yaml): the package is the one
    the named manifest gives, byte for byte."""
    args = {"positional": [PT], "--checkpoint": ["--checkpoint", PT], "--weights": ["--weights", PT]}[spelling]
    out = tmp_path / "pkg"
    rc = cli.main(["generate", *map(str, args), "--backend", "portable", "--imgsz", IMGSZ, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"no manifest given: {SHAPES}" in err
    assert _tree(out) == compile_model(str(SHAPES), "portable", str(PT), int(IMGSZ)).files


@pytest.mark.parametrize("task, scale, suffix", [
    ("detect", "s", ""), ("segment", "m", "-seg"), ("pose", "l", "-pose"), ("obb", "x", "-obb"),
    ("classify", "n", "-cls"), ("detect", "n", "")])
def test_infer_manifest_per_task_and_scale(ckpt, task, scale, suffix):
    """Without the demo's class names, task and scale pick manifests/yolo26<scale><suffix>.yaml."""
    fake = dataclasses.replace(ckpt, task=task, names={0: "person"}, yaml=dict(ckpt.yaml, scale=scale))
    path = Path(infer_manifest(fake))
    assert path == REPO / "manifests" / f"yolo26{scale}{suffix}.yaml"
    m = load_manifest(path)
    assert (m.task, m.scale) == (task, scale)


def test_infer_manifest_scale_from_yaml_file(ckpt):
    y = {k: v for k, v in ckpt.yaml.items() if k != "scale"}
    fake = dataclasses.replace(ckpt, task="segment", names=None, yaml=dict(y, yaml_file="yolo26s-seg.yaml"))
    assert Path(infer_manifest(fake)).name == "yolo26s-seg.yaml"


@pytest.mark.parametrize("change, words", [
    (dict(task=None), "cannot tell the model's task"),
    (dict(yaml={"nc": 80}), "cannot tell the model's scale"),
    (dict(yaml={"yaml_file": "yolov8n.yaml", "scale": "n"}), "'yolov8n.yaml', not a YOLO26 variant"),
])
def test_infer_manifest_refusals(ckpt, change, words):
    with pytest.raises(CarveError) as e:
        infer_manifest(dataclasses.replace(ckpt, **change))
    assert words in str(e.value) and e.value.location == str(PT)


# ---- a checkpoint where a manifest is expected -------------------------------------------------------------

def test_checkpoint_given_as_manifest(capsys, tmp_path):
    """Given both a checkpoint in the manifest's place and --checkpoint, the first is named as a checkpoint."""
    line = _error(capsys, "generate", PT, "--backend", "portable", "--checkpoint", PT, "--out", tmp_path / "o")
    assert f"{PT}: this is a checkpoint, not a manifest" in line
    assert "hint: `carve generate" in line and "--checkpoint" in line
    assert not (tmp_path / "o").exists()


def test_checkpoint_by_its_bytes(tmp_path):
    """A torch zip under a .yaml name is still recognised (not "cannot read manifest: utf-8 ...")."""
    fake = tmp_path / "model.yaml"
    shutil.copy(PT, fake)
    with pytest.raises(CarveError) as e:
        load_manifest(fake)
    assert "this is a checkpoint, not a manifest" in str(e.value)


# ---- mismatches name the right manifest --------------------------------------------------------------------

def test_task_mismatch_names_the_manifest(ckpt):
    with pytest.raises(CarveError) as e:
        compile_model(str(REPO / "manifests" / "yolo26n-seg.yaml"), "portable", ckpt, 64)
    assert "checkpoint is a 'detect' model" in str(e.value)
    assert e.value.hint == f"use {SHAPES}"  # its class names are the demo manifest's
    plain = dataclasses.replace(ckpt, names={0: "a"})
    with pytest.raises(CarveError) as e:
        compile_model(str(REPO / "manifests" / "yolo26n-pose.yaml"), "portable", plain, 64)
    assert e.value.hint == f"use {REPO / 'manifests' / 'yolo26n.yaml'}"


def test_task_mismatch_uses_the_checkpoint_scale(ckpt):
    seg = dataclasses.replace(ckpt, task="segment", names=None, yaml=dict(ckpt.yaml, scale="s"))
    with pytest.raises(CarveError) as e:
        compile_model(str(REPO / "manifests" / "yolo26m.yaml"), "portable", seg, 64)
    assert e.value.hint == f"use {REPO / 'manifests' / 'yolo26s-seg.yaml'}"


def test_scale_mismatch_names_the_task_manifest(ckpt):
    """A segment checkpoint of scale s against yolo26n-seg.yaml: the hint is yolo26s-seg.yaml (was yolo26s.yaml)."""
    manifest = REPO / "manifests" / "yolo26n-seg.yaml"
    arch = load_architecture(load_manifest(manifest))
    seg = dataclasses.replace(ckpt, task="segment", names=None, yaml=dict(arch, scale="s"))
    with pytest.raises(CarveError) as e:
        compile_model(str(manifest), "portable", seg, 64)
    assert "checkpoint is scale 's'" in str(e.value)
    assert e.value.hint == f"use {REPO / 'manifests' / 'yolo26s-seg.yaml'}"


# ---- order of the checks, the default output folder --------------------------------------------------------

@pytest.mark.parametrize("case", ["bad-manifest", "missing-manifest", "backend"])
def test_manifest_errors_before_output_folder_exists(capsys, tmp_path, case):
    out = tmp_path / "pkg"
    out.mkdir()
    bad = tmp_path / "bad.yaml"
    bad.write_text(SHAPES.read_text().replace("task: detect", "task: detection"))
    manifest = {"bad-manifest": bad, "missing-manifest": tmp_path / "none.yaml", "backend": SHAPES}[case]
    backend = "tpu" if case == "backend" else "portable"
    line = _error(capsys, "generate", manifest, "--backend", backend, "--checkpoint", PT, "--out", out)
    assert "output folder exists" not in line
    assert {"bad-manifest": "task: 'detection' is not one of", "missing-manifest": "manifest not found",
            "backend": "backend 'tpu' is not supported"}[case] in line


@pytest.mark.parametrize("case", ["task", "scale"])
def test_checkpoint_mismatch_before_output_folder_exists(capsys, tmp_path, case):
    """A checkpoint that does not fit the manifest is the error, not the existing output folder (which --force
    would only get past to meet the mismatch)."""
    out = tmp_path / "pkg"
    out.mkdir()
    manifest = REPO / "manifests" / {"task": "yolo26n-seg.yaml", "scale": "yolo26s.yaml"}[case]
    line = _error(capsys, "generate", manifest, "--backend", "portable", "--checkpoint", PT, "--out", out)
    assert "output folder exists" not in line
    assert {"task": "checkpoint is a 'detect' model", "scale": "checkpoint is scale 'n'"}[case] in line
    assert f"hint: use {SHAPES}" in line  # the demo checkpoint's own manifest, by its class names
    assert list(out.iterdir()) == []
    rc = cli.main(["generate", str(SHAPES), "--backend", "portable", "--checkpoint", str(PT), "--out", str(out)])
    assert rc == 1 and "output folder exists" in capsys.readouterr().err  # a fitting checkpoint: the folder


def test_default_output_folder_is_under_the_current_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["generate", str(SHAPES), "--backend", "portable", "--checkpoint", str(PT), "--imgsz", IMGSZ])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert (tmp_path / "generated" / "yolo26n-shapes-portable" / "yolo26n_shapes.c").is_file()


# ---- the launcher ------------------------------------------------------------------------------------------

def test_launcher_through_symlinks_from_any_directory(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "bin" / "carve").symlink_to(REPO / "carve")               # absolute link
    (tmp_path / "other" / "c2").symlink_to(Path("..") / "bin" / "carve")  # relative link to a link
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    for argv in (["carve", "list"], [str(tmp_path / "other" / "c2"), "list"], ["../other/c2", "list"]):
        r = subprocess.run(argv, cwd=tmp_path / "bin", env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (argv, r.stderr)
        assert "yolo26n-shapes" in r.stdout and "yolo26x-cls" in r.stdout, argv


def test_multi_checkpoint_mismatch_before_output_folder_exists(capsys, tmp_path):
    """The same order for several models in one package: a checkpoint that does not fit its manifest first."""
    out = tmp_path / "pkg"
    out.mkdir()
    seg = REPO / "manifests" / "yolo26n-seg.yaml"
    line = _error(capsys, "generate", SHAPES, seg, "--backend", "portable", "--checkpoint", PT, "--checkpoint", PT,
                  "--out", out)
    assert "output folder exists" not in line
    assert "checkpoint is a 'detect' model" in line and f"hint: use {SHAPES}" in line
    assert list(out.iterdir()) == []
