"""--head nms: the one-to-many branch and non-maximum suppression (issue 18), on the generator's side.

The manifest's `head` key and the --head / --iou / --agnostic options (defaults, refusals with the option named),
the IR (an `nms_detect` op over the cv2 / cv3 convs), the package carrying only the chosen branch's weights and only
the runtime it calls (carve_nms for nms; the e2e package unchanged), the options compiled in, and a checkpoint whose
one-to-many branch was fused away refused by name. Runs on the shipped demo model (no torch). What the generated C
computes is tests/oracle/run_nms_oracle.py's (against Ultralytics' predict()) and tests/runtime's (test_nms.c,
nms_vs_ultralytics.py).
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SHAPES_MANIFEST, SHAPES_WEIGHTS

from carve.checkpoint import read_checkpoint
from carve.compiler import compile_model, head_options
from carve.errors import CarveError
from carve.manifest import load_manifest

IMGSZ = 64


def compile_shapes(options=None, manifest=SHAPES_MANIFEST, backend="xnnpack", weights=SHAPES_WEIGHTS):
    seen = {}

    def hook(g):
        seen["graph"] = g
        return g

    res = compile_model(manifest, backend, weights, IMGSZ, options, graph_hook=hook)
    return seen["graph"], res.files


@pytest.fixture(scope="module")
def both():
    """(graph, files) of the demo model with the e2e head (the default) and with --head nms."""
    return compile_shapes(), compile_shapes({"head": "nms"})


def manifest_with(tmp_path, text: str, source=SHAPES_MANIFEST) -> str:
    """A copy of a shipped manifest (beside a copy of arch/) with `text` appended."""
    d = tmp_path / "m"
    if not d.exists():
        shutil.copytree(REPO / "manifests", d)
    p = d / "edited.yaml"
    p.write_text(Path(source).read_text() + text)
    return str(p)


# ---- manifest and options ----------------------------------------------------------------------------------------


def test_manifest_head_key(tmp_path):
    assert load_manifest(SHAPES_MANIFEST).head == "e2e"
    assert load_manifest(manifest_with(tmp_path, "head: nms\n")).head == "nms"
    with pytest.raises(CarveError) as e:
        load_manifest(manifest_with(tmp_path, "head: nmx\n"))
    assert re.search(r"edited\.yaml:\d+: head: 'nmx' is not one of e2e, nms", str(e.value))
    with pytest.raises(CarveError) as e:
        load_manifest(manifest_with(tmp_path, "head: nms\n", REPO / "manifests" / "yolo26n-cls.yaml"))
    assert "classify model has no box head" in str(e.value)


@pytest.mark.parametrize("options, words", [
    ({"iou": 0.5}, "--iou: sets the non-maximum suppression of --head nms"),
    ({"agnostic": True}, "--agnostic: sets the non-maximum suppression of --head nms"),
    ({"head": "e2e", "iou": 0.5}, "--iou: sets the non-maximum suppression"),
    ({"head": "nms", "iou": 1.5}, "--iou 1.5: must be a number in [0, 1]"),
    ({"head": "nms", "iou": -0.1}, "--iou -0.1: must be a number in [0, 1]"),
    ({"head": "nms", "iou": math.nan}, "--iou nan: must be a number in [0, 1]"),
    ({"head": "yolo"}, "--head yolo: not one of e2e, nms"),
])
def test_head_option_refusals(options, words):
    with pytest.raises(CarveError) as e:
        head_options(load_manifest(SHAPES_MANIFEST), options)
    assert words in str(e.value)


def test_head_option_defaults():
    m = load_manifest(SHAPES_MANIFEST)
    assert head_options(m, {}) == {"head": "e2e", "iou": 0.7, "agnostic": False}
    assert head_options(m, {"head": "nms"}) == {"head": "nms", "iou": 0.7, "agnostic": False}
    assert head_options(m, {"head": "nms", "iou": 0, "agnostic": True}) == {"head": "nms", "iou": 0.0, "agnostic": True}
    cls = load_manifest(REPO / "manifests" / "yolo26n-cls.yaml")
    assert head_options(cls, {})["head"] is None
    with pytest.raises(CarveError, match="classify model, it has no box head"):
        head_options(cls, {"head": "nms"})


# ---- IR and package --------------------------------------------------------------------------------------------------


def test_nms_graph_reads_the_one_to_many_branch(both):
    (g_e2e, _), (g_nms, _) = both
    def heads(g):
        return [op for op in g.ops if op.kind in ("e2e_detect", "nms_detect")]

    def head_weights(g):
        return [w for w in g.weights if w.startswith("model.23.")]

    assert [op.kind for op in heads(g_e2e)] == ["e2e_detect"]
    (nms,) = heads(g_nms)
    assert nms.kind == "nms_detect" and nms.attrs["iou"] == 0.7 and nms.attrs["agnostic"] is False
    assert nms.attrs["k"] == 300 and nms.outputs == ("output0",)  # max_det; the rows: min(300, 84 anchors at 64)
    # only the chosen branch's weights are left after prune_weights: the package carries nothing else
    assert head_weights(g_e2e) and all(".one2one_" in w for w in head_weights(g_e2e))
    assert head_weights(g_nms) and not any("one2one" in w for w in head_weights(g_nms))
    assert {w.replace("one2one_", "") for w in head_weights(g_e2e)} == set(head_weights(g_nms))
    # the backbone and neck are the same
    assert {w for w in g_e2e.weights if not w.startswith("model.23.")} == \
           {w for w in g_nms.weights if not w.startswith("model.23.")}
    assert g_nms.meta["head"] == "nms" and g_e2e.meta["head"] == "e2e"


def test_nms_package(both):
    (_, f_e2e), (_, f_nms) = both
    assert "runtime/carve_nms.c" in f_nms and "runtime/carve_nms.h" in f_nms
    assert not any("carve_nms" in k for k in f_e2e)
    src, hdr = f_nms["yolo26n_shapes.c"].decode(), f_nms["yolo26n_shapes.h"].decode()
    assert "carve_nms_postprocess(levels, 3, 5, 0, CARVE_E2E_DETECT, &params" in src
    assert "{m->nms_conf, 0.7, 0, 84}" in src
    assert "--head nms --iou 0.7);" in src.splitlines()[0]
    assert re.search(r"#define YOLO26N_SHAPES_NMS_IOU 0\.7\b", hdr)
    assert re.search(r"#define YOLO26N_SHAPES_NMS_AGNOSTIC 0\b", hdr)
    assert "--head" not in f_e2e["yolo26n_shapes.c"].decode().splitlines()[0]  # e2e banners as before
    assert "NMS_IOU" not in f_e2e["yolo26n_shapes.h"].decode()


def test_nms_options_compiled_in():
    _, files = compile_shapes({"head": "nms", "iou": 0.45, "agnostic": True}, backend="portable")
    src, hdr = files["yolo26n_shapes.c"].decode(), files["yolo26n_shapes.h"].decode()
    assert "{m->nms_conf, 0.45, 1, 84}" in src
    assert "--head nms --iou 0.45 --agnostic);" in src.splitlines()[0]
    assert re.search(r"#define YOLO26N_SHAPES_NMS_AGNOSTIC 1\b", hdr)


def test_manifest_default_head(tmp_path):
    m = manifest_with(tmp_path, "head: nms\n")
    g, _ = compile_shapes(manifest=m)
    assert any(op.kind == "nms_detect" for op in g.ops)
    g, _ = compile_shapes({"head": "e2e"}, manifest=m)
    assert any(op.kind == "e2e_detect" for op in g.ops)


def test_checkpoint_without_the_one_to_many_branch():
    ckpt = read_checkpoint(SHAPES_WEIGHTS)
    fused = dataclasses.replace(ckpt, tensors={k: v for k, v in ckpt.tensors.items()
                                               if not re.match(r"model\.23\.cv[234]", k)})
    with pytest.raises(CarveError) as e:
        compile_shapes({"head": "nms"}, weights=fused)
    assert "no one-to-many branch (cv2, cv3), which --head nms runs" in str(e.value)
    assert "--head e2e" in str(e.value)
    compile_shapes(weights=fused)  # the e2e head does not need it


def test_cuda_nms_package():
    """The device NMS: its runtime family, the run's conf and the row count in the scratch's reserved tail, the
    rows counted on the host from what the device wrote."""
    _, files = compile_shapes({"head": "nms"}, backend="cuda")
    assert {"runtime/carve_cuda_nms.cu", "runtime/carve_cuda_nms.h", "runtime/carve_cuda_topk.cu"} <= set(files)
    src = files["yolo26n_shapes.cu"].decode()
    assert "carve_cu_nms_postprocess(&m->cu, levels, 3, 5, 0, CARVE_E2E_DETECT, m->nms_param," in src
    assert "0.7, 0, 84, m->scratch, A(m, OUTPUT0_OFF), (uint32_t*)(m->nms_param + 1)));" in src
    assert "TRY(upload_conf(m, conf));" in src and "*rows = m->num_rows[0];" in src
    assert "+ NMS_PARAM_BYTES;" in src and "uint32_t num_rows[BATCH];" in src
    _, e2e = compile_shapes(backend="cuda")
    assert not any("nms" in k for k in e2e) and "nms_param" not in e2e["yolo26n_shapes.cu"].decode()


# ---- command line ------------------------------------------------------------------------------------------------------


def carve(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "carve", *map(str, args)], cwd=cwd, text=True, capture_output=True,
                          env={"PYTHONPATH": str(REPO / "generator"), "PATH": "/usr/bin:/bin"})


def test_cli_list_shows_both_heads():
    p = carve("list")
    assert p.returncode == 0, p.stderr
    rows = {line.split()[0]: line.split() for line in p.stdout.splitlines() if line.startswith("yolo26")}
    assert rows["yolo26n"][3] == "e2e,nms" and rows["yolo26n-seg"][3] == "e2e,nms"
    assert rows["yolo26n-cls"][3] == "-"
    assert "nms = one-to-many head + NMS" in p.stdout


def test_cli_refusals_name_the_option(tmp_path):
    p = carve("generate", SHAPES_MANIFEST, "--backend", "xnnpack", "--checkpoint", SHAPES_WEIGHTS, "--iou", "0.5",
              "--out", tmp_path / "pkg")
    assert p.returncode == 1 and "--iou: sets the non-maximum suppression of --head nms" in p.stderr
    assert not (tmp_path / "pkg").exists()
    p = carve("generate", SHAPES_MANIFEST, "--backend", "xnnpack", "--checkpoint", SHAPES_WEIGHTS, "--head", "nms",
              "--iou", "2", "--out", tmp_path / "pkg")
    assert p.returncode == 1 and "--iou 2.0: must be a number in [0, 1]" in p.stderr
    p = carve("generate", SHAPES_MANIFEST, "--backend", "xnnpack", "--checkpoint", SHAPES_WEIGHTS, "--head", "nmx")
    assert p.returncode == 2 and "invalid choice: 'nmx'" in p.stderr


def test_cli_generates_nms(tmp_path):
    p = carve("generate", SHAPES_MANIFEST, "--backend", "portable", "--checkpoint", SHAPES_WEIGHTS, "--head", "nms",
              "--agnostic", "--imgsz", 64, 96, "--out", tmp_path / "pkg")
    assert p.returncode == 0, p.stderr
    src = (tmp_path / "pkg" / "yolo26n_shapes.c").read_text()
    assert "--imgsz 64 96 --weights-format blob --weights-dtype f32 --head nms --iou 0.7 --agnostic" in src
