"""The pipeline, as pure functions: manifest + weights -> {path: bytes}.

    load_manifest -> read_checkpoint -> build_graph -> optimize -> backend.check
                  -> plan_memory -> backend.emit

Refusals (a backend the manifest does not list, ops the backend cannot
lower) happen before anything is written; only the CLI touches the disk.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from . import faults
from .backends import get_backend
from .checkpoint import Checkpoint, read_checkpoint
from .errors import CarveError
from .frontend.yolo26 import build_graph, check_same_architecture
from .backends.emit_c import normalize_options
from .backends.f16 import lossy_tensors
from .manifest import HEADS, SCALES, Manifest, format_hw, input_hw, load_architecture, load_manifest, manifest_for
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


DEFAULT_IOU = 0.7  # Ultralytics' predict default (cfg `iou`), the IoU threshold of its NMS


def head_options(manifest: Manifest, options: dict | None) -> dict:
    """The head a package runs: {"head": "e2e" | "nms" | None (classify), "iou", "agnostic"}, from the options'
    ``head`` (else the manifest's), ``iou`` (default 0.7) and ``agnostic`` (default False). --iou and --agnostic
    set the suppression of --head nms and are refused with the e2e head, which has none."""
    o = options or {}
    head, iou, agnostic = o.get("head"), o.get("iou"), bool(o.get("agnostic"))
    if manifest.task == "classify":
        if head or iou is not None or agnostic:
            given = "--head" if head else "--iou" if iou is not None else "--agnostic"
            raise CarveError(f"{given}: {manifest.name} is a classify model, it has no box head",
                             location=manifest.path)
        return {"head": None, "iou": DEFAULT_IOU, "agnostic": False}
    head = head or manifest.head
    if head not in HEADS:
        raise CarveError(f"--head {head}: not one of {', '.join(HEADS)}")
    if head == "e2e" and (iou is not None or agnostic):
        given = "--iou" if iou is not None else "--agnostic"
        raise CarveError(f"{given}: sets the non-maximum suppression of --head nms; the e2e head has none",
                         hint="add --head nms (the one-to-many head + NMS, Ultralytics' default predict)")
    iou = DEFAULT_IOU if iou is None else iou
    if isinstance(iou, bool) or not isinstance(iou, (int, float)) or not 0.0 <= float(iou) <= 1.0:
        raise CarveError(f"--iou {iou}: must be a number in [0, 1] (Ultralytics' non_max_suppression asserts it)")
    return {"head": head, "iou": float(iou), "agnostic": agnostic}


def checkpoint_scale(ckpt: Checkpoint) -> str | None:
    """The YOLO26 scale (n, s, m, l, x) the checkpoint's embedded model yaml records: its ``scale``, else the
    scale letter of its ``yaml_file`` (``yolo26s-seg.yaml``); None when it records neither."""
    y = ckpt.yaml or {}
    scale = y.get("scale")
    if isinstance(scale, str) and scale in SCALES:
        return scale
    m = re.fullmatch(r"yolo26([nslmx])(-\w+)?\.yaml", str(y.get("yaml_file") or ""))
    return m.group(1) if m else None


def infer_manifest(ckpt: Checkpoint) -> str:
    """The shipped manifest for a checkpoint given without one: its task (model class or metadata) and
    scale (embedded model yaml) pick manifests/yolo26<scale><task suffix>.yaml, or the manifest whose class
    list is the checkpoint's (the demo model's)."""
    scale = checkpoint_scale(ckpt)
    family = str((ckpt.yaml or {}).get("yaml_file") or "")
    if family and not family.startswith("yolo26"):
        raise CarveError(f"the checkpoint's model is '{family}', not a YOLO26 variant", location=ckpt.path,
                         hint="carve compiles the yolo26 family")
    if not ckpt.task or not scale:
        missing = " and ".join(x for x, v in (("task", ckpt.task), ("scale", scale)) if not v)
        raise CarveError(f"cannot tell the model's {missing} from the checkpoint", location=ckpt.path,
                         hint="name the manifest: carve generate manifests/yolo26n.yaml --checkpoint MODEL.pt ...")
    path = manifest_for(ckpt.task, scale, ckpt.names)
    if path is None:
        raise CarveError(f"no shipped manifest for a '{ckpt.task}' model of scale '{scale}'", location=ckpt.path,
                         hint="write one (docs/manifest.md) and pass it before --checkpoint")
    return str(path)


def _mismatch_hint(ckpt: Checkpoint, manifest: Manifest) -> str:
    path = manifest_for(ckpt.task, checkpoint_scale(ckpt) or manifest.scale, ckpt.names, near=manifest.path)
    return f"use {path}" if path else "the checkpoint does not match this manifest"


def check_task(manifest: Manifest, ckpt: Checkpoint) -> None:
    """The checkpoint's task must be the manifest's; the hint names the manifest of the checkpoint's task."""
    if ckpt.task and ckpt.task != manifest.task:
        raise CarveError(f"checkpoint is a '{ckpt.task}' model but {manifest.path} is '{manifest.task}'",
                         location=ckpt.path, hint=_mismatch_hint(ckpt, manifest))


