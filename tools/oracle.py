#!/usr/bin/env python3
"""Oracle side of carve's tests: reference data from Ultralytics/PyTorch, and comparisons against it.

Every vector the tests compare against comes from here; no test types in numbers.

Library (import this file) and CLI (``python3 tools/oracle.py <subcommand> -h``):

  make_checkpoint(cfg, out, seed=0, half=True)      a released-style .pt with realistic BN statistics, any task
  make_input(image, imgsz, out, task)               the predictor's network input, (1,3,H,W) f32 in [0,1]
  reference_layers(weights, input_npy, out_dir)     every layer's output of the fused fp32 model
  reference_predict(weights, image, imgsz, conf, out_json)
                                                    Ultralytics' own predictor, NMS-free (one2one) head
  compare_layers(ours, ref, tol) -> bool            per-layer relative error; head rows by matching
  compare_detections(ours_json, ref_json, box_px, score_tol) -> bool
                                                    predictions of any task: boxes, masks, keypoints, angles, top-5
  calibrated_tolerances(ref32, ref64, ref_json)     compare_detections tolerances widened to 4x PyTorch's fp32 error
  rle_encode(mask) / rle_decode(rle)                COCO uncompressed RLE (column-major), as the demo writes masks
  sample_image(name) -> Path                        an image bundled with ultralytics ('bus.jpg', 'zidane.jpg')

Tasks (cfg yolo26{n,s,m,l,x}{,-seg,-pose,-obb,-cls}.yaml): detect, segment, pose, obb, classify. The head
layer's reference is y: (1,300,6) detect, (1,300,38) segment (+ output1.npy, the (1,32,H/4,W/4) prototypes),
(1,300,57) pose, (1,300,7) obb ([cx,cy,w,h,score,class,angle]), or classify's (1,nc) probabilities.

torch and ultralytics are imported lazily, so the compare-* commands start fast and need only numpy.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

import numpy as np

# Nothing may be fetched: no update checks, no fonts, no telemetry, no auto-install of requirements.
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_VERBOSE", "False")
os.environ.setdefault("YOLO_AUTOINSTALL", "False")

# A fixed date keeps checkpoint bytes reproducible (strip_optimizer writes datetime.now()).
CHECKPOINT_DATE = "2026-01-14T00:00:00+00:00"
MAX_DET = 300

_CFG_RE = re.compile(r"^yolo26([nslmx])(?:-(seg|pose|obb|cls))?\.yaml$")
# task -> (model class name, dataset yaml for nc/names, train imgsz, calibration imgsz)
_TASKS = {
    "detect": ("DetectionModel", "coco.yaml", 640, 320),
    "segment": ("SegmentationModel", "coco.yaml", 640, 320),
    "pose": ("PoseModel", "coco-pose.yaml", 640, 320),
    "obb": ("OBBModel", "DOTAv1.yaml", 1024, 320),
    "classify": ("ClassificationModel", "ImageNet.yaml", 224, 224),
}
_SUFFIX_TASK = {None: "detect", "seg": "segment", "pose": "pose", "obb": "obb", "cls": "classify"}


class OracleError(Exception):
    """A user-facing failure: printed as 'oracle: <message>' by the CLI, without a traceback."""


# ---------------------------------------------------------------------------------------------------------------------
# torch / ultralytics setup
# ---------------------------------------------------------------------------------------------------------------------


def _torch():
    """Import torch once, with a thread count suited to the small CI machines: CARVE_ORACLE_THREADS, else
    OMP_NUM_THREADS (which torch reads itself; the test suite sets 1, tests/test_env.cmake), else at most 2.
    Checkpoints (float64 statistics) are the same bits on any count."""
    import torch

    if not getattr(_torch, "done", False):
        threads = int(os.environ.get("CARVE_ORACLE_THREADS", "0"))
        if threads or not os.environ.get("OMP_NUM_THREADS"):
            torch.set_num_threads(threads or min(os.cpu_count() or 1, 2))
        _torch.done = True
    return torch


def sample_image(name: str) -> Path:
    """Path of an image bundled in the ultralytics package, e.g. 'bus.jpg' (810x1080) or 'zidane.jpg' (1280x720)."""
    from ultralytics.utils import ASSETS

    p = Path(ASSETS) / name
    if not p.is_file():
        raise OracleError(f"{name}: not among the ultralytics assets in {ASSETS}")
    return p


def _read_bgr(image) -> np.ndarray:
    """Read an image exactly as the predictor's loader does (ultralytics.utils.patches.imread, BGR uint8 HWC)."""
    from ultralytics.utils.patches import imread

    im = imread(str(image))
    if im is None:
        raise OracleError(f"{image}: cannot read image")
    return im


def _imgsz_hw(imgsz) -> tuple[int, int]:
    if isinstance(imgsz, str):
        parts = [int(p) for p in re.split(r"[,x]", imgsz)]
        imgsz = parts[0] if len(parts) == 1 else tuple(parts)
    h, w = (imgsz, imgsz) if isinstance(imgsz, int) else tuple(imgsz)
    if h % 32 or w % 32:
        raise OracleError(f"imgsz {h}x{w}: must be a multiple of the model stride 32")
    return h, w


def _letterbox(im_bgr: np.ndarray, imgsz) -> np.ndarray:
    """Ultralytics' LetterBox with auto=False: a full fixed (H, W) canvas, padding 114, centred."""
    from ultralytics.data.augment import LetterBox

    return LetterBox(_imgsz_hw(imgsz), auto=False, stride=32)(image=im_bgr)


def _to_input(images_bgr: list[np.ndarray]):
    """The predictor's tensor conversion: NHWC uint8 -> NCHW, BGR -> RGB, float32 / 255."""
    torch = _torch()
    im = torch.from_numpy(np.stack(images_bgr))
    im = im.permute(0, 3, 1, 2).contiguous().flip(1)
    return im.float().div_(255)


# ---------------------------------------------------------------------------------------------------------------------
# make-checkpoint
# ---------------------------------------------------------------------------------------------------------------------


def cfg_task(cfg: str) -> str:
    """Task of a YOLO26 config name: yolo26{n,s,m,l,x}{,-seg,-pose,-obb,-cls}.yaml."""
    m = _CFG_RE.match(Path(cfg).name)
    if not m:
        raise OracleError(f"{cfg}: expected a config named yolo26{{n,s,m,l,x}}{{,-seg,-pose,-obb,-cls}}.yaml")
    return _SUFFIX_TASK[m.group(2)]


def _build_model(cfg: str, task: str):
    from ultralytics.nn import tasks as T
    from ultralytics.utils import ROOT, YAML

    cls_name, data_yaml, _, _ = _TASKS[task]
    data = YAML.load(ROOT / "cfg" / "datasets" / data_yaml)
    names = {int(k): v for k, v in data["names"].items()}
    kwargs = {"nc": len(names), "verbose": False}
    if task == "pose":
        kwargs["data_kpt_shape"] = tuple(data["kpt_shape"])
    model = getattr(T, cls_name)(Path(cfg).name, **kwargs)
    model.names = names  # as the trainer's set_model_attributes does
    model.nc = len(names)
    if task == "pose":
        model.kpt_shape = data["kpt_shape"]
        model.kpt_names = data.get("kpt_names")
    return model


def _calibration_batches(imgsz: int, seed: int, passes: int):
    """Yield `passes` batches of 4 letterboxed images: bus and zidane, plus a random crop+flip of each."""
    rng = np.random.default_rng(seed)
    base = [_read_bgr(sample_image(n)) for n in ("bus.jpg", "zidane.jpg")]
    for p in range(passes):
        batch = []
        for im in base:
            if p == 0:
                batch.append(_letterbox(im, imgsz))
            h, w = im.shape[:2]
            ch, cw = int(h * rng.uniform(0.5, 0.9)), int(w * rng.uniform(0.5, 0.9))
            y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            crop = im[y0 : y0 + ch, x0 : x0 + cw]
            if rng.random() < 0.5:
                crop = crop[:, ::-1]
            batch.append(_letterbox(np.ascontiguousarray(crop), imgsz))
        while len(batch) < 4:  # passes after the first: two more crops instead of the plain images
            im = base[len(batch) % 2]
            h, w = im.shape[:2]
            s = rng.uniform(0.6, 1.0)
            ch, cw = int(h * s), int(w * s)
            y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            batch.append(_letterbox(np.ascontiguousarray(im[y0 : y0 + ch, x0 : x0 + cw][:, ::-1]), imgsz))
        yield _to_input(batch)


