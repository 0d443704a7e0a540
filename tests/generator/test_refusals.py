"""Refusals of ``carve generate``: each is a one-line CarveError, exit status 1, no
traceback (unless -v), and nothing written.

Checked in-process through ``carve.cli.main`` (stderr captured) and as a subprocess of
the ``./carve`` launcher (exit status):
  (a) a backend the manifest does not list -> manifest file:line and the backend named;
  (b) ops the backend cannot lower (injected with ``graph_hook`` / a patched optimize)
      -> every such op named, in one error (xnnpack, and cuda: grouped non-depthwise conv,
      deconv kernel != stride, upsample x3);
  (c) an existing --out folder without --force -> refused, folder left untouched;
  (d) an unknown --backend name, and a listed backend this carve does not build;
  (e) a missing weights file -> its path named.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

import irsim  # noqa: E402
from carve import cli, compiler, ir  # noqa: E402
from carve.errors import CarveError  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("ultralytics")

MANIFEST = REPO / "manifests" / "yolo26n.yaml"
CARVE = REPO / "carve"
IMGSZ = "64"       # small: every refusal here happens before or after the graph, not in it


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return irsim.save_checkpoint(irsim.build_yolo26("n", seed=0), tmp_path_factory.mktemp("w") / "yolo26n.pt")


def _manifest_copy(folder: Path, backends: str) -> tuple[Path, int]:
    """yolo26n.yaml in ``folder`` with its config made absolute and ``backends: <backends>``;
    returns (path, line of the backends field)."""
    text = MANIFEST.read_text().replace("config: arch/yolo26.yaml",
                                        f"config: {REPO / 'manifests' / 'arch' / 'yolo26.yaml'}")
    assert len(re.findall(r"^backends: \[.*\]$", text, flags=re.M)) == 1
    text = re.sub(r"^backends: \[.*\]$", f"backends: {backends}", text, flags=re.M)
    path = folder / "copy.yaml"
    path.write_text(text)
    line = next(i + 1 for i, ln in enumerate(text.splitlines()) if ln.startswith("backends:"))
    return path, line


def _main(capsys, *argv) -> tuple[int, str]:
    rc = cli.main(["generate", *map(str, argv)])
    return rc, capsys.readouterr().err


def _carve(*argv) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run([str(CARVE), "generate", *map(str, argv)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300)


def _error_line(stderr: str) -> str:
    """The error text: everything from 'carve: error: ' on (progress lines come before it)."""
    assert "carve: error: " in stderr, stderr
    assert "Traceback" not in stderr, stderr
    return stderr[stderr.index("carve: error: ") + len("carve: error: "):].rstrip("\n")


def _listing(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir())


# ---------------------------------------------------------------------------
# (a) a backend the manifest does not list
# ---------------------------------------------------------------------------

def test_backend_not_in_manifest_in_process(tmp_path, capsys, weights):
    man, line = _manifest_copy(tmp_path, "[xnnpack]")
    out = tmp_path / "out"
    rc, err = _main(capsys, man, "--backend", "cuda", "--weights", weights, "--out", out, "--imgsz", IMGSZ)
    assert rc == 1
    msg = _error_line(err)
    assert msg.startswith(f"{man}:{line}: backend 'cuda' is not supported by yolo26n")
    assert "xnnpack" in msg and "\n" not in msg
    assert not out.exists()
    assert _listing(tmp_path) == ["copy.yaml"]


def test_backend_not_in_manifest_subprocess(tmp_path, weights):
    man, line = _manifest_copy(tmp_path, "[xnnpack]")
    out = tmp_path / "out"
    r = _carve(man, "--backend", "cuda", "--weights", weights, "--out", out)
    assert r.returncode == 1, r.stderr
    assert _error_line(r.stderr).startswith(f"{man}:{line}: backend 'cuda'")
    assert not out.exists()


# ---------------------------------------------------------------------------
# (b) ops the backend cannot lower
# ---------------------------------------------------------------------------

def _inject_unlowerable(graph: ir.Graph) -> ir.Graph:
    """Add a transposed conv whose kernel differs from its stride and a nearest upsample x3 (both declared
    in ir.OPS; xnnpack lowers neither form), reading layer 2's output right after it is produced."""
    t = graph.layers[2].output
    h, w, c = graph.tensors[t].shape
    dec = ir.Op(name="injected.deconv", kind="deconv2d", inputs=(t,), outputs=("injected.deconv",), layer=2,
                attrs=dict(kernel=(3, 3), stride=2, pad=0, cout=c), source="ConvTranspose 3x3/2")
    ups = ir.Op(name="injected.upsample", kind="upsample_nearest", inputs=(t,), outputs=("injected.upsample",), layer=2,
                attrs=dict(scale=3), source="Upsample x3 nearest")
    tensors = dict(graph.tensors)
    for op in (dec, ups):
        shape = ir.OPS[op.kind].infer(op, [(h, w, c)] * len(op.inputs))[0]
        tensors[op.outputs[0]] = ir.Tensor(op.outputs[0], tuple(shape))
    ops = list(graph.ops)
    at = next(i for i, op in enumerate(ops) if t in op.outputs) + 1
    ops[at:at] = [dec, ups]
    g = graph.replace(ops=tuple(ops), tensors=tensors)
    ir.validate(g)
    return g


