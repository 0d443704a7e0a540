"""Fixtures shared by the generator tests."""

from __future__ import annotations

import os
import sys

# One BLAS thread unless asked otherwise: the tests run numpy's many small matrix products (the int8 pass's float
# executor, irsim) two at a time on a 2-core machine, where OpenBLAS's spinning threads make them about 10x slower.
# Set before numpy is first imported (below), which is when OpenBLAS reads it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.backends import get_backend  # noqa: E402
from carve.compiler import compile_model  # noqa: E402
from carve.planner import plan_memory  # noqa: E402

SHAPES_MANIFEST = str(REPO / "manifests" / "yolo26n-shapes.yaml")
SHAPES_WEIGHTS = str(REPO / "assets" / "yolo26n-shapes.pt")


@pytest.fixture(scope="session")
def shapes_built():
    """The shipped demo model at imgsz 64 (no torch needed): its graph, the programs the xnnpack, portable and
    cuda backends lower it to, and the files of its xnnpack and portable packages."""
    seen = {}

    def hook(g):
        seen["graph"] = g
        return g

    res = {be: compile_model(SHAPES_MANIFEST, be, SHAPES_WEIGHTS, 64, graph_hook=hook) for be in ("xnnpack", "portable")}
    graph = seen["graph"]
    plan = plan_memory(graph)
    programs = {be: get_backend(be).lower(graph, plan) for be in ("xnnpack", "portable", "cuda")}
    return graph, programs, {be: r.files for be, r in res.items()}


@pytest.fixture(scope="session")
def irsim_yolo26n_pt(tmp_path_factory):
    """A yolo26n checkpoint with irsim's random weights (seed 0), written once for the tests that generate from it."""
    import irsim  # tests/generator/irsim.py: needs torch (its callers importorskip it first)
    return irsim.save_checkpoint(irsim.build_yolo26("n", seed=0), tmp_path_factory.mktemp("w") / "yolo26n.pt")


@pytest.fixture(scope="session")
def seg_cls_checkpoints(tmp_path_factory):
    """Fresh (untrained) yolo26n segment and classify checkpoints, saved as Ultralytics saves them (needs torch):
    {"segment": path, "classify": path}."""
    torch = pytest.importorskip("torch")
    from ultralytics.nn.tasks import ClassificationModel, SegmentationModel

    out = {}
    for task, cls, cfg in (("segment", SegmentationModel, "yolo26n-seg.yaml"),
                           ("classify", ClassificationModel, "yolo26n-cls.yaml")):
        torch.manual_seed(0)
        model = cls(cfg, verbose=False).eval().half()
        out[task] = tmp_path_factory.mktemp(task) / f"{task}.pt"
        torch.save({"model": model, "ema": None, "train_args": {"task": task, "imgsz": 640}, "epoch": -1},
                   str(out[task]))
    return out