def _head_final_convs(head, one2one: bool = True):
    """(name, branch, conv) of the last 1x1 conv of each one2one branch (box, class, and task-specific ones), or
    with one2one=False of each one-to-many branch (cv2, cv3, cv4 / cv4_kpts; not the training-only cv4_sigma)."""
    torch = _torch()
    out = []
    for name, mod in head.named_children():
        if name.startswith("one2one_") != one2one or not isinstance(mod, torch.nn.ModuleList):
            continue
        if name.endswith("cv4_sigma"):
            continue
        for lvl, branch in enumerate(mod):
            conv = branch[-1] if isinstance(branch, torch.nn.Sequential) else branch
            if isinstance(conv, torch.nn.Conv2d) and conv.bias is not None:
                out.append((f"{name}.{lvl}", name, conv))
    return out


ATTN_QK_GAIN = 0.3


def _temper_attention(model) -> None:
    """Scale the q and k channels of every Attention's qkv BN by ATTN_QK_GAIN (gamma and beta).

    With random weights and unit-variance BN outputs the attention logits q.k/sqrt(32) reach +-100: a softmax
    so peaked that float32 round-off alone (PyTorch's own fp32 against fp64) exceeds 1e-4 at the P5 layer.
    Trained YOLO26 attention keeps its logits small; a gain of 0.3 brings them to about +-10.
    """
    from ultralytics.nn.modules.block import Attention

    for m in model.modules():
        if isinstance(m, Attention):
            per_head = 2 * m.key_dim + m.head_dim
            for h in range(m.num_heads):
                qk = slice(h * per_head, h * per_head + 2 * m.key_dim)
                m.qkv.bn.weight[qk] *= ATTN_QK_GAIN
                m.qkv.bn.bias[qk] *= ATTN_QK_GAIN


def _randomise_and_calibrate(model, task: str, seed: int, calib_imgsz: int, passes: int = 2):
    """Realistic BN statistics and head biases, deterministic for a seed.

    1. gamma ~ U(0.5, 1.5), beta ~ N(0, 0.2) from a seeded generator, in module order.
    2. running_mean/var = cumulative average (momentum=None) of batch statistics over `passes` train-mode
       forwards of real images, no grads; then attention q/k tempered (_temper_attention).
    3. One2one head: every final 1x1 conv bias gets N(0, 0.1) noise; the class biases get a per-class N(0, 0.5)
       spread plus a common shift that puts at least 20 (anchor, class) scores of each of bus.jpg and zidane.jpg
       at 640 above 0.25 (the threshold sits halfway between the 20th and 21st logit of one of them), so predict
       at conf=0.25 keeps detections instead of none (the initial class bias is about -11). For yolo26n seed 0:
       bus.jpg fills all 300 rows (top-k cut exercised), zidane.jpg keeps 20 (conf cut exercised).
       Classify instead: the Linear is scaled to a trained-like logit spread (_spread_class_logits).
    """
    torch = _torch()
    g = torch.Generator().manual_seed(seed + 1)  # float32 draws, whatever the model's dtype
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    momenta = [bn.momentum for bn in bns]  # 0.03 from initialize_weights (det-type), 0.1 for cls
    with torch.no_grad():
        for bn in bns:
            bn.weight.copy_(torch.rand(bn.weight.shape, generator=g) + 0.5)
            bn.bias.copy_(torch.randn(bn.bias.shape, generator=g) * 0.2)
            bn.reset_running_stats()
            bn.momentum = None  # cumulative moving average
        model.double().train()  # float64: the fp16-rounded statistics do not depend on the thread count
        for batch in _calibration_batches(calib_imgsz, seed, passes):
            model(batch.double())
        for bn, mom in zip(bns, momenta):
            bn.momentum = mom  # restored so the pickle looks trained
        _temper_attention(model)
        model.eval()

        head = model.model[-1]
        if task == "classify":
            _spread_class_logits(model, head, g)
            model.float()
            return
        finals = _head_final_convs(head)
        for _, _, conv in finals:
            conv.bias.add_(torch.randn(conv.bias.shape, generator=g) * 0.1)
        cls_convs = [conv for _, branch, conv in finals if branch == "one2one_cv3"]
        spread = torch.randn(cls_convs[0].bias.shape, generator=g) * 0.5
        logits = []
        hooks = [c.register_forward_hook(lambda m, i, o: logits.append(o)) for c in cls_convs]
        try:
            model(_to_input([_letterbox(_read_bgr(sample_image(n)), 640) for n in ("bus.jpg", "zidane.jpg")]).double())
        finally:
            for h in hooks:
                h.remove()
        nc = spread.numel()
        allv = torch.cat([lg.flatten(2) + spread[:, None] for lg in logits], 2).flatten(1)  # (2, nc*A)
        top = allv.topk(21, dim=1).values
        shift = max(math.log(0.25 / 0.75) - float(t[19] + t[20]) / 2 for t in top)
        for conv in cls_convs:
            conv.bias.add_(spread + shift)
        _calibrate_one2many(model, head, seed)
    model.float()


ONE2MANY_CANDIDATES = 25


def _calibrate_one2many(model, head, seed: int) -> None:
    """The one-to-many branch (what predict() runs by default, with NMS) gets what _randomise_and_calibrate gives
    the one2one branch, from its own generator (seed + 2, so the one2one weights stay those of earlier versions):
    N(0, 0.1) noise on every final 1x1 conv bias (box biases also + 3), a per-class N(0, 0.5) spread of the class biases and a common
    shift that puts at least ONE2MANY_CANDIDATES anchors (best class) of each of bus.jpg and zidane.jpg at 640 above
    0.25 (the threshold halfway between that anchor's logit and the next, on the image that needs the larger shift):
    candidates that overlap, so that the NMS keeps some and removes others. (bias_init leaves the class biases at
    about -11: no detection at all.) yolo26n seed 0 with predict()'s defaults keeps 11 to 300 of 18 to 434
    candidates per task and image (bus.jpg, zidane.jpg)."""
    torch = _torch()
    g = torch.Generator().manual_seed(seed + 2)
    finals = _head_final_convs(head, one2one=False)
    if not finals:
        return
    for _, branch, conv in finals:
        conv.bias.add_(torch.randn(conv.bias.shape, generator=g, dtype=torch.float32).to(conv.bias.dtype) * 0.1)
        if branch == "cv2":
            conv.bias.add_(3.0)  # ltrb about 5 grid cells (bias_init's 2, + 3): neighbouring candidates overlap
    cls_convs = [conv for _, branch, conv in finals if branch == "cv3"]
    spread = torch.randn(cls_convs[0].bias.shape, generator=g, dtype=torch.float32).to(cls_convs[0].bias.dtype) * 0.5
    logits = []
    hooks = [c.register_forward_hook(lambda m, i, o: logits.append(o)) for c in cls_convs]
    try:
        model(_to_input([_letterbox(_read_bgr(sample_image(n)), 640) for n in ("bus.jpg", "zidane.jpg")]).double())
    finally:
        for h in hooks:
            h.remove()
    best = torch.cat([(lg + spread[None, :, None, None]).amax(1).flatten(1) for lg in logits], 1)  # (2, A)
    k = ONE2MANY_CANDIDATES
    top = best.topk(k + 1, dim=1).values
    shift = max(math.log(0.25 / 0.75) - float(t[k - 1] + t[k]) / 2 for t in top)
    for conv in cls_convs:
        conv.bias.add_(spread + shift)