def test_unlowerable_ops_are_all_listed(weights):
    with pytest.raises(CarveError) as info:
        compiler.compile_model(str(MANIFEST), "xnnpack", str(weights), int(IMGSZ), graph_hook=_inject_unlowerable)
    msg = info.value.message
    assert "cannot lower 2 op(s)" in msg
    assert "injected.deconv: transposed conv other than kernel = stride" in msg
    assert "injected.upsample: nearest upsample x3" in msg
    assert info.value.hint == "no files were written"


def test_the_hook_alone_is_harmless(weights):
    """Positive control: the same compile without the injection succeeds."""
    r = compiler.compile_model(str(MANIFEST), "xnnpack", str(weights), int(IMGSZ), graph_hook=lambda g: g)
    assert r.files and r.summary["imgsz"] == int(IMGSZ)


def test_unlowerable_ops_via_cli_write_nothing(tmp_path, capsys, weights, monkeypatch):
    real = compiler.optimize
    monkeypatch.setattr(compiler, "optimize", lambda g: _inject_unlowerable(real(g)))
    out = tmp_path / "pkg"
    rc, err = _main(capsys, MANIFEST, "--backend", "xnnpack", "--weights", weights, "--out", out, "--imgsz", IMGSZ)
    assert rc == 1
    msg = _error_line(err)
    assert "injected.deconv" in msg and "injected.upsample" in msg
    assert not out.exists()
    assert _listing(tmp_path) == []          # no half-written temporary folder either


def _inject_cuda_unlowerable(graph: ir.Graph) -> ir.Graph:
    """Three forms runtime/carve_cuda.h has no kernel for, reading layer 2's output: a grouped conv that is
    not depthwise (groups 2), a transposed conv whose kernel differs from its stride, a nearest upsample x3."""
    t = graph.layers[2].output
    h, w, c = graph.tensors[t].shape
    grp = ir.Op(name="injected.grouped", kind="conv2d", inputs=(t,), outputs=("injected.grouped",), layer=2,
                attrs=dict(kernel=(3, 3), stride=1, pad=1, groups=2, cin=c, cout=c, act="silu"),
                source="Conv 3x3/1 g2")
    dec = ir.Op(name="injected.deconv", kind="deconv2d", inputs=(t,), outputs=("injected.deconv",), layer=2,
                attrs=dict(kernel=(3, 3), stride=2, pad=0, groups=1, cin=c, cout=c, act="none"),
                source="ConvTranspose 3x3/2")
    ups = ir.Op(name="injected.upsample", kind="upsample_nearest", inputs=(t,), outputs=("injected.upsample",),
                layer=2, attrs=dict(scale=3), source="Upsample x3 nearest")
    tensors = dict(graph.tensors)
    for op in (grp, dec, ups):
        shape = ir.OPS[op.kind].infer(op, [(h, w, c)] * len(op.inputs))[0]
        tensors[op.outputs[0]] = ir.Tensor(op.outputs[0], tuple(shape))
    ops = list(graph.ops)
    at = next(i for i, op in enumerate(ops) if t in op.outputs) + 1
    ops[at:at] = [grp, dec, ups]
    g = graph.replace(ops=tuple(ops), tensors=tensors)
    ir.validate(g)
    return g


def test_cuda_unlowerable_ops_are_all_listed(weights):
    """The cuda backend refuses, at generation time and in one error, every op its runtime cannot run."""
    with pytest.raises(CarveError) as info:
        compiler.compile_model(str(MANIFEST), "cuda", str(weights), int(IMGSZ), graph_hook=_inject_cuda_unlowerable)
    msg = info.value.message
    assert msg.startswith("backend 'cuda' cannot lower 3 op(s) of yolo26n:"), msg
    assert "injected.grouped: grouped conv with groups 2 of " in msg and "only groups 1 and depthwise" in msg
    assert "injected.deconv: transposed conv 3x3/2 pad 0 (only kernel = stride, pad 0)" in msg
    assert "injected.upsample: nearest upsample x3 (only x2 is lowered)" in msg
    assert info.value.hint == "no files were written"


def test_cuda_lowers_the_model_without_the_injection(weights):
    """Positive control: the same cuda compile without the injection gives the package's files."""
    r = compiler.compile_model(str(MANIFEST), "cuda", str(weights), int(IMGSZ), graph_hook=lambda g: g)
    assert {"yolo26n.cu", "yolo26n.h", "yolo26n_demo.cu", "CMakeLists.txt", "runtime/carve_cuda.h"} <= set(r.files)


