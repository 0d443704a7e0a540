"""Generation is atomic: a failure injected at each stage of ``carve generate`` (carve.faults: read,
build, optimize, check, plan, emit, the write of each file, chmod, keeping build/, parking the old
package, the final rename) leaves no partial package and no temporary folder, and an existing
package is left exactly as it was (bytes and time stamps), with or without --force.

The stages are the ones a successful run reports, recorded here, not a typed list. The model is the
shipped demo model at imgsz 64 (no torch needed).
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve import cli, compiler, faults  # noqa: E402

MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"
WEIGHTS = REPO / "assets" / "yolo26n-shapes.pt"
ARGS = [str(MANIFEST), "--backend", "xnnpack", "--weights", str(WEIGHTS), "--imgsz", "64"]
COMPILE_STAGES = ["read", "build", "optimize", "check", "plan", "emit"]


class Injected(OSError):
    pass


def _generate(capsys, out: Path, *extra) -> tuple[int, str]:
    rc = cli.main(["generate", *ARGS, "--out", str(out), *extra])
    return rc, capsys.readouterr().err


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def stages():
    """Every fault point a successful generation passes, in order (recorded, then checked)."""
    import tempfile

    seen = []
    faults.hook = seen.append
    try:
        with tempfile.TemporaryDirectory() as d:
            assert cli.main(["generate", *ARGS, "--out", f"{d}/pkg"]) == 0
            (Path(d) / "pkg" / "build").mkdir()
            first = list(seen)
            seen.clear()
            assert cli.main(["generate", *ARGS, "--out", f"{d}/pkg", "--force"]) == 0
            update = list(seen)
    finally:
        faults.hook = None
    assert first[:6] == COMPILE_STAGES
    writes = [s for s in first if s.startswith("write:")]
    assert "write:yolo26n_shapes.c" in writes and "write:CMakeLists.txt" in writes and len(writes) > 10
    assert first[-2:] == ["chmod", "rename"]
    assert update[-4:] == ["chmod", "keep-build", "park-old", "rename"]
    return {"new": first, "update": update}


@pytest.fixture()
def cached_compile(monkeypatch):
    """Stages after emit do not need a fresh compile: reuse one result (the write is what is tested)."""
    real = compiler.compile_model
    cache = {}

    def compile_once(*a, **kw):
        if "r" not in cache:
            cache["r"] = real(*a, **kw)
        for s in COMPILE_STAGES:
            faults.point(s)
        return cache["r"]

    monkeypatch.setattr(compiler, "compile_model", compile_once)


def _fail_at(stage: str, exc: BaseException):
    def hook(s):
        if s == stage:
            raise exc
    return hook


@pytest.mark.parametrize("kind", ["oserror", "interrupt"])
def test_fresh_output_failure_at_every_stage(tmp_path, capsys, stages, cached_compile, kind):
    for stage in stages["new"]:
        parent = tmp_path / stage.replace("/", "_").replace(":", "_")
        parent.mkdir()
        (parent / "neighbour.txt").write_text("keep\n")
        out = parent / "pkg"
        exc = Injected(errno.ENOSPC, "No space left on device") if kind == "oserror" else KeyboardInterrupt()
        faults.hook = _fail_at(stage, exc)
        try:
            rc, err = _generate(capsys, out)
        finally:
            faults.hook = None
        if kind == "oserror":
            assert rc == 1, (stage, err)
            assert "carve: error:" in err and "Traceback" not in err, (stage, err)
        else:
            assert rc == 130, (stage, err)
        assert not out.exists(), stage
        assert sorted(p.name for p in parent.iterdir()) == ["neighbour.txt"], (stage, list(parent.iterdir()))


def _existing_package(parent: Path, capsys) -> Path:
    out = parent / "pkg"
    rc, err = _generate(capsys, out)
    assert rc == 0, err
    (out / "build").mkdir()
    (out / "build" / "CMakeCache.txt").write_text("user build\n")
    (out / "stale.txt").write_text("not generated\n")
    # make one generated file differ, so an update has something to write
    c = out / "yolo26n_shapes.c"
    c.write_bytes(c.read_bytes() + b"\n// edited\n")
    return out


@pytest.mark.parametrize("kind", ["oserror", "interrupt"])
def test_existing_package_failure_at_every_stage_with_force(tmp_path, capsys, stages, cached_compile, kind):
    for stage in stages["update"]:
        parent = tmp_path / stage.replace("/", "_").replace(":", "_")
        parent.mkdir()
        out = _existing_package(parent, capsys)
        before = _snapshot(out)
        exc = Injected(errno.EIO, "I/O error") if kind == "oserror" else KeyboardInterrupt()
        faults.hook = _fail_at(stage, exc)
        try:
            rc, err = _generate(capsys, out, "--force")
        finally:
            faults.hook = None
        assert rc == (1 if kind == "oserror" else 130), (stage, err)
        assert _snapshot(out) == before, stage
        assert sorted(p.name for p in parent.iterdir()) == ["pkg"], (stage, list(parent.iterdir()))


def test_existing_package_without_force_is_untouched(tmp_path, capsys):
    out = _existing_package(tmp_path, capsys)
    before = _snapshot(out)
    rc, err = _generate(capsys, out)
    assert rc == 1 and "output folder exists" in err and "--force" in err
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]


def test_force_update_succeeds_and_keeps_build(tmp_path, capsys):
    """Positive control of the rollbacks: the same update without a fault replaces the package,
    keeps build/ and the time stamps of unchanged files, and drops files it does not generate."""
    out = _existing_package(tmp_path, capsys)
    before = _snapshot(out)
    rc, err = _generate(capsys, out, "--force")
    assert rc == 0, err
    after = _snapshot(out)
    assert after["build/CMakeCache.txt"] == before["build/CMakeCache.txt"]
    assert "stale.txt" not in after
    assert after["yolo26n_shapes.c"][0] != before["yolo26n_shapes.c"][0]  # the edit was undone
    assert after["yolo26n_shapes.h"] == before["yolo26n_shapes.h"]        # unchanged: same bytes and mtime
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]


def test_output_path_that_is_a_file(tmp_path, capsys):
    out = tmp_path / "pkg"
    out.write_text("a file\n")
    rc, err = _generate(capsys, out, "--force")
    assert rc == 1 and "not a folder" in err
    assert out.read_text() == "a file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]
