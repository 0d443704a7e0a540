"""A plain numpy reference interpreter of the carve IR (tests only).

Each op kind of ``carve.ir.OPS`` is written here the slow, obvious way, from
Ultralytics' PyTorch code rather than from carve's C kernels:

* conv2d: im2col + einsum per group, bias, optional SiLU, then the residual
  (``y = act(W*x + b) + r``);
* maxpool2d: -inf padding, as ``nn.MaxPool2d``;
* attention: ``Attention.forward`` of ultralytics/nn/modules/block.py (qkv
  viewed as (heads, 2*key_dim+head_dim, N), softmax(q^T k * scale), v @ attn^T);
* e2e_detect: ``Detect._inference`` + ``Detect.postprocess`` /
  ``get_topk_index`` of ultralytics/nn/modules/head.py with ``make_anchors`` /
  ``dist2bbox`` of ultralytics/utils/tal.py (xyxy, reg_max 1).

Tensors are NHWC ``(h, w, c)`` float32 arrays; every op computes in float64
and rounds its outputs to float32, so two runs on equal inputs are equal bit
for bit whatever the memory layout the inputs came from.

``run_graph`` interprets a graph on separate arrays; ``run_planned`` runs the
same ops through a planner ``Plan``: one flat float32 arena, every tensor
read and written through its ``View``, slices never copied, concat inputs
copied only when the plan lists them in ``plan.copies``.

The last section builds the Ultralytics models and checkpoints the generator
tests share (``build_yolo26``, ``save_checkpoint``, ``ultralytics_fused``,
``layer_outputs``); torch and ultralytics are imported only there.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


# ---------------------------------------------------------------------------
# Op kernels (float64 inside, float32 out)
# ---------------------------------------------------------------------------

def sigmoid(x):
    e = np.exp(-np.abs(x))                       # no overflow for large |x|
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(x):
    return x * sigmoid(x)


def conv2d(x, w, b, stride=1, pad=0, groups=1, act="none", residual=None):
    """y[o] = act(sum_{c,i,j} W[o,c,i,j] * x[s*y+i-p, s*x+j-p, g*cg+c] + b[o]) + r."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    h, wd, c = x.shape
    cout, cg, kh, kw = w.shape
    assert c == cg * groups and cout % groups == 0, (x.shape, w.shape, groups)
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    cols = np.empty((oh, ow, kh, kw, c))
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j, :] = xp[i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
    cols = cols.reshape(oh, ow, kh, kw, groups, cg)
    wg = w.reshape(groups, cout // groups, cg, kh, kw)
    y = np.einsum("hwijgc,gocij->hwgo", cols, wg).reshape(oh, ow, cout)
    if b is not None:
        y = y + np.asarray(b, np.float64)
    if act == "silu":
        y = silu(y)
    else:
        assert act == "none", act
    if residual is not None:
        y = y + np.asarray(residual, np.float64)
    return y.astype(F32)


def maxpool2d(x, k, stride, pad):
    x = np.asarray(x, np.float64)
    h, w, c = x.shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)), constant_values=-np.inf)
    y = np.full((oh, ow, c), -np.inf)
    for i in range(k):
        for j in range(k):
            y = np.maximum(y, xp[i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :])
    return y.astype(F32)


def upsample_nearest(x, scale):
    return np.repeat(np.repeat(np.asarray(x, F32), scale, axis=0), scale, axis=1)


def attention(qkv, heads, key_dim, head_dim, scale):
    """Ultralytics Attention core; returns (attn(v), v) as (h, w, heads*head_dim) each."""
    h, w, c = qkv.shape
    n = h * w
    t = np.asarray(qkv, np.float64).reshape(n, c).T.reshape(heads, 2 * key_dim + head_dim, n)
    q, k, v = t[:, :key_dim], t[:, key_dim:2 * key_dim], t[:, 2 * key_dim:]
    s = np.einsum("hdn,hdm->hnm", q * scale, k)                   # (q*scale)^T @ k
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    a = s / s.sum(axis=-1, keepdims=True)                          # softmax over keys
    o = np.einsum("hdm,hnm->hdn", v, a)                            # v @ attn^T
    dim = heads * head_dim
    return (o.reshape(dim, n).T.reshape(h, w, dim).astype(F32),
            v.reshape(dim, n).T.reshape(h, w, dim).astype(F32))


def _topk_desc(x, k):
    """Indices of the k largest values, largest first (stable among equals)."""
    return np.argsort(-x, kind="stable")[:k]