CLS_LOGIT_STD = 3.0


def _spread_class_logits(model, head, g) -> None:
    """Classify: scale the Linear so the logits of bus.jpg and zidane.jpg spread with std CLS_LOGIT_STD.

    Randomly initialised, the logits spread by about 0.1: a flat softmax (every probability about 1/nc), top-5
    gaps of 1e-6 and nothing a probability tolerance could catch. A trained classifier is peaked; with a spread
    of 3 over 1000 classes the top class gets about 0.1-0.3. The bias gets a seeded N(0, 0.5) class prior.
    """
    torch = _torch()
    feats = []
    hook = head.linear.register_forward_hook(lambda m, i, o: feats.append(i[0]))
    try:
        imgs = [_classify_crop(_read_bgr(sample_image(n)), _TASKS["classify"][2]) for n in ("bus.jpg", "zidane.jpg")]
        model(_to_input(imgs).double())
    finally:
        hook.remove()
    w = head.linear.weight
    std = float((feats[0] @ w.T).std(dim=1).mean())
    w.mul_(CLS_LOGIT_STD / std)
    head.linear.bias.copy_(torch.randn(head.linear.bias.shape, generator=g) * 0.5)


def _train_args(cfg: str, task: str, seed: int) -> dict:
    from ultralytics.utils import DEFAULT_CFG_DICT, DEFAULT_CFG_KEYS

    _, data_yaml, imgsz, _ = _TASKS[task]
    args = {
        **DEFAULT_CFG_DICT,
        "task": task,
        "mode": "train",
        "model": Path(cfg).name,
        "data": data_yaml,
        "imgsz": imgsz,
        "seed": seed,
        "name": "carve-oracle",
    }
    return {k: v for k, v in args.items() if k in DEFAULT_CFG_KEYS}


# What make_checkpoint's random checkpoints hold; bumped when that changes, so that a build folder's cached
# checkpoints (checkpoint_dir) are made again rather than reused stale. 2: the one-to-many head is calibrated too
# (--head nms), so that it keeps tens of boxes rather than none.
CHECKPOINT_RECIPE = 2


def checkpoint_dir(work) -> Path:
    """Where the tests cache make_checkpoint's checkpoints under their work folder."""
    return Path(work) / f"checkpoints-r{CHECKPOINT_RECIPE}"


def make_checkpoint(cfg: str, out, seed: int = 0, half: bool = True, passes: int = 2) -> Path:
    """Build `cfg` with Ultralytics, give it realistic BN statistics and head biases, save like strip_optimizer.

    The file has the keys and layout of a released checkpoint (`strip_optimizer` output): the model pickled as an
    nn.Module in fp16 with requires_grad False, ema/optimizer/... None, train_args filtered to the default-cfg keys.
    Deterministic for a given seed (and thread count), date fixed to CHECKPOINT_DATE.
    """
    torch = _torch()
    from copy import deepcopy

    from ultralytics import __version__

    task = cfg_task(cfg)
    _, _, _, calib_imgsz = _TASKS[task]
    torch.manual_seed(seed)  # module initialisers draw from the global generator
    model = _build_model(cfg, task)
    _randomise_and_calibrate(model, task, seed, calib_imgsz, passes)
    train_args = _train_args(cfg, task, seed)
    model.args = dict(train_args)  # strip_optimizer: IterableSimpleNamespace -> dict
    model.criterion = None
    if task == "classify":
        from ultralytics.data.augment import classify_transforms

        model.transforms = classify_transforms(train_args["imgsz"])  # what the trainer attaches for inference

    m = deepcopy(model).to(memory_format=torch.contiguous_format)
    m = m.half() if half else m.float()
    for p in m.parameters():
        p.requires_grad = False
    ckpt = {
        "date": CHECKPOINT_DATE,
        "version": __version__,
        "license": "AGPL-3.0 License (https://ultralytics.com/license)",
        "docs": "https://docs.ultralytics.com",
        "epoch": -1,
        "best_fitness": None,
        "model": m,
        "ema": None,
        "updates": None,
        "optimizer": None,
        "scaler": None,
        "train_args": train_args,
        "train_metrics": {},
        "train_results": {},
        "git": {},
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, out)
    return out


# ---------------------------------------------------------------------------------------------------------------------
# make-input, reference-layers, reference-predict
# ---------------------------------------------------------------------------------------------------------------------


def _classify_crop(im_bgr: np.ndarray, imgsz) -> np.ndarray:
    """ClassificationPredictor.pre_transform: torchvision Resize (shortest side to imgsz, PIL bilinear with
    antialias, long side int(imgsz * long / short)) then CenterCrop(imgsz), on the BGR uint8 array."""
    from PIL import Image

    from ultralytics.data.augment import classify_transforms

    h, w = _imgsz_hw(imgsz)
    tfl = classify_transforms(h if h == w else (h, w)).transforms[:2]  # Resize, CenterCrop
    out = Image.fromarray(im_bgr)
    for t in tfl:
        out = t(out)
    return np.ascontiguousarray(np.asarray(out))


def make_input(image, imgsz, out=None, task: str = "detect") -> np.ndarray:
    """The network input the predictor feeds for `image`: (1,3,H,W) float32 NCHW RGB in [0,1].

    detect/segment/pose/obb: the steps of BasePredictor.preprocess with LetterBox(auto=False): full fixed canvas,
    pad 114, centred. classify: ClassificationPredictor's (_classify_crop, then BGR->RGB and /255; its Normalize
    has mean 0 and std 1).
    """
    if task not in _TASKS:
        raise OracleError(f"task '{task}': expected one of {', '.join(_TASKS)}")
    im = _read_bgr(image)
    x = _to_input([_classify_crop(im, imgsz) if task == "classify" else _letterbox(im, imgsz)]).numpy()
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        np.save(out, x)
    return x


def load_fused(weights, dtype: str = "float32"):
    """The model the predictor runs on CPU in fp32: load_checkpoint, one2one head selected, fused, eval.

    dtype='float64' gives the same model in double precision: the exact answer that fp32 implementations
    (PyTorch's and carve's) approximate; dtype='float16' the model in half precision (model.half(), after the fuse):
    how far a correct fp16 implementation drifts from fp32 (the bound of carve's cuda fp16 packages)."""
    torch = _torch()
    from ultralytics.nn.tasks import load_checkpoint

    model, _ = load_checkpoint(str(weights), device=torch.device("cpu"))
    if hasattr(model, "end2end") and getattr(model.model[-1], "one2one_cv2", None) is not None:
        model.end2end = True  # what predict(nms=False) selects; otherwise fuse() drops the one2one head
    model = model.float().fuse(verbose=False).eval()
    if dtype == "float64":
        model = model.double()
    elif dtype == "float16":
        model = model.half()
    for p in model.parameters():
        p.requires_grad = False
    return model


def _head_outputs(head, out) -> list:
    """Strip the (y, preds) wrapper of a head's eval output: [y] or [y, proto] (seg) or [probs] (cls)."""
    torch = _torch()
    from ultralytics.nn.modules.head import Classify

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(head, Classify):
        return [out[0]]
    y = out[0] if isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[1], dict) else out
    return list(y) if isinstance(y, (tuple, list)) else [y]


def tf32_round(t):
    """t (float32 tensor) rounded to TF32's 10-bit mantissa as a TF32 tensor core reads it: round to nearest,
    ties away from zero (cvt.rna.tf32.f32), i.e. add half a unit of the 13 dropped bits and clear them."""
    torch = _torch()
    bits = t.contiguous().view(torch.int32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(finite, rounded, t)


def use_tf32_convs(model) -> None:
    """Make every convolution with groups 1 (Conv2d, ConvTranspose2d) of a float32 model multiply TF32 inputs,
    as the cuda backend's TF32 GEMMs do (runtime/carve_cuda.h, carve_cu_ctx_set_conv_math): weights rounded in
    place, inputs rounded by a forward pre-hook; accumulation stays float32. Depthwise / grouped convolutions,
    matmuls (attention) and linear layers stay float32, as in the cuda package."""
    torch = _torch()
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)) and m.groups == 1:
            m.weight.data = tf32_round(m.weight.data)
            m.register_forward_pre_hook(lambda mod, args: (tf32_round(args[0]),) + tuple(args[1:]))


