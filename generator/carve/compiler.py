"""The pipeline, as pure functions: manifest + weights -> {path: bytes}.

    load_manifest -> read_checkpoint -> build_graph -> optimize -> backend.check
                  -> plan_memory -> backend.emit

Refusals (a backend the manifest does not list, ops the backend cannot
lower) happen before anything is written; only the CLI touches the disk.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import faults
from .backends import get_backend
from .checkpoint import read_checkpoint
from .errors import CarveError
from .frontend.yolo26 import build_graph
from .backends.emit_c import normalize_options
from .manifest import Manifest, format_hw, input_hw, load_architecture, load_manifest
from .passes import optimize
from .planner import plan_memory


@dataclass
class Result:
    manifest: Manifest
    files: dict                     # relative path -> bytes
    summary: dict = field(default_factory=dict)


def _noop(msg: str) -> None:
    pass


def check_backend(manifest: Manifest, backend: str):
    if backend not in manifest.backends:
        raise CarveError(f"backend '{backend}' is not supported by {manifest.name} "
                         f"(the manifest lists: {', '.join(manifest.backends)})",
                         location=manifest.where("backends"), hint="no files were written")
    return get_backend(backend)


def compile_model(manifest_path: str, backend: str, weights: str, imgsz=None,
                  options: dict | None = None, progress=_noop, graph_hook=None) -> Result:
    """Run the whole pipeline in memory. ``imgsz``: None (the manifest's), one size (square) or
    (height, width). ``options``: weights_format (blob | c-array | file), weights_dtype (f32 | f16).
    ``graph_hook`` (tests) may rewrite the optimised graph."""
    t0 = time.perf_counter()
    manifest = load_manifest(manifest_path)
    be = check_backend(manifest, backend)
    if imgsz is not None:
        hw = input_hw(imgsz)
        for v in hw:
            if v <= 0 or v % 32:
                raise CarveError(f"--imgsz {format_hw(hw)}: {v} is not a positive multiple of 32 (the largest stride)")
        imgsz = hw
    options = normalize_options(options, be)
    progress(f"reading weights {weights}")
    faults.point("read")
    ckpt = read_checkpoint(weights)
    if ckpt.task and ckpt.task != manifest.task:
        raise CarveError(f"checkpoint is a '{ckpt.task}' model but {manifest.path} is '{manifest.task}'",
                         location=ckpt.path)
    progress(f"building the IR of {manifest.name}")
    faults.point("build")
    graph = build_graph(manifest, load_architecture(manifest), ckpt, imgsz)
    faults.point("optimize")
    graph = optimize(graph)
    if graph_hook is not None:
        graph = graph_hook(graph)
    faults.point("check")
    be.check(graph)
    progress("planning memory")
    faults.point("plan")
    plan = plan_memory(graph)
    progress(f"emitting the {be.name} package")
    faults.point("emit")
    files = be.emit(graph, plan, options)
    summary = dict(ops=len(graph.ops), arena_bytes=plan.arena_bytes,
                   weight_floats=sum(w.size for w in graph.weights.values()),
                   imgsz=graph.meta["imgsz"], seconds=time.perf_counter() - t0, copies=len(plan.copies))
    return Result(manifest=manifest, files=files, summary=summary)