def e2e_detect(inputs, nc, k, strides, inputs_per_level=2, extra_channels=0):
    """Detect end-to-end: decode xyxy boxes, top-k anchors by best class, top-k (anchor, class) pairs."""
    assert inputs_per_level == 2 and extra_channels == 0
    boxes, scores = [], []
    for lv in range(len(inputs) // 2):
        box = np.asarray(inputs[2 * lv], np.float64)
        cls = np.asarray(inputs[2 * lv + 1], np.float64)
        h, w, _ = box.shape
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        anchor = np.stack([sx, sy], -1).reshape(-1, 2)             # make_anchors: (x, y), row major
        d = box.reshape(-1, 4)
        xyxy = np.concatenate([anchor - d[:, :2], anchor + d[:, 2:]], 1) * strides[lv]   # dist2bbox xyxy
        boxes.append(xyxy)
        scores.append(sigmoid(cls.reshape(-1, nc)))
    boxes, scores = np.concatenate(boxes), np.concatenate(scores)
    kk = min(k, boxes.shape[0])
    ori = _topk_desc(scores.max(axis=1), kk)                       # anchors by their best class
    flat = scores[ori].reshape(-1)
    best = _topk_desc(flat, kk)                                     # (anchor, class) pairs
    anchor, label = ori[best // nc], best % nc
    rows = np.concatenate([boxes[anchor], flat[best][:, None], label[:, None].astype(np.float64)], 1)
    return rows[None].astype(F32)


# ---------------------------------------------------------------------------
# One op on arrays
# ---------------------------------------------------------------------------

def eval_op(graph, op, ins):
    """Outputs (a list) of ``op`` given its input arrays."""
    a = op.attrs
    if op.kind == "conv2d":
        w = graph.weights[op.params["weight"]]
        b = graph.weights[op.params["bias"]] if "bias" in op.params else None
        assert "bn_gamma" not in op.params, "run passes.fold_bn first"
        return [conv2d(ins[0], w, b, a["stride"], a["pad"], a["groups"], a["act"],
                       ins[1] if len(ins) > 1 else None)]
    if op.kind == "maxpool2d":
        return [maxpool2d(ins[0], a["kernel"], a["stride"], a["pad"])]
    if op.kind == "upsample_nearest":
        return [upsample_nearest(ins[0], a["scale"])]
    if op.kind == "concat":
        return [np.concatenate([np.asarray(x, F32) for x in ins], axis=2)]
    if op.kind == "slice":
        return [np.ascontiguousarray(ins[0][:, :, a["start"]:a["start"] + a["count"]], F32)]
    if op.kind == "add":
        return [(np.asarray(ins[0], np.float64) + np.asarray(ins[1], np.float64)).astype(F32)]
    if op.kind == "attention":
        return list(attention(ins[0], a["heads"], a["key_dim"], a["head_dim"], a["scale"]))
    if op.kind == "e2e_detect":
        return [e2e_detect(ins, a["nc"], a["k"], a["strides"], a["inputs_per_level"], a["extra_channels"])]
    raise NotImplementedError(f"irsim: no reference for op kind '{op.kind}'")


def run_graph(graph, image):
    """Interpret ``graph`` on ``image`` (h, w, 3); returns {tensor name: array} for every tensor."""
    env = {graph.input: np.ascontiguousarray(image, F32)}
    for op in graph.ops:
        outs = eval_op(graph, op, [env[t] for t in op.inputs])
        for t, y in zip(op.outputs, outs):
            assert y.shape == graph.tensors[t].shape, (op.name, t, y.shape, graph.tensors[t].shape)
            env[t] = y
    return env


# ---------------------------------------------------------------------------
# The same ops through a memory plan
# ---------------------------------------------------------------------------

class Arena:
    """One flat float32 arena; tensors are strided views at their planned offsets."""

    def __init__(self, graph, plan, fill=np.nan):
        assert plan.arena_bytes % 4 == 0
        self.graph, self.plan = graph, plan
        self.mem = np.full(plan.arena_bytes // 4, fill, dtype=F32)

    def view(self, t):
        """A writable (h, w, c) numpy view of tensor ``t`` inside the arena (bounds checked)."""
        v = self.plan.views[t]
        st = self.plan.storages[v.storage]
        assert (v.h, v.w, v.c) == tuple(self.graph.tensors[t].shape), t
        assert st.offset % 4 == 0 and v.offset >= 0 and v.offset + v.c <= v.stride, (t, v)
        assert st.floats == v.h * v.w * v.stride, (t, v, st)   # the storage is (h, w, stride)
        base = st.offset // 4 + v.offset
        assert base + (v.h * v.w - 1) * v.stride + v.c <= self.mem.size, (t, v, st)
        return np.lib.stride_tricks.as_strided(self.mem[base:], shape=(v.h, v.w, v.c),
                                               strides=(v.w * v.stride * 4, v.stride * 4, 4))

    def read(self, t):
        return np.array(self.view(t), dtype=F32, order="C")

    def write(self, t, y):
        self.view(t)[...] = y


def run_planned(graph, plan, image, check=None):
    """Run ``graph`` through ``plan``. ``check(op_index, op, tensor, array)`` (optional) sees every
    input as it is read and again after the op ran, every output as written, and every layer
    output after its layer's last op;
    returns {tensor: array} of the graph outputs read back at the end."""
    ar = Arena(graph, plan)
    ar.write(graph.input, image)
    copies = set(plan.copies)
    last_op_of_layer = {}
    for i, op in enumerate(graph.ops):
        last_op_of_layer[op.layer] = i
    layer_out = {}
    for layer in graph.layers:
        layer_out.setdefault(last_op_of_layer[layer.index], []).append(layer.output)

    for i, op in enumerate(graph.ops):
        ins = [ar.read(t) for t in op.inputs]
        if check:
            for t, x in zip(op.inputs, ins):
                check(i, op, t, x)
        if op.kind == "slice":
            pass                                  # a view of its input: nothing runs
        elif op.kind == "concat":
            out, slot = op.outputs[0], 0
            for t, x in zip(op.inputs, ins):
                c = x.shape[2]
                if (op.name, t) in copies:       # else the producer already wrote it in its slot
                    ar.view(out)[:, :, slot:slot + c] = x
                slot += c
        else:
            for t, y in zip(op.outputs, eval_op(graph, op, ins)):
                ar.write(t, y)
        if check:
            for t in op.inputs:                   # a kernel reads while it writes: its inputs
                check(i, op, t, ar.read(t))       # must not share bytes with its outputs
            for t in op.outputs:
                check(i, op, t, ar.read(t))
            for t in layer_out.get(i, []):
                check(i, op, t, ar.read(t))
    return {t: ar.read(t) for t in graph.outputs.values()}


# ---------------------------------------------------------------------------
# Fixtures: YOLO26 checkpoints built with Ultralytics (tests that use these
# need torch + ultralytics)
# ---------------------------------------------------------------------------

def build_yolo26(scale="n", seed=0, calibrate=None, max_det=None):
    """A fresh Ultralytics YOLO26 DetectionModel (float32, eval mode).

    ``calibrate`` (an NCHW float tensor): give every BatchNorm random affine parameters and,
    as running statistics, the statistics of its own input on this batch (measured in eval
    mode, layer after layer), and every class logit its own bias, so that on that batch the
    activations neither vanish, explode nor tie (a fresh model's features shrink to ~0 after
    a few layers and all its class scores equal the bias). ``max_det`` becomes an instance
    attribute of the head, pickled with it."""
    import torch
    from torch import nn
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(seed)
    m = DetectionModel(f"yolo26{scale}.yaml", verbose=False).eval()
    if calibrate is not None:
        bns = [mod for mod in m.modules() if isinstance(mod, nn.BatchNorm2d)]

        def measure(bn, inputs):
            x = inputs[0]
            bn.running_mean.copy_(x.mean((0, 2, 3)))
            bn.running_var.copy_(x.var((0, 2, 3), unbiased=False))

        with torch.no_grad():
            for bn in bns:
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.normal_(0.0, 0.2)
            hooks = [bn.register_forward_pre_hook(measure) for bn in bns]
            try:
                m(calibrate)
            finally:
                for h in hooks:
                    h.remove()
            for seq in m.model[-1].one2one_cv3:
                seq[-1].bias.normal_(-3.0, 1.0)
    if max_det is not None:
        m.model[-1].max_det = max_det
    return m.eval()


def save_checkpoint(model, path):
    """Save like Ultralytics' strip_optimizer: a half-precision copy under 'model'."""
    import copy

    import torch

    torch.save({"model": copy.deepcopy(model).half(), "ema": None,
                "train_args": {"task": "detect", "imgsz": 640}, "epoch": -1}, str(path))
    return path


def ultralytics_fused(path):
    """Ultralytics' own inference model from the checkpoint file: float32, end2end, fused."""
    import torch

    m = torch.load(str(path), map_location="cpu", weights_only=False)["model"].float().eval()
    m.model[-1].end2end = True
    return m.fuse(verbose=False).eval()


def layer_outputs(model, x):
    """Outputs of model.model[i] for every layer i (Detect: its first element), via forward hooks."""
    import torch

    outs = {}
    hooks = [mod.register_forward_hook(lambda mod, i, o, k=k: outs.__setitem__(k, o[0] if isinstance(o, tuple) else o))
             for k, mod in enumerate(model.model)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return outs