def reference_layers(weights, input_npy, out_dir, dtype: str = "float32", tf32: bool = False) -> dict:
    """Run the fused fp32 model on input_npy; write DIR/layer_XX.npy for every model.model[i], DIR/output*.npy.

    tf32: the convolutions with groups 1 multiply TF32-rounded inputs and weights (use_tf32_convs), the
    reference for the cuda backend's default TF32 math.

    Non-head layers: their NCHW output. The head layer: y, e.g. (1,300,6) [x1,y1,x2,y2,score,class] in input
    pixels for detect; output0.npy is the same y; seg also writes output1.npy = proto (1,32,H/4,W/4).
    Also writes layers.json (index, type, from, shape). Returns {file name: shape}.
    """
    torch = _torch()
    model = load_fused(weights, dtype)
    if tf32:
        if dtype != "float32":
            raise OracleError("reference_layers: tf32 rounds a float32 model's convolutions (dtype float32 only)")
        use_tf32_convs(model)
    x = torch.from_numpy(np.load(input_npy)).to({"float64": torch.float64, "float16": torch.float16}.get(
        dtype, torch.float32))
    if x.ndim != 4:
        raise OracleError(f"{input_npy}: expected a (1,3,H,W) input, found {tuple(x.shape)}")
    layers = list(model.model)
    head = layers[-1]
    outs: dict[int, list] = {}
    hooks = [
        m.register_forward_hook(lambda mod, inp, o, i=i: outs.__setitem__(i, o)) for i, m in enumerate(layers)
    ]
    try:
        with torch.inference_mode():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, meta = {}, []
    for i, m in enumerate(layers):
        o = outs[i]
        arrs = _head_outputs(head, o) if m is head else [o]
        a = np.ascontiguousarray(arrs[0].detach().float().numpy() if dtype == "float16" else arrs[0].detach().numpy())
        np.save(out_dir / f"layer_{i:02d}.npy", a)
        written[f"layer_{i:02d}.npy"] = a.shape
        meta.append({"index": i, "type": m.type if hasattr(m, "type") else type(m).__name__, "from": m.f,
                     "shape": list(a.shape)})
        if m is head:
            for k, t in enumerate(arrs):
                t = np.ascontiguousarray(t.detach().float().numpy() if dtype == "float16" else t.detach().numpy())
                np.save(out_dir / f"output{k}.npy", t)
                written[f"output{k}.npy"] = t.shape
    (out_dir / "layers.json").write_text(json.dumps({"weights": str(weights), "layers": meta}, indent=1) + "\n")
    return written


def rle_encode(mask: np.ndarray) -> dict:
    """COCO uncompressed RLE of a binary (H, W) mask: {"size": [H, W], "counts": [...]}, column-major (Fortran
    order), runs alternating 0s and 1s starting with 0s (a first count of 0 when the top-left pixel is set)."""
    m = np.asarray(mask).astype(bool)
    if m.ndim != 2:
        raise OracleError(f"rle_encode: expected a 2-D mask, found shape {m.shape}")
    flat = m.ravel(order="F").astype(np.int8)
    change = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(edges).tolist()
    if flat.size and flat[0] == 1:
        counts = [0] + counts
    return {"size": [int(m.shape[0]), int(m.shape[1])], "counts": [int(c) for c in counts]}


def rle_decode(rle: dict) -> np.ndarray:
    """The (H, W) bool mask of a COCO uncompressed RLE (see rle_encode); malformed counts raise OracleError."""
    try:
        h, w = (int(v) for v in rle["size"])
        counts = np.asarray(rle["counts"], dtype=np.int64)
    except (KeyError, TypeError, ValueError) as e:
        raise OracleError(f"malformed RLE mask: {e}") from None
    if counts.ndim != 1 or np.any(counts < 0) or int(counts.sum()) != h * w:
        raise OracleError(f"malformed RLE mask: counts sum to {int(counts.sum()) if counts.ndim == 1 else '?'}, "
                          f"size {h}x{w} needs {h * w}")
    values = np.arange(len(counts)) % 2 == 1
    return np.repeat(values, counts).reshape((h, w), order="F")


def _patched_preprocess(predictor_cls, fed: list):
    """Context manager: record the tensor predictor_cls.preprocess returns (what the model is fed)."""
    from contextlib import contextmanager

    @contextmanager
    def cm():
        had = "preprocess" in predictor_cls.__dict__
        orig = predictor_cls.preprocess

        def preprocess(self, im):
            t = orig(self, im)
            fed.append(t.detach().cpu().float().numpy().copy())
            return t

        predictor_cls.preprocess = preprocess
        try:
            yield
        finally:
            if had:
                predictor_cls.preprocess = orig
            else:
                del predictor_cls.preprocess

    return cm()