def check_checkpoint(manifest: Manifest, ckpt: Checkpoint) -> None:
    """What compile_model checks of a checkpoint against its manifest before building anything: the task, then
    the architecture and scale (mismatches name the manifest to use). For the CLI, which reports these before
    "output folder exists"."""
    check_task(manifest, ckpt)
    check_same_architecture(load_architecture(manifest), ckpt, manifest.scale, manifest)


def option_warnings(graph, ckpt: Checkpoint, options: dict) -> list:
    """What the CLI prints as warnings: an f16 package of tensors that are not float16 in the checkpoint
    (rounded, so not bit-identical to the f32 package: backends/f16.py)."""
    if options.get("weights_dtype") != "f16":
        return []
    lossy = lossy_tensors(graph)
    if not lossy:
        return []
    kinds = sorted({ckpt.dtypes.get(k, "float32") for k in lossy})
    return [f"--weights-dtype f16: {len(lossy)} tensor(s) of {ckpt.path} are not float16 ({', '.join(kinds)}; e.g. "
            f"{', '.join(lossy[:3])}): they are stored rounded to float16, after the BatchNorm fold, so this package "
            "does not compute the f32 package's bits (a checkpoint saved by Ultralytics holds float16 and is stored "
            "losslessly)"]


PRECISIONS = ("fp32", "int8", "fp16")


def precision_options(options: dict | None) -> tuple:
    """(precision, calibration folder or None) from the options' ``precision`` (default fp32) and ``calib``:
    int8 needs a calibration folder, fp32 takes none; int8 weights are stored as int8, so ``weights_dtype`` f16
    (float32 weights stored as halves) does not apply."""
    o = options or {}
    precision = o.get("precision") or "fp32"
    calib = o.get("calib")
    if precision not in PRECISIONS:
        raise CarveError(f"--precision {precision}: not one of {', '.join(PRECISIONS)}")
    if precision == "int8" and not calib:
        raise CarveError("--precision int8 needs --calib DIR: a folder of calibration images (at least "
                         "32, like the images the model will see)", hint="docs/quantization.md#calibration-images")
    if precision == "int8" and o.get("weights_dtype") == "f16":
        raise CarveError("--weights-dtype f16: an int8 package stores its weights as int8 (with int32 biases and "
                         "requantization multipliers); f16 is a storage of float32 weights",
                         hint="drop --weights-dtype f16: int8 weights are already a quarter of float32's size")
    if precision != "int8" and calib:
        raise CarveError(f"--calib: calibration images are for --precision int8 (the precision is {precision})",
                         hint="add --precision int8, or drop --calib")
    return precision, calib


def _check_imgsz(imgsz):
    if imgsz is None:
        return None
    hw = input_hw(imgsz)
    for v in hw:
        if v <= 0 or v % 32:
            raise CarveError(f"--imgsz {format_hw(hw)}: {v} is not a positive multiple of 32 (the largest stride)")
    return hw


def _optimized_graph(manifest: Manifest, weights, imgsz, head: dict, progress, graph_hook=None):
    """(checkpoint, the graph after passes.optimize and the hook)."""
    if isinstance(weights, Checkpoint):
        ckpt = weights
    else:
        progress(f"reading weights {weights}")
        faults.point("read")
        ckpt = read_checkpoint(weights)
    check_task(manifest, ckpt)
    progress(f"building the IR of {manifest.name}")
    faults.point("build")
    graph = build_graph(manifest, load_architecture(manifest), ckpt, imgsz, head)
    faults.point("optimize")
    graph = optimize(graph)
    if graph_hook is not None:
        graph = graph_hook(graph)
    return ckpt, graph


