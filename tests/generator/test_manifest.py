"""Manifest loading (carve.manifest): the shipped manifests load, and every malformed
manifest is refused with a CarveError naming the file, the line and the field.

Bad manifests are variations of manifests/yolo26n.yaml written to tmp_path (their
``architecture.config`` made absolute, or relative to the new folder); the expected line
is looked up in the text written, never typed in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.errors import CarveError  # noqa: E402
from carve.manifest import KNOWN_BACKENDS, SCALES, load_architecture, load_manifest  # noqa: E402

MANIFESTS = sorted((REPO / "manifests").glob("*.yaml"))
ARCH = REPO / "manifests" / "arch" / "yolo26.yaml"
BASE_TEXT = (REPO / "manifests" / "yolo26n.yaml").read_text()
BASE_CONFIG_LINE = "  config: arch/yolo26.yaml"
# The base manifest's backends line, whatever backends it lists ("backends: [xnnpack, cuda, portable]").
BACKENDS_LINE = next(ln for ln in BASE_TEXT.splitlines() if ln.startswith("backends: ["))


def _base() -> str:
    """yolo26n.yaml with architecture.config pointing at the real architecture file."""
    assert BASE_CONFIG_LINE in BASE_TEXT.splitlines(), "manifests/yolo26n.yaml changed: update this test"
    return BASE_TEXT.replace(BASE_CONFIG_LINE, f"  config: {ARCH}")


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"{old!r} is not a unique line of the base manifest"
    return text.replace(old, new)


def _line(text: str, needle: str, nth: int = 1) -> int:
    """1-based number of the nth line of ``text`` containing ``needle``."""
    hits = [i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln]
    assert len(hits) >= nth, f"{needle!r} not in the manifest text"
    return hits[nth - 1]


def _refused(tmp_path, text: str, name: str = "bad.yaml") -> tuple[CarveError, str]:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CarveError) as info:
        load_manifest(path)
    return info.value, str(path)


# ---------------------------------------------------------------------------
# The shipped manifests
# ---------------------------------------------------------------------------

def test_there_are_manifests():
    assert MANIFESTS, "no manifests/*.yaml"


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.stem for p in MANIFESTS])
def test_shipped_manifest_loads(path):
    m = load_manifest(path)
    raw = yaml.safe_load(path.read_text())
    assert m.name == raw["name"] == path.stem
    assert m.scale == raw["architecture"]["scale"] and m.scale in SCALES
    assert m.imgsz == raw["input"]["imgsz"] and m.imgsz % 32 == 0
    assert set(m.backends) <= set(KNOWN_BACKENDS) and m.backends
    assert Path(m.arch_config) == (path.parent / raw["architecture"]["config"]).resolve()
    arch = load_architecture(m)
    assert m.scale in arch["scales"]
    assert m.where("backends") == f"{path}:{_line(path.read_text(), 'backends:')}"


def test_the_base_variation_loads(tmp_path):
    """The base every bad manifest below starts from is itself valid (absolute config)."""
    path = tmp_path / "good.yaml"
    path.write_text(_base())
    m = load_manifest(path)
    assert m.arch_config == str(ARCH.resolve())


def test_relative_config_is_resolved_from_the_manifest_folder(tmp_path):
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    rel = os.path.relpath(ARCH, sub)
    path = sub / "rel.yaml"
    path.write_text(BASE_TEXT.replace(BASE_CONFIG_LINE, f"  config: {rel}"))
    assert load_manifest(path).arch_config == str(ARCH.resolve())


# ---------------------------------------------------------------------------
# Refusals: file, line, field
# ---------------------------------------------------------------------------

def test_unknown_key_near_miss_hints_the_known_key(tmp_path):
    text = _edit(_base(), BACKENDS_LINE, BACKENDS_LINE.replace("backends:", "backend:"))
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'backend:')}"
    assert err.message.startswith("backend: unknown key")
    assert "did you mean 'backends'?" in str(err)


def test_unknown_nested_key_near_miss(tmp_path):
    text = _edit(_base(), "  scale: n", "  scael: n")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'scael:')}"
    assert err.message.startswith("architecture.scael: unknown key")
    assert "did you mean 'scale'?" in str(err)


def test_unknown_key_far_from_any_lists_the_known_keys(tmp_path):
    text = _base() + "colour: blue\n"
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'colour:')}"
    assert "colour: unknown key" in err.message
    assert "did you mean" not in str(err) and "known keys:" in str(err) and "backends" in str(err)


def test_missing_required_top_level_field_is_named(tmp_path):
    text = _edit(_base(), "name: yolo26n\n", "")
    err, path = _refused(tmp_path, text)
    assert path in str(err)
    assert err.message == "name: required field is missing"


def test_missing_required_nested_field_points_at_its_mapping(tmp_path):
    text = _edit(_base(), "  scale: n\n", "")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'architecture:')}"
    assert err.message == "architecture.scale: required field is missing"


@pytest.mark.parametrize("old,new,field,needle", [
    ("  imgsz: 640", "  imgsz: '640'", "input.imgsz", "imgsz:"),
    ("  imgsz: 640", "  imgsz: 640.0", "input.imgsz", "imgsz:"),
    ("schema: 1", "schema: true", "schema", "schema:"),
    (BACKENDS_LINE, "backends: xnnpack", "backends", "backends:"),
    ("name: yolo26n", "name: [yolo26n]", "name", "name:"),
], ids=["imgsz-string", "imgsz-float", "schema-bool", "backends-scalar", "name-list"])
def test_wrong_type(tmp_path, old, new, field, needle):
    text = _edit(_base(), old, new)
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, needle)}"
    assert err.message.startswith(f"{field}: expected ")


def test_unknown_backend_is_named_with_a_hint(tmp_path):
    text = _edit(_base(), BACKENDS_LINE, "backends: [xnnpack, xnnpak]")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'backends:')}"
    assert "backends: unknown backend 'xnnpak'" in err.message
    assert all(b in err.message for b in KNOWN_BACKENDS)
    assert err.hint == "did you mean 'xnnpack'?"


@pytest.mark.parametrize("scale", ["q", "nano", "N"])
def test_bad_scale(tmp_path, scale):
    text = _edit(_base(), "  scale: n", f"  scale: {scale}")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'scale:')}"
    assert err.message.startswith(f"architecture.scale: '{scale}' is not one of")


@pytest.mark.parametrize("imgsz", [100, 0, -64, 80, 48])
def test_imgsz_not_a_positive_multiple_of_32(tmp_path, imgsz):
    text = _edit(_base(), "  imgsz: 640", f"  imgsz: {imgsz}")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'imgsz:')}"
    assert err.message.startswith(f"input.imgsz: {imgsz} must be a positive multiple of 32")


@pytest.mark.parametrize("imgsz", [32, 96, 320, 1280])
def test_imgsz_multiple_of_32_is_accepted(tmp_path, imgsz):
    path = tmp_path / "ok.yaml"
    path.write_text(_edit(_base(), "  imgsz: 640", f"  imgsz: {imgsz}"))
    assert load_manifest(path).imgsz == imgsz


def test_duplicate_top_level_key_points_at_the_second(tmp_path):
    text = _base() + "name: again\n"
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'name:', nth=2)}"
    assert err.message == "name: duplicate key"


def test_duplicate_nested_key(tmp_path):
    text = _edit(_base(), "  imgsz: 640", "  imgsz: 640\n  imgsz: 320")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'imgsz:', nth=2)}"
    assert err.message == "input.imgsz: duplicate key"


@pytest.mark.parametrize("old,new,needle", [
    ("task: detect", "task: detect: oops", "oops"),
    ("  scale: n", "\tscale: n", "\tscale"),
], ids=["colon-in-value", "tab-indent"])
def test_invalid_yaml_names_the_line(tmp_path, old, new, needle):
    text = _edit(_base(), old, new)
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, needle)}"
    assert err.message.startswith("not valid YAML")


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"], ids=["empty", "list", "scalar"])
def test_not_a_mapping(tmp_path, text):
    err, path = _refused(tmp_path, text)
    assert err.location == path and "mapping" in err.message


def test_missing_manifest_file(tmp_path):
    path = tmp_path / "nope" / "missing.yaml"
    with pytest.raises(CarveError) as info:
        load_manifest(path)
    assert info.value.location == str(path)
    assert "not found" in info.value.message


def test_missing_architecture_file(tmp_path):
    text = _edit(_base(), f"  config: {ARCH}", "  config: arch/nowhere.yaml")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'config:')}"
    assert "architecture.config" in err.message and "arch/nowhere.yaml" in err.message


def test_error_string_is_compiler_style(tmp_path):
    """str(err) reads ``<file>:<line>: <field>: <message> (hint: ...)`` on one line."""
    text = _edit(_base(), BACKENDS_LINE, "backends: [xnnpak]")
    err, path = _refused(tmp_path, text)
    s = str(err)
    assert "\n" not in s
    assert s == f"{path}:{_line(text, 'backends:')}: {err.message} (hint: {err.hint})"


@pytest.mark.parametrize("key", ["1", "null", "true"])
def test_non_string_key_is_refused_as_unknown(tmp_path, key):
    text = _base() + f"{key}: x\n"
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{len(text.splitlines())}"
    assert "unknown key" in err.message


@pytest.mark.parametrize("value,hw", [("[256, 384]", (256, 384)), ("[320, 320]", (320, 320))])
def test_imgsz_height_width(tmp_path, value, hw):
    path = tmp_path / "ok.yaml"
    path.write_text(_edit(_base(), "  imgsz: 640", f"  imgsz: {value}"))
    m = load_manifest(path)
    assert m.input_hw == hw
    assert m.imgsz == (hw if hw[0] != hw[1] else hw[0])  # a square [h, h] reads as h


@pytest.mark.parametrize("value,msg", [("[256, 100]", "input.imgsz: 100 must be a positive multiple of 32"),
                                       ("[256]", "input.imgsz: expected an integer or [height, width]"),
                                       ("[256, 384, 3]", "input.imgsz: expected an integer or [height, width]"),
                                       ("[256, '384']", "input.imgsz: expected an integer or [height, width]")])
def test_imgsz_height_width_refused(tmp_path, value, msg):
    text = _edit(_base(), "  imgsz: 640", f"  imgsz: {value}")
    err, path = _refused(tmp_path, text)
    assert err.location == f"{path}:{_line(text, 'imgsz:')}"
    assert err.message.startswith(msg)


def test_conf_defaults_to_ultralytics_and_is_read(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(_base())
    assert load_manifest(p).conf == 0.25
    p.write_text(_base() + "conf: 0.4\n")
    assert load_manifest(p).conf == 0.4


@pytest.mark.parametrize("value", ["1.0", "-0.1", "true", "'0.3'"])
def test_conf_out_of_range_or_not_a_number_is_refused(tmp_path, value):
    p = tmp_path / "m.yaml"
    text = _base() + f"conf: {value}\n"
    p.write_text(text)
    with pytest.raises(CarveError) as e:
        load_manifest(p)
    line = text.splitlines().index(f"conf: {value}") + 1
    assert f"{p}:{line}: conf" in str(e.value)