def reference_predict(weights, image, imgsz=640, conf=0.25, out_json=None, save_input=None, head="e2e") -> dict:
    """Ultralytics' own predictor on `image`, NMS-free one2one head, full square letterbox (rect=False).

    nms=False is passed explicitly: in this ultralytics the default (nms=None) fuses away the one2one head and
    runs the one2many head + NMS instead; head="nms" leaves nms at that default (what carve's --head nms
    reproduces; iou 0.7, max_det 300). Segmentation runs with retina_masks=True (masks in original-image
    pixels). Returns (and writes to out_json) {"task", "image": {"width","height"}, "imgsz", "conf", "max_det",
    "detections": [...], "top5": [...] and "probs" (classify only)}. Each detection has "class_id", "class",
    "score", "box" (xyxy in original-image pixels; obb: [cx,cy,w,h] as the predictor gives them, angle not
    regularised), plus "angle" (obb, radians), "keypoints" [[x,y,v]*K] (pose), "mask" (segment, rle_encode of
    r.masks.data). classify: "top5" [{"class_id","class","score"}] from r.probs, "probs" the whole vector.
    save_input: also write the tensor the predictor fed the model (.npy).
    """
    _torch()
    from ultralytics import YOLO

    h, w = _imgsz_hw(imgsz)
    yolo = YOLO(str(weights))
    task = yolo.task
    fed = []
    kwargs = dict(imgsz=[h, w], conf=conf, rect=False, device="cpu", verbose=False, nms=False, save=False,
                  max_det=MAX_DET)
    if head == "nms":
        del kwargs["nms"]
    if task == "segment":
        kwargs["retina_masks"] = True
    if save_input is not None:
        with _patched_preprocess(yolo._smart_load("predictor"), fed):
            results = yolo.predict(str(image), **kwargs)
        Path(save_input).parent.mkdir(parents=True, exist_ok=True)
        np.save(save_input, fed[0])
    else:
        results = yolo.predict(str(image), **kwargs)
    res = _result_json(results[0], task, conf, (h, w))
    if out_json is not None:
        Path(out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(out_json).write_text(json.dumps(res, indent=1) + "\n")
    return res


def _result_json(r, task: str, conf: float, imgsz, with_masks: bool = True) -> dict:
    """The JSON of reference_predict for one Results (see there); with_masks False: no "mask" entries."""
    names = r.names
    H0, W0 = r.orig_shape
    dets = []
    if r.boxes is not None:
        xyxy = r.boxes.xyxy.cpu().numpy().astype(float)
        scores = r.boxes.conf.cpu().numpy().astype(float)
        classes = r.boxes.cls.cpu().numpy().astype(int)
        kpts = r.keypoints.data.cpu().numpy().astype(float) if r.keypoints is not None else None
        masks = r.masks.data.cpu().numpy() if r.masks is not None and with_masks else None
        if masks is not None and masks.shape[1:] != (H0, W0):
            raise OracleError(f"masks are {masks.shape[1:]}, not the image's {(H0, W0)} (retina_masks?)")
        for j in range(len(scores)):
            d = {"class_id": int(classes[j]), "class": names[int(classes[j])], "score": float(scores[j]),
                 "box": [float(v) for v in xyxy[j]]}
            if kpts is not None:
                d["keypoints"] = [[float(v) for v in kp] for kp in kpts[j]]
            if masks is not None:
                d["mask"] = rle_encode(masks[j] > 0)
            dets.append(d)
    elif r.obb is not None:
        xywhr = r.obb.xywhr.cpu().numpy().astype(float)
        for j in range(len(xywhr)):
            c = int(r.obb.cls[j])
            dets.append({"class_id": c, "class": names[c], "score": float(r.obb.conf[j]),
                         "box": [float(v) for v in xywhr[j, :4]], "angle": float(xywhr[j, 4])})
    res = {"task": task, "image": {"width": int(W0), "height": int(H0)}, "imgsz": [int(v) for v in imgsz],
           "conf": float(conf), "max_det": MAX_DET, "detections": dets}
    if r.probs is not None:
        probs = r.probs.data.cpu().numpy().astype(float)
        res["top5"] = [{"class_id": int(c), "class": names[int(c)], "score": float(probs[int(c)])}
                       for c in r.probs.top5]
        res["probs"] = [float(v) for v in probs]
    return res


def reference_predict_default(weights, image, out_json=None) -> dict:
    """What a user sees first: ``YOLO(weights).predict(image)`` with every argument at Ultralytics' default (conf
    0.25, iou 0.7, max_det 300, the checkpoint's imgsz, rect letterbox with minimal padding, nms=None: the
    one-to-many head + NMS), on the CPU. The JSON of reference_predict, plus:

    * "imgsz": [H, W] of the tensor the predictor fed the model (the letterbox shape it picked: carve generated
      at this --imgsz sees the same pixels);
    * "candidates": the anchors whose best class score is > conf, the boxes the NMS started from (from the
      model's own output, hooked), so that a test can check the NMS removed some;
    * segment: the masks of the same detections rendered at the image's resolution (a second predict with
      retina_masks=True: carve's _mask is process_mask_native). The default predict renders them at the letterbox
      resolution and drops detections whose mask is empty there; a detection the retina run dropped (its mask is
      empty at the image's resolution) gets an empty mask.
    """
    _torch()
    from ultralytics import YOLO

    yolo = YOLO(str(weights))
    task = yolo.task
    fed, outs, hooks = [], [], []

    def hook_head(predictor):  # the model the predictor loaded (fused: the one-to-many head alone)
        if not hooks:
            head = predictor.model.model.model[-1]
            hooks.append(head.register_forward_hook(lambda m, i, o: outs.append(o)))

    yolo.add_callback("on_predict_batch_start", hook_head)
    kwargs = dict(device="cpu", verbose=False, save=False)
    try:
        with _patched_preprocess(yolo._smart_load("predictor"), fed):
            results = yolo.predict(str(image), **kwargs)
    finally:
        for h in hooks:
            h.remove()
    args = yolo.predictor.args
    r = results[0]
    res = _result_json(r, task, float(args.conf), fed[-1].shape[2:], with_masks=False)
    res["iou"], res["agnostic"] = float(args.iou), bool(args.agnostic_nms)
    y = outs[-1][0]
    y = y[0] if isinstance(y, (tuple, list)) else y  # segment: (y, proto)
    nc = len(r.names)
    res["candidates"] = int((y[0, 4:4 + nc].amax(0) > args.conf).sum())
    if task == "segment" and res["detections"]:
        retina = yolo.predict(str(image), retina_masks=True, **kwargs)[0]
        masks = retina.masks.data.cpu().numpy() if retina.masks is not None else np.zeros((0, 1, 1))
        key = {(int(c), float(s), tuple(float(v) for v in b)): j for j, (c, s, b) in enumerate(zip(
            retina.boxes.cls.tolist(), retina.boxes.conf.tolist(), retina.boxes.xyxy.tolist()))}
        H0, W0 = r.orig_shape
        for d in res["detections"]:
            j = key.get((d["class_id"], d["score"], tuple(d["box"])))
            d["mask"] = rle_encode(masks[j] > 0 if j is not None else np.zeros((H0, W0), bool))
    if out_json is not None:
        Path(out_json).parent.mkdir(parents=True, exist_ok=True)
        Path(out_json).write_text(json.dumps(res, indent=1) + "\n")
    return res


# ---------------------------------------------------------------------------------------------------------------------
# compare-layers
# ---------------------------------------------------------------------------------------------------------------------


def _match_rows(ours: np.ndarray, ref: np.ndarray, tol: float, scale: np.ndarray):
    """Match detection rows (K, C) [box(4), score, class, extra...] of one image.

    Each reference row, best score first, takes the unused row of ours with the same class and the nearest row
    (L-inf over all columns, each divided by its column scale). Matched rows must agree within tol on every
    column relative to that column's scale (max |ref| of the column over the whole tensor), so that box pixels
    (hundreds) do not swamp scores (<= 1). Rows whose reference score is within 10*tol*max_score of the lowest
    reference score may stay unmatched (ties at the top-k cut); so may rows of ours with a score that low.
    Returns (n_matched, max relative error over matched rows, max abs error over matched rows, problems).
    """
    ref_scores = ref[:, 4]
    lowest, margin = float(ref_scores.min()), 10 * tol * scale[4]
    used = np.zeros(len(ours), bool)
    n, rel, err, problems = 0, 0.0, 0.0, []
    for r in np.argsort(-ref_scores, kind="stable"):
        cand = np.nonzero(~used & (ours[:, 5] == ref[r, 5]))[0]
        ok = False
        if len(cand):
            d = (np.abs(ours[cand] - ref[r]) / scale).max(1)
            k = int(np.argmin(d))
            if d[k] <= tol:
                j = cand[k]
                used[j], ok, n = True, True, n + 1
                rel, err = max(rel, float(d[k])), max(err, float(np.abs(ours[j] - ref[r]).max()))
        if not ok and ref_scores[r] > lowest + margin:
            what = f"nearest differs by {d.min():.3g} (relative)" if len(cand) else "no row of that class left"
            problems.append(f"ref row {r} (class {ref[r, 5]:g}, score {ref_scores[r]:.6g}): {what}")
    for j in np.nonzero(~used)[0]:
        if ours[j, 4] > lowest + margin:
            problems.append(f"our row {j} (class {ours[j, 5]:g}, score {ours[j, 4]:.6g}) matches no ref row")
    return n, rel, err, problems


def _rel_error(o: np.ndarray, r: np.ndarray, tol: float):
    """(relative error, max abs error, problems, note) of ours `o` against reference `r` (see compare_layers)."""
    scale = float(np.abs(r).max()) if r.size else 0.0
    denom = scale if scale > 0 else 1.0
    if r.ndim == 3 and r.shape[-1] >= 6:
        col = np.abs(r).reshape(-1, r.shape[-1]).max(0)
        col[col == 0] = 1.0
        err, rel, problems, matched = 0.0, 0.0, [], 0
        for b in range(r.shape[0]):
            n, rl, e, pr = _match_rows(o[b], r[b], tol, col)
            matched, rel, err, problems = matched + n, max(rel, rl), max(err, e), problems + pr
        return rel, err, problems, f" matched {matched}/{r.shape[0] * r.shape[1]} rows"
    err = float(np.abs(o - r).max()) if r.size else 0.0
    return err / denom, err, [], ""


BASELINE_MATCH_TOL = 0.05  # compare_layers: rows of PyTorch's fp32 output pair with fp64 rows this close
LAST_STATS: dict = {}  # file name -> (our relative error, PyTorch fp32's or None), from the last compare_layers


def compare_layers(ours, ref, tol: float = 1e-4, verbose: bool = True, baseline=None, factor: float = 3.0) -> bool:
    """Compare every layer_XX.npy / output*.npy of `ref` with the same file in `ours`; True when all pass.

    Error = max|ours-ref| / max|ref| (max|ref| == 0 -> absolute). Missing file, shape mismatch or a non-finite
    value in ours fails. 3-D arrays (B, K, C>=6) are detection rows, compared by matching with per-column scales
    (_match_rows); their "rel err" is the worst column's.

    baseline: a folder with PyTorch's own fp32 outputs when `ref` holds the fp64 ones. Each file's bound is then
    max(tol, factor * PyTorch-fp32 error): where the model amplifies round-off so much that PyTorch itself misses
    tol against the exact answer, ours may be at most `factor` times as far off as PyTorch is. A file the baseline
    lacks is held to tol.
    """
    ours, ref = Path(ours), Path(ref)
    LAST_STATS.clear()
    names = sorted(p.name for p in ref.glob("layer_*.npy")) + sorted(p.name for p in ref.glob("output*.npy"))
    if not names:
        print(f"compare-layers: no layer_XX.npy or output*.npy in {ref}")
        return False
    rows, all_ok = [], True
    for name in names:
        r = np.load(ref / name).astype(np.float64)
        shape = "x".join(map(str, r.shape))
        p = ours / name
        if not p.is_file():
            rows.append((name, shape, "-", "-", "-", "FAIL missing"))
            all_ok = False
            continue
        o = np.load(p).astype(np.float64)
        if o.shape != r.shape:
            rows.append((name, shape, "-", "-", "-", f"FAIL shape {'x'.join(map(str, o.shape))}"))
            all_ok = False
            continue
        scale = float(np.abs(r).max()) if r.size else 0.0
        bound, base_note, base_rel = tol, "", None
        if baseline is not None and (Path(baseline) / name).is_file():
            b = np.load(Path(baseline) / name).astype(np.float64)
            # Rows are paired within BASELINE_MATCH_TOL: a looser pairing lets a row that fp32 and fp64 order
            # differently at the top-k cut pair with an unrelated row, and the bound would lose all meaning.
            base_rel = _rel_error(b, r, BASELINE_MATCH_TOL)[0]
            bound = max(tol, factor * base_rel)
            base_note = f" (PyTorch fp32 {base_rel:.2e}, bound {bound:.2e})"
        if not np.all(np.isfinite(o)):
            ok, err, rel, note = False, float("nan"), float("nan"), f" {int((~np.isfinite(o)).sum())} non-finite"
        else:
            rel, err, problems, note = _rel_error(o, r, bound)
            ok = not problems and rel <= bound
            if problems:
                note += "; " + "; ".join(problems[:3]) + (f"; +{len(problems) - 3} more" if len(problems) > 3 else "")
        note = base_note + note
        LAST_STATS[name] = (rel, base_rel)
        all_ok &= ok
        rows.append((name, shape, f"{err:.3e}", f"{scale:.3e}", f"{rel:.3e}", ("OK" if ok else "FAIL") + note))
    if verbose:
        hdr = ("layer", "shape", "max abs err", "max |ref|", "rel err", f"tol {tol:g}")
        w = [max(len(str(x[k])) for x in rows + [hdr]) for k in range(5)]
        for x in [hdr] + rows:
            print("  ".join(str(v).ljust(w[k]) for k, v in enumerate(x[:5])) + "  " + x[5])
        print(f"compare-layers: {'OK' if all_ok else 'FAIL'} ({sum(x[5].startswith('OK') for x in rows)}/{len(rows)} ok)")
    return all_ok


# ---------------------------------------------------------------------------------------------------------------------
# compare-detections
# ---------------------------------------------------------------------------------------------------------------------


def head_noise(ref32, ref64, conf: float = 0.25) -> dict:
    """PyTorch's own fp32 error in the head's output: per column of output0.npy, the largest |fp32 - fp64| over
    the rows above conf (rows matched by class and nearest row, as in compare_layers), or over the (1,nc)
    probabilities for classify. Returns {"columns": [...]} (rows) or {"probs": x}, in the head's units."""
    r32 = np.load(Path(ref32) / "output0.npy").astype(np.float64)[0]
    r64 = np.load(Path(ref64) / "output0.npy").astype(np.float64)[0]
    if r64.ndim == 1:
        return {"probs": float(np.abs(r32 - r64).max())}
    scale = np.abs(r64).max(0)
    scale[scale == 0] = 1.0
    keep = np.nonzero(r64[:, 4] > conf)[0]
    keep = keep if len(keep) else np.arange(len(r64))
    used = np.zeros(len(r32), bool)
    worst = np.zeros(r64.shape[1])
    for i in keep[np.argsort(-r64[keep, 4], kind="stable")]:
        cand = np.nonzero(~used & (r32[:, 5] == r64[i, 5]))[0]
        if not len(cand):
            continue
        d = np.abs(r32[cand] - r64[i])
        k = int(np.argmin((d / scale).max(1)))
        used[cand[k]] = True
        worst = np.maximum(worst, d[k])
    return {"columns": [float(v) for v in worst]}


def calibrated_tolerances(ref32, ref64, ref_json, factor: float = 4.0, box_px: float = 1.0, score_tol: float = 1e-3,
                          kpt_px: float = 1.0, kpt_vis_tol: float = 1e-3, angle_tol: float = 1e-3,
                          prob_tol: float = 1e-4) -> dict:
    """compare_detections tolerances for one image: each the given one, or `factor` times PyTorch's own fp32
    error (head_noise on the same model, input pixels scaled to the image) where that is larger.

    Deep random-weight models (l, x) amplify float32 round-off so much that PyTorch's fp32 head output misses
    the fixed tolerances against fp64 (obb angles by over 1e-3 rad, scores by several 1e-4); compare_layers
    bounds ours by 3x PyTorch's error there, and the predictor adds its own fp32 error: factor 4.
    """
    ref = json.loads(Path(ref_json).read_text())
    task = json_task(ref)
    noise = head_noise(ref32, ref64, float(ref.get("conf", 0.25)))
    tol = {"box_px": box_px, "score_tol": score_tol}
    if task == "classify":
        return {"prob_tol": max(prob_tol, factor * noise["probs"])}
    c = noise["columns"]
    H, W = int(ref["image"]["height"]), int(ref["image"]["width"])
    in_h, in_w = ref.get("imgsz") or (H, W)
    to_image = 1.0 / min(in_h / H, in_w / W)  # input pixels -> image pixels
    tol["box_px"] = max(box_px, factor * max(c[:4]) * to_image)
    tol["score_tol"] = max(score_tol, factor * c[4])
    if task == "obb":
        tol["angle_tol"] = max(angle_tol, factor * c[6])
    if task == "pose":
        k = np.asarray(c[6:]).reshape(-1, 3)
        tol["kpt_px"] = max(kpt_px, factor * float(k[:, :2].max()) * to_image)
        tol["kpt_vis_tol"] = max(kpt_vis_tol, factor * float(k[:, 2].max()))
    return tol


def json_task(res: dict) -> str:
    """Task of a predictions JSON: its "task" field, else guessed from its keys (older reference files)."""
    if res.get("task") in _TASKS:
        return res["task"]
    if "top5" in res:
        return "classify"
    dets = res.get("detections") or []
    for key, task in (("mask", "segment"), ("keypoints", "pose"), ("angle", "obb")):
        if any(key in d for d in dets):
            return task
    return "detect"


def _obb_error(ob, oa, rb, ra) -> tuple[float, float]:
    """(box error px, angle error rad) between two rotated boxes [cx,cy,w,h] + angle, equal up to symmetry.

    (cx,cy,w,h,t) is the same rectangle as (cx,cy,|w|,|h|,t+pi) and (cx,cy,h,w,t+pi/2); Ultralytics' predictor
    passes the head's raw angle through (regularize_rboxes would map it to [0, pi/2)). Both representations of
    ours are tried; angles are compared modulo pi. Returns the pair with the smaller max(box, 1000*angle).
    """
    ocx, ocy, ow, oh = (float(v) for v in ob)
    rcx, rcy, rw, rh = (float(v) for v in rb)
    ow, oh, rw, rh = abs(ow), abs(oh), abs(rw), abs(rh)
    best = None
    for k in (0, 1):
        w, h = (ow, oh) if k == 0 else (oh, ow)
        d = (float(oa) + k * math.pi / 2 - float(ra)) % math.pi
        d = min(d, math.pi - d)
        e = (max(abs(ocx - rcx), abs(ocy - rcy), abs(w - rw), abs(h - rh)), d)
        if best is None or max(e[0], 1000 * e[1]) < max(best[0], 1000 * best[1]):
            best = e
    return best


def _kpt_error(o, r) -> tuple[float, float]:
    """(max |dx|,|dy| px, max |d visibility|) of two keypoint lists [[x,y,v]*K]; inf when the shapes differ."""
    o, r = np.asarray(o, float), np.asarray(r, float)
    if o.shape != r.shape or r.ndim != 2 or r.shape[1] < 2:
        return math.inf, math.inf
    xy = float(np.abs(o[:, :2] - r[:, :2]).max()) if r.size else 0.0
    v = float(np.abs(o[:, 2:] - r[:, 2:]).max()) if r.shape[1] > 2 else 0.0
    return xy, v


def _compare_top5(ours: dict, ref: dict, prob_tol: float, tie_tol: float) -> tuple[list, str]:
    """Classification: same top-5 classes in the same order, probabilities within prob_tol of the reference's.

    Ranks may swap only between classes whose reference probabilities are within tie_tol (a tie), so a class
    tied with the 5th may also stand in for it. Uses the reference's full "probs" where present.
    """
    problems = []
    rt, ot = ref.get("top5") or [], ours.get("top5")
    if not isinstance(ot, list) or not all(isinstance(o, dict) and "class_id" in o and "score" in o for o in ot):
        return ["ours has no top5 list of {class_id, score}"], ""
    probs = ref.get("probs")
    P = {i: float(v) for i, v in enumerate(probs)} if probs else {int(d["class_id"]): float(d["score"]) for d in rt}
    if len(ot) != len(rt):
        problems.append(f"top5 has {len(ot)} entries, ref {len(rt)}")
    seen, perr = set(), 0.0
    for i, (o, r) in enumerate(zip(ot, rt)):
        oc, rc = int(o["class_id"]), int(r["class_id"])
        if oc in seen:
            problems.append(f"rank {i + 1}: class {oc} listed twice")
        seen.add(oc)
        if oc not in P:
            problems.append(f"rank {i + 1}: class {oc}, ref has class {rc} ({P.get(rc, float('nan')):.6g})")
            continue
        if oc != rc and abs(P[oc] - P[rc]) > tie_tol:
            problems.append(f"rank {i + 1}: class {oc} (ref prob {P[oc]:.6g}), ref has class {rc} ({P[rc]:.6g})")
        e = abs(float(o["score"]) - P[oc])
        perr = max(perr, e)
        if e > prob_tol:
            problems.append(f"rank {i + 1}: class {oc} prob {float(o['score']):.6g}, ref {P[oc]:.6g}")
        if "class" in o and "class" in r and oc == rc and o["class"] != r["class"]:
            problems.append(f"rank {i + 1}: class name {o['class']!r}, ref {r['class']!r}")
    return problems, f"top5 ref {[int(d['class_id']) for d in rt]}, ours {[int(d['class_id']) for d in ot]}, " \
                     f"max prob err {perr:.3g} (<= {prob_tol:g})"


def compare_detections(ours_json, ref_json, box_px: float = 1.0, score_tol: float = 1e-3, verbose: bool = True, *,
                       mask_iou: float = 0.99, mask_cells: float = 4.0, kpt_px: float = 1.0, kpt_vis_tol: float = 1e-3,
                       angle_tol: float = 1e-3, prob_tol: float = 1e-4, tie_tol: float = 1e-6) -> bool:
    """Compare our predictions JSON with reference_predict's; True when they agree.

    The task comes from the reference (json_task). Each reference detection (best first) takes the unused
    detection of ours with the same class that is nearest (largest of its errors, each divided by its
    tolerance); it must agree within box_px on every box coordinate and score_tol on the score, and:
      pose     every keypoint's x and y within kpt_px, visibility within kpt_vis_tol;
      obb      box [cx,cy,w,h] within box_px and angle within angle_tol, up to the rectangle's symmetry
               (_obb_error);
      segment  mask (COCO RLE, decoded) IoU >= mask_iou, or at most mask_cells prototype cells' worth of
               differing pixels (a cell: the (4/gain)^2 image pixels one prototype pixel covers, gain = input
               size / image size). fp32 round-off flips the sign of a few near-zero mask logits at prototype
               resolution, PyTorch's own fp32 included, and bilinear upsampling turns each flip into about a
               cell: at 320 on the deep random l/x models that is over 1% of a 25k-pixel mask.
    Detections of either side may be unmatched only if their score is within score_tol of the conf threshold
    or, when the reference holds max_det rows, of its lowest score; segment: also if the mask has at most
    mask_cells cells (the predictor drops empty masks). classify: _compare_top5. Class names are compared where
    both sides give them; other extra keys (timing_ms, ...) are ignored.
    """
    ours = json.loads(Path(ours_json).read_text())
    ref = json.loads(Path(ref_json).read_text())
    task = json_task(ref)
    problems = []
    for k in ("width", "height"):
        if "image" in ours and ours["image"].get(k) != ref["image"][k]:
            problems.append(f"image {k}: ours {ours['image'].get(k)}, ref {ref['image'][k]}")
    if task == "classify":
        pr, summary = _compare_top5(ours, ref, prob_tol, tie_tol)
        problems += pr
        ok = not problems
        if verbose:
            for p in problems[:10]:
                print("  " + p)
            print(f"compare-detections: {'OK' if ok else 'FAIL'} (classify): {summary}")
        return ok

    conf = float(ref.get("conf", 0.25))
    rd, od = ref["detections"], ours.get("detections")
    if not isinstance(od, list) or not all(isinstance(d, dict) and {"class_id", "score", "box"} <= set(d) for d in od):
        problems.append("ours has no detections list of {class_id, score, box, ...}")
        od = []
    cut = min(d["score"] for d in rd) if rd and len(rd) >= int(ref.get("max_det", MAX_DET)) else None
    H, W = int(ref["image"]["height"]), int(ref["image"]["width"])
    in_h, in_w = ref.get("imgsz") or (H, W)
    cell = 4.0 / min(in_h / H, in_w / W)  # image pixels per prototype pixel (prototypes: stride 4)
    mask_px = mask_cells * cell * cell

    def borderline(s):
        return abs(s - conf) <= score_tol or (cut is not None and s - cut <= score_tol)

    masks: dict = {}

    def mask(side, i):
        key = (side, i)
        if key not in masks:
            d = (rd if side == "ref" else od)[i]
            try:
                m = rle_decode(d["mask"])
                if m.shape != (H, W):
                    raise OracleError(f"mask size {list(m.shape)}, image {H}x{W}")
            except (KeyError, OracleError) as e:
                m = str(e) if isinstance(e, OracleError) else "no mask"
            masks[key] = m
        return masks[key]

    def tiny(side, i):
        m = mask(side, i)
        return not isinstance(m, str) and int(m.sum()) <= mask_px

    def errors(i, j) -> dict:
        r, o = rd[i], od[j]
        e = {"score": abs(float(o["score"]) - float(r["score"])) / score_tol}
        try:
            if task == "obb":
                b, a = _obb_error(o["box"], o.get("angle", math.nan), r["box"], r["angle"])
                e["box"], e["angle"] = b / box_px, a / angle_tol
            else:
                e["box"] = float(np.abs(np.asarray(o["box"], float) - np.asarray(r["box"], float)).max()) / box_px
            if task == "pose":
                xy, v = _kpt_error(o.get("keypoints", []), r["keypoints"])
                e["keypoints"], e["visibility"] = xy / kpt_px, v / kpt_vis_tol
        except (TypeError, ValueError):
            e["box"] = math.inf
        return {k: (math.inf if v != v else v) for k, v in e.items()}  # NaN -> inf

    scale = {"box": box_px, "score": score_tol, "angle": angle_tol, "keypoints": kpt_px, "visibility": kpt_vis_tol}
    unit = {"box": " px", "keypoints": " px", "angle": " rad"}
    worst = {k: 0.0 for k in scale}
    min_iou = 1.0
    ocls = np.array([int(d["class_id"]) for d in od], int)
    used = np.zeros(len(od), bool)
    matched, skipped = 0, 0
    for i in sorted(range(len(rd)), key=lambda i: -rd[i]["score"]):
        d = rd[i]
        cand = np.nonzero(~used & (ocls == int(d["class_id"])))[0]
        why = "no detection of this class left"
        scored = sorted(((max(e.values()), int(j), e) for j in cand for e in [errors(i, j)]), key=lambda t: t[:2])
        found = False
        for cost, j, e in scored:
            if cost > 1:
                break
            if task == "segment":
                mr, mo = mask("ref", i), mask("ours", j)
                if isinstance(mo, str) or isinstance(mr, str):
                    why = f"mask: {mo if isinstance(mo, str) else mr}"
                    continue
                inter, union = int((mr & mo).sum()), int((mr | mo).sum())
                iou = inter / union if union else 1.0
                if iou < mask_iou and union - inter > mask_px:
                    why = f"mask IoU {iou:.4f} (< {mask_iou:g}), {union - inter} pixels differ"
                    continue
                min_iou = min(min_iou, iou)
            used[j], matched = True, matched + 1
            for k, v in e.items():
                worst[k] = max(worst[k], v * scale[k])
            if "class" in d and "class" in od[j] and d["class"] != od[j]["class"]:
                problems.append(f"class {d['class_id']}: name {od[j]['class']!r}, ref {d['class']!r}")
            found = True
            break
        if not found:
            if scored and scored[0][0] > 1:
                e = scored[0][2]
                why = "nearest of this class: " + ", ".join(
                    f"{k} off by {v * scale[k]:.3g}{unit.get(k, '')}" for k, v in e.items())
            if borderline(d["score"]) or (task == "segment" and tiny("ref", i)):
                skipped += 1
                continue
            box = ", ".join(f"{v:.1f}" for v in d["box"])
            problems.append(f"ref class {d['class_id']} score {d['score']:.4f} box [{box}]: {why}")
    for j in np.nonzero(~used)[0]:
        if borderline(od[j]["score"]) or (task == "segment" and tiny("ours", j)):
            skipped += 1
            continue
        box = ", ".join(f"{v:.1f}" for v in od[j]["box"])
        problems.append(f"extra detection: class {od[j]['class_id']} score {od[j]['score']:.4f} box [{box}]")
    ok = not problems
    if verbose:
        for p in problems[:10]:
            print("  " + p)
        if len(problems) > 10:
            print(f"  ... {len(problems) - 10} more")
        extra = ""
        if task == "obb":
            extra += f", max angle err {worst['angle']:.3g} rad (<= {angle_tol:g})"
        if task == "pose":
            extra += (f", max keypoint err {worst['keypoints']:.3g} px (<= {kpt_px:g}), "
                      f"visibility {worst['visibility']:.3g} (<= {kpt_vis_tol:g})")
        if task == "segment":
            extra += f", min mask IoU {min_iou:.4f} (>= {mask_iou:g} or <= {mask_px:.0f} pixels off)"
        print(f"compare-detections: {'OK' if ok else 'FAIL'} ({task}): ref {len(rd)}, ours {len(od)}, "
              f"matched {matched}, borderline unmatched {skipped}, max box err {worst['box']:.3g} px (<= {box_px:g}), "
              f"max score err {worst['score']:.3g} (<= {score_tol:g}){extra}")
    return ok


# ---------------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="oracle.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="show tracebacks")
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("make-checkpoint", help="build a released-style checkpoint with realistic BN statistics")
    p.add_argument("--cfg", required=True, help="yolo26{n,s,m,l,x}{,-seg,-pose,-obb,-cls}.yaml")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--half", action=argparse.BooleanOptionalAction, default=True, help="save fp16 (default)")

    p = sub.add_parser("make-input", help="the predictor's (1,3,H,W) float32 input for an image")
    p.add_argument("--image", required=True, help="image path, or the name of an ultralytics asset (bus.jpg)")
    p.add_argument("--imgsz", default="640", help="640 or H,W")
    p.add_argument("--task", default="detect", choices=tuple(_TASKS),
                   help="classify: resize + centre crop instead of the letterbox")
    p.add_argument("--out", required=True)

    p = sub.add_parser("reference-layers", help="every layer's output of the fused fp32 model")
    p.add_argument("--weights", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("reference-predict", help="Ultralytics' predictor (NMS-free head) to JSON")
    p.add_argument("--weights", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--imgsz", default="640")
    p.add_argument("--conf", type=float, default=0.25)
    p.add_argument("--out", required=True)
    p.add_argument("--save-input", help="also write the tensor the predictor fed the model (.npy)")

    p = sub.add_parser("compare-layers", help="compare our layer dumps with the reference")
    p.add_argument("--ours", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--baseline", help="PyTorch's fp32 outputs when --ref holds fp64 ones (see compare_layers)")

    p = sub.add_parser("compare-detections", help="compare our predictions JSON with the reference (any task)")
    p.add_argument("--ours", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--box-px", type=float, default=1.0)
    p.add_argument("--score-tol", type=float, default=1e-3)
    p.add_argument("--mask-iou", type=float, default=0.99, help="segment: least mask IoU")
    p.add_argument("--mask-cells", type=float, default=4.0,
                   help="segment: masks may differ by (or be absent below) this many prototype cells' area")
    p.add_argument("--kpt-px", type=float, default=1.0, help="pose: keypoint x, y tolerance")
    p.add_argument("--kpt-vis-tol", type=float, default=1e-3, help="pose: keypoint visibility tolerance")
    p.add_argument("--angle-tol", type=float, default=1e-3, help="obb: angle tolerance (radians)")
    p.add_argument("--prob-tol", type=float, default=1e-4, help="classify: top-5 probability tolerance")
    p.add_argument("--tie-tol", type=float, default=1e-6, help="classify: ranks may swap within this")

    a = ap.parse_args(argv)

    def image(s):
        return s if Path(s).exists() or "/" in s else sample_image(s)

    try:
        if a.cmd == "make-checkpoint":
            print(make_checkpoint(a.cfg, a.out, a.seed, a.half))
        elif a.cmd == "make-input":
            x = make_input(image(a.image), a.imgsz, a.out, task=a.task)
            print(f"{a.out}: {tuple(x.shape)} float32")
        elif a.cmd == "reference-layers":
            w = reference_layers(a.weights, a.input, a.out)
            print(f"{a.out}: {len(w)} arrays, output0 {tuple(w['output0.npy'])}")
        elif a.cmd == "reference-predict":
            r = reference_predict(a.weights, image(a.image), a.imgsz, a.conf, a.out, a.save_input)
            if "top5" in r:
                print(f"{a.out}: top5 {[d['class_id'] for d in r['top5']]}")
            else:
                print(f"{a.out}: {len(r['detections'])} detections")
        elif a.cmd == "compare-layers":
            return 0 if compare_layers(a.ours, a.ref, a.tol, baseline=a.baseline) else 1
        elif a.cmd == "compare-detections":
            return 0 if compare_detections(a.ours, a.ref, a.box_px, a.score_tol, mask_iou=a.mask_iou,
                                           mask_cells=a.mask_cells, kpt_px=a.kpt_px, kpt_vis_tol=a.kpt_vis_tol,
                                           angle_tol=a.angle_tol, prob_tol=a.prob_tol, tie_tol=a.tie_tol) else 1
    except OracleError as e:
        if a.verbose:
            raise
        print(f"oracle: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
