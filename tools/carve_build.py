"""PEP 517 build backend for carve (pyproject.toml names it): wheels and sdists from the standard library only.

Why not setuptools: building then needs setuptools and wheel in the build environment, which pip downloads
(build isolation) or finds installed; a machine without either, or offline, could not `pip install .`. This
backend needs nothing but Python.

The wheel holds the package ``carve`` (generator/carve/*.py) with the repository's templates/, runtime/ and
manifests/ copied into it as carve/templates, carve/runtime and carve/manifests (carve.paths looks there
first), the ``carve`` console script (pyproject's [project.scripts]) and the metadata of pyproject's
[project] table. Output is reproducible: sorted entries, fixed time stamps and modes.
An editable install (``pip install -e .``) puts generator/ on sys.path through a .pth file; carve then reads
the checkout's templates/, runtime/ and manifests/.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "generator" / "carve"
DATA = ("templates", "runtime", "manifests")  # copied into the package
SDIST_TOP = ("pyproject.toml", "README.md", "requirements.txt", "carve")
SDIST_TREES = ("generator/carve", "tools/carve_build.py") + DATA
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _version() -> str:
    m = re.search(r'^__version__ = "([^"]+)"$', (PACKAGE / "__init__.py").read_text(encoding="utf-8"), re.M)
    if not m:
        raise RuntimeError("generator/carve/__init__.py: no __version__ = \"...\" line")
    return m.group(1)


def _files(top: Path):
    """Files under top (or top itself), sorted, without caches, compiled Python or hidden files."""
    if top.is_file():
        yield top
        return
    for p in sorted(top.rglob("*")):
        rel = p.relative_to(top).parts
        if p.is_file() and "__pycache__" not in rel and not any(x.startswith(".") for x in rel) \
                and p.suffix not in (".pyc", ".pyo"):
            yield p


def _metadata(project: dict, version: str) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {version}",
             f"Summary: {project.get('description', '')}"]
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    readme = project.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = "\n" + (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n" + body


def _dist_info(project: dict, version: str) -> tuple[str, dict]:
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    info = f"{name}-{version}.dist-info"
    files = {
        f"{info}/METADATA": _metadata(project, version).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: carve_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    scripts = project.get("scripts") or {}
    if scripts:
        files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{k} = {v}\n" for k, v in sorted(scripts.items()))).encode()
    return info, files


def _write_wheel(wheel_directory: str, entries: dict, info: str, version: str, project: dict) -> str:
    name = re.sub(r"[-_.]+", "_", project["name"]).lower()
    basename = f"{name}-{version}-py3-none-any.whl"
    record = []
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    entries = dict(entries)
    entries[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    os.makedirs(wheel_directory, exist_ok=True)
    target = Path(wheel_directory) / basename
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in entries.items():  # dist-info last, RECORD at the very end (as the spec recommends)
            zi = zipfile.ZipInfo(path, ZIP_DATE)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, target)
    return basename


# ---- PEP 517 hooks ------------------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project, version = _project(), _version()
    info, files = _dist_info(project, version)
    for path, data in files.items():
        p = Path(metadata_directory) / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project, version = _project(), _version()
    entries = {}
    for p in _files(PACKAGE):
        entries[f"carve/{p.relative_to(PACKAGE).as_posix()}"] = p.read_bytes()
    for name in DATA:
        for p in _files(ROOT / name):
            entries[f"carve/{name}/{p.relative_to(ROOT / name).as_posix()}"] = p.read_bytes()
    info, files = _dist_info(project, version)
    entries = dict(sorted(entries.items()))
    entries.update(files)
    return _write_wheel(wheel_directory, entries, info, version, project)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    project, version = _project(), _version()
    info, files = _dist_info(project, version)
    entries = {"carve_editable.pth": f"{ROOT / 'generator'}\n".encode()}
    entries.update(files)
    return _write_wheel(wheel_directory, entries, info, version, project)


def build_sdist(sdist_directory, config_settings=None):
    project, version = _project(), _version()
    base = f"{project['name']}-{version}"
    os.makedirs(sdist_directory, exist_ok=True)
    target = Path(sdist_directory) / f"{base}.tar.gz"

    def add(tar, arcname: str, data: bytes, mode: int = 0o644):
        ti = tarfile.TarInfo(f"{base}/{arcname}")
        ti.size, ti.mode, ti.mtime = len(data), mode, 0
        tar.addfile(ti, io.BytesIO(data))

    with tarfile.open(target, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "PKG-INFO", _metadata(project, version).encode())
        for rel in SDIST_TOP:
            p = ROOT / rel
            if p.is_file():
                add(tar, rel, p.read_bytes(), 0o755 if os.access(p, os.X_OK) else 0o644)
        for rel in SDIST_TREES:
            for p in _files(ROOT / rel):
                add(tar, p.relative_to(ROOT).as_posix(), p.read_bytes())
    return target.name