def test_cuda_unlowerable_ops_via_cli_write_nothing(tmp_path, capsys, weights, monkeypatch):
    real = compiler.optimize
    monkeypatch.setattr(compiler, "optimize", lambda g: _inject_cuda_unlowerable(real(g)))
    out = tmp_path / "pkg"
    rc, err = _main(capsys, MANIFEST, "--backend", "cuda", "--weights", weights, "--out", out, "--imgsz", IMGSZ)
    assert rc == 1
    msg = _error_line(err)
    assert "injected.grouped" in msg and "injected.deconv" in msg and "injected.upsample" in msg
    assert not out.exists()
    assert _listing(tmp_path) == []


# ---------------------------------------------------------------------------
# (c) an existing output folder
# ---------------------------------------------------------------------------

def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("how", ["in-process", "subprocess"])
def test_existing_out_without_force_is_untouched(tmp_path, capsys, weights, how):
    out = tmp_path / "pkg"
    (out / "sub").mkdir(parents=True)
    (out / "mine.txt").write_text("mine\n")
    (out / "sub" / "yolo26n.c").write_text("/* not generated */\n")
    before = _snapshot(out)
    argv = (MANIFEST, "--backend", "xnnpack", "--weights", weights, "--out", out, "--imgsz", IMGSZ)
    if how == "in-process":
        rc, err = _main(capsys, *argv)
    else:
        r = _carve(*argv)
        rc, err = r.returncode, r.stderr
    assert rc == 1
    msg = _error_line(err)
    assert msg.split(": output folder exists")[0] in (str(out), str(out.resolve())) and "--force" in msg
    assert _snapshot(out) == before
    assert _listing(tmp_path) == ["pkg"]


def test_new_out_folder_is_written(tmp_path, capsys, weights):
    """Positive control of (c): a fresh --out gets the package (and only it appears)."""
    out = tmp_path / "pkg"
    rc, err = _main(capsys, MANIFEST, "--backend", "xnnpack", "--weights", weights, "--out", out, "--imgsz", IMGSZ)
    assert rc == 0, err
    assert (out / "yolo26n.c").is_file() and (out / "yolo26n.h").is_file()
    assert _listing(tmp_path) == ["pkg"]


# ---------------------------------------------------------------------------
# (d) unknown backends
# ---------------------------------------------------------------------------

def test_unknown_backend_name_in_process(tmp_path, capsys, weights):
    out = tmp_path / "out"
    rc, err = _main(capsys, MANIFEST, "--backend", "tpu", "--weights", weights, "--out", out)
    assert rc == 1
    msg = _error_line(err)
    assert "'tpu'" in msg and "xnnpack" in msg and "\n" not in msg
    assert msg.startswith(f"{MANIFEST}:")
    assert not out.exists()


def test_unknown_backend_name_subprocess(tmp_path, weights):
    out = tmp_path / "out"
    r = _carve(MANIFEST, "--backend", "tpu", "--weights", weights, "--out", out)
    assert r.returncode == 1
    assert "'tpu'" in _error_line(r.stderr)
    assert not out.exists()


def test_listed_backend_this_carve_lacks(tmp_path, capsys, weights, monkeypatch):
    """A manifest may declare a backend that this carve does not build: refused by name, with the backends it
    does build. Every declared backend is built today, so this carve is made to lack one (portable)."""
    from carve import backends
    monkeypatch.setattr(backends, "_MODULES", tuple(m for m in backends._MODULES if m != "portable"))
    man, _ = _manifest_copy(tmp_path, "[xnnpack, portable]")
    out = tmp_path / "out"
    rc, err = _main(capsys, man, "--backend", "portable", "--weights", weights, "--out", out)
    assert rc == 1
    msg = _error_line(err)
    assert "--backend portable: not available in this carve" in msg and "xnnpack" in msg and "cuda" in msg
    assert not out.exists()


# ---------------------------------------------------------------------------
# (e) a missing weights file
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("how", ["in-process", "subprocess"])
def test_missing_weights_file_is_named(tmp_path, capsys, how):
    missing = tmp_path / "nowhere" / "yolo26n.pt"
    out = tmp_path / "out"
    argv = (MANIFEST, "--backend", "xnnpack", "--weights", missing, "--out", out)
    if how == "in-process":
        rc, err = _main(capsys, *argv)
    else:
        r = _carve(*argv)
        rc, err = r.returncode, r.stderr
    assert rc == 1
    msg = _error_line(err)
    assert msg == f"{missing}: no such file"
    assert not out.exists()


# ---------------------------------------------------------------------------
# -v shows the traceback
# ---------------------------------------------------------------------------

def test_verbose_shows_the_traceback(tmp_path, capsys):
    missing = tmp_path / "yolo26n.pt"
    rc = cli.main(["generate", str(MANIFEST), "--backend", "xnnpack", "--weights", str(missing), "-v"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback" in err and f"carve: error: {missing}: no such file" in err
