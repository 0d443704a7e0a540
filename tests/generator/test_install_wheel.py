"""carve installs the way Python tools do (issue 18, item 6): pyproject.toml + tools/carve_build.py.

One sdist and two wheels are built offline (the backend needs only the standard library): a wheel from the
checkout (what `pip install .` builds) and one from the unpacked sdist; they must hold the same files, with
templates/, runtime/ and manifests/ inside the package. The sdist's wheel is installed into a fresh virtual
environment (system site-packages for jinja2 / PyYAML / numpy, --no-index: no network), and from a folder
outside the checkout its `carve` command must list the models and generate the demo model's package into
./generated/, byte for byte the package the checkout generates (but for the manifest's path in its README).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))

from carve.compiler import compile_model  # noqa: E402

PT = REPO / "assets" / "yolo26n-shapes.pt"


def _run(argv, **kw):
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{argv}:\n{r.stdout}\n{r.stderr}"
    return r


def _backend():
    spec = importlib.util.spec_from_file_location("carve_build", REPO / "tools" / "carve_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _wheel(src: Path, out: Path) -> Path:
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation", "-q",
          "-w", out, src])
    (whl,) = out.glob("carve-*.whl")
    return whl


def _contents(whl: Path) -> dict:
    with zipfile.ZipFile(whl) as z:
        return {n: z.read(n) for n in z.namelist()}


def test_wheel_installs_a_working_carve(tmp_path):
    if importlib.util.find_spec("venv") is None or importlib.util.find_spec("pip") is None:
        pytest.skip("python3 without venv or pip")
    sdist = tmp_path / "sdist" / _backend().build_sdist(str(tmp_path / "sdist"))
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 (and backports): refuse links, absolute paths
            tar.extractall(tmp_path / "src", filter="data")
        else:
            tar.extractall(tmp_path / "src")
    (unpacked,) = (tmp_path / "src").iterdir()
    from_sdist = _contents(_wheel(unpacked, tmp_path / "w1"))
    from_repo = _contents(_wheel(REPO, tmp_path / "w2"))
    assert from_sdist == from_repo  # the sdist is complete, and the build reproducible
    names = set(from_repo)
    for need in ("carve/cli.py", "carve/paths.py", "carve/templates/common/demo.c.j2", "carve/runtime/carve_rt.h",
                 "carve/manifests/yolo26n-shapes.yaml", "carve/manifests/arch/yolo26.yaml"):
        assert need in names, need
    info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "carve = carve.cli:main" in from_repo[info].decode()

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    _run([bindir / "python", "-m", "pip", "install", "-q", "--no-index", "--no-deps",
          next((tmp_path / "w1").glob("*.whl"))])
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    where = _run(["python", "-c", "import carve.paths as p; print(p.PACKAGE); print(p.data_dir('templates'))"],
                 cwd=work, env=env).stdout.split()
    assert all(Path(w).is_relative_to(venv) for w in where), where  # the installed copy, not the checkout

    listing = _run(["carve", "list"], cwd=work, env=env).stdout
    assert listing == _run([REPO / "carve", "list"], cwd=work).stdout
    _run(["carve", "generate", PT, "--backend", "portable", "--imgsz", "64"], cwd=work, env=env)
    pkg = work / "generated" / "yolo26n-shapes-portable"
    got = {str(p.relative_to(pkg)): p.read_bytes() for p in sorted(pkg.rglob("*")) if p.is_file()}
    manifest = REPO / "manifests" / "yolo26n-shapes.yaml"
    want = compile_model(str(manifest), "portable", str(PT), 64).files
    installed = Path(where[0]) / "manifests" / "yolo26n-shapes.yaml"  # the README names the manifest used
    assert str(installed).encode() in got["README.md"]
    got["README.md"] = got["README.md"].replace(str(installed).encode(), str(manifest).encode())
    assert got == want
