"""Hostile manifests (beyond the schema checks of test_manifest.py): YAML tags, anchors and
aliases (a "billion laughs" document), nesting deeper than the parser's recursion, unhashable
keys, bytes that are not UTF-8, NUL bytes and path tricks in architecture.config. Each is refused
with a CarveError naming the file (and the line where there is one), quickly, and nothing else
escapes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.errors import CarveError  # noqa: E402
from carve.manifest import load_manifest  # noqa: E402

BASE = (REPO / "manifests" / "yolo26n.yaml").read_text().replace(
    "config: arch/yolo26.yaml", f"config: {REPO / 'manifests' / 'arch' / 'yolo26.yaml'}")


def _refused(tmp_path, data, name="bad.yaml") -> CarveError:
    p = tmp_path / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(CarveError) as ei:
        load_manifest(p)
    assert str(p) in str(ei.value)
    return ei.value


def _line(text: str, needle: str) -> int:
    return next(i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln)


def test_base_loads(tmp_path):
    (tmp_path / "ok.yaml").write_text(BASE)
    assert load_manifest(tmp_path / "ok.yaml").name == "yolo26n"


@pytest.mark.parametrize("tag", ["!foo", "!!python/object/apply:os.system", "!!binary"])
def test_tags_are_refused_with_the_line(tmp_path, tag):
    text = BASE.replace("task: detect", f"task: {tag} detect")
    err = _refused(tmp_path, text)
    assert err.location.endswith(f":{_line(text, 'task:')}") or "task" in err.message


def test_billion_laughs_is_refused_quickly(tmp_path):
    laughs = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        laughs.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    text = "provenance:\n" + "\n".join("  " + ln for ln in laughs) + "\n" + BASE.replace("provenance:", "x_provenance:")
    t = time.perf_counter()
    err = _refused(tmp_path, text)
    assert "anchors and aliases" in err.message
    assert err.location.endswith(f":{_line(text, 'a1:')}")
    assert time.perf_counter() - t < 30  # would be 9**10 node visits without the refusal


def test_alias_of_a_mapping_is_refused(tmp_path):
    text = BASE.replace("input:\n  imgsz: 640", "input: &i\n  imgsz: 640\nx: *i")
    err = _refused(tmp_path, text)
    assert "anchors and aliases" in err.message or "unknown key" in err.message


def test_deep_nesting(tmp_path):
    text = BASE + "provenance2: " + "[" * 5000 + "]" * 5000 + "\n"
    err = _refused(tmp_path, text)
    assert "nested too deeply" in err.message or "unknown key" in err.message


def test_unhashable_key(tmp_path):
    text = BASE + "? [a, b]\n: c\n"
    err = _refused(tmp_path, text)
    assert err.location.startswith(str(tmp_path))


def test_not_utf8(tmp_path):
    err = _refused(tmp_path, BASE.encode() + b"\nname2: \xff\xfe\n")
    assert "cannot read manifest" in err.message


@pytest.mark.parametrize("config", ["arch/\0yolo26.yaml", "../../../../etc/passwd", "/dev/zero", "."])
def test_config_path_tricks(tmp_path, config):
    text = BASE.replace(f"config: {REPO / 'manifests' / 'arch' / 'yolo26.yaml'}", f"config: \"{config}\"")
    try:
        m = load_manifest_text(tmp_path, text)
    except CarveError as e:
        assert "architecture.config" in e.message or "not valid YAML" in e.message
        return
    from carve.manifest import load_architecture
    with pytest.raises(CarveError):
        load_architecture(m)


def load_manifest_text(tmp_path, text):
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return load_manifest(p)