def float_graph(manifest_path: str, weights, imgsz=None, options: dict | None = None, progress=_noop, graph_hook=None):
    """The float graph compile_model lowers (after passes.optimize), without a backend: for tools and tests."""
    manifest = load_manifest(manifest_path)
    return _optimized_graph(manifest, weights, _check_imgsz(imgsz), head_options(manifest, options), progress,
                            graph_hook)[1]


def quantize(graph, calib, progress=_noop, cache_root=None, **kw):
    """The int8 pass on an optimized graph: the calibration images of folder ``calib`` (quant/images.py), then
    quant.pipeline.quantize_model (keyword arguments: estimator, threshold_db, sens_images). A QuantResult."""
    from .quant.images import load_images
    from .quant.pipeline import quantize_model
    progress(f"reading the calibration images of {calib}")
    faults.point("calib")
    imgs = load_images(calib, graph.meta["task"], tuple(graph.meta["input_hw"]), cache_root, progress)
    progress(f"quantizing to int8 from {len(imgs)} calibration images")
    return quantize_model(graph, imgs, progress, **kw)


def quantized_graph(manifest_path: str, weights, calib, imgsz=None, options: dict | None = None, progress=_noop,
                    graph_hook=None, **kw):
    """compile_model's int8 graph without a backend (tools, tests): a quant.pipeline.QuantResult with the quantized
    graph, its quant.json and its summary."""
    g = float_graph(manifest_path, weights, imgsz, options, progress, graph_hook)
    return quantize(g, calib, progress, **kw)


def compile_model(manifest_path: str, backend: str, weights, imgsz=None,
                  options: dict | None = None, progress=_noop, graph_hook=None) -> Result:
    """Run the whole pipeline in memory. ``imgsz``: None (the manifest's), one size (square) or
    (height, width). ``weights``: a checkpoint's path, or a Checkpoint already read. ``options``: weights_format
    (blob | c-array | file), weights_dtype (f32 | f16), head (e2e | nms; None: the manifest's), iou and agnostic
    (--head nms only: see head_options), precision (fp32 | int8) and calib (int8: the calibration folder).
    ``graph_hook`` (tests) may rewrite the optimised graph (before quantization)."""
    t0 = time.perf_counter()
    manifest = load_manifest(manifest_path)
    be = check_backend(manifest, backend)
    imgsz = _check_imgsz(imgsz)
    head = head_options(manifest, options)
    precision, calib = precision_options(options)
    if precision != "fp32":
        be.check_precision(precision)
    if precision == "fp16":  # fp16 packages store the checkpoint's halves (backends/cuda_f16.py)
        options = dict(options or {}, weights_dtype="f16")
    options = normalize_options(options, be)
    ckpt, graph = _optimized_graph(manifest, weights, imgsz, head, progress, graph_hook)
    quant = None
    if precision == "int8":
        quant = quantize(graph, calib, progress)
        graph = quant.graph
    faults.point("check")
    be.check(graph)
    progress("planning memory")
    faults.point("plan")
    plan = plan_memory(graph, be.regions(graph), be.reads(graph))
    progress(f"emitting the {be.name} package")
    faults.point("emit")
    files = be.emit(graph, plan, options)
    if quant is not None:
        files = dict(files, **{QUANT_JSON: quant.json})
    summary = dict(ops=len(graph.ops), arena_bytes=plan.arena_bytes,
                   weight_bytes=sum(int(w.nbytes) for w in graph.weights.values()),
                   imgsz=graph.meta["imgsz"], seconds=time.perf_counter() - t0, copies=len(plan.copies),
                   warnings=option_warnings(graph, ckpt, options), precision=precision,
                   quant=quant.summary if quant is not None else None)
    return Result(manifest=manifest, files=files, summary=summary)


QUANT_JSON = "quant.json"   # the quantization parameters, beside the package's code (docs/quantization.md#quantjson)
