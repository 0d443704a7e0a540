"""A float32 executor of the IR after ``passes.optimize``, in numpy: what calibration and the sensitivity pass run.

Each op computes in float32 with BLAS matrix products (convolutions: im2col + ``@``; depthwise convolutions: one
multiply-add per tap), fast enough to calibrate yolo26n on a few hundred images. It agrees with the float64
reference interpreter of the tests (tests/generator/irsim.py) to float32 round-off.

``run(graph, image, observe=...)`` runs every op in order and returns {tensor: array}. ``observe(key, array)`` sees
every tensor an op computes, and two values inside a convolution that int8 needs apart:

* ``"<op>:pre"``: a SiLU convolution's pre-activation ``W*x + b`` (the input range of its lookup table);
* ``"<op>:conv"``: a convolution with a fused residual, before the add (``act(W*x + b)``: the qconv2d output
  of the quantized graph, which a separate qadd then adds to the residual).

Post-processing ops (``e2e_detect``, ``nms_detect``) run only with ``postprocess=True``, for the detect task (the
tests' end-to-end comparisons); calibration needs only the tensors that feed them.
"""

from __future__ import annotations

import numpy as np

from ..errors import CarveError

F32 = np.float32
POSTPROCESS = ("e2e_detect", "nms_detect")


def pre_key(op) -> str:
    """The observation key of a SiLU convolution's pre-activation."""
    return f"{op.name}:pre"


def conv_key(op) -> str:
    """The observation key of a fused-residual convolution's output before its add."""
    return f"{op.name}:conv"


# ---------------------------------------------------------------------------
# Kernels (float32)
# ---------------------------------------------------------------------------

def silu(y):
    """y * (1 / (1 + exp(-y))) in float32, computed in one scratch array (the same operations in the same order)."""
    y = np.asarray(y, F32)
    t = np.negative(y)
    with np.errstate(over="ignore"):
        np.exp(t, out=t)
    t += F32(1)
    np.divide(F32(1), t, out=t)
    return np.multiply(y, t, out=t)


def sigmoid(x):
    x = np.asarray(x, np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def pad_hw(x, pad, fill=0.0):
    """x (h, w, c) with ``pad`` rows / columns of ``fill`` around it (np.pad's result, without its per-call cost)."""
    if pad == 0:
        return x
    h, w, c = x.shape
    xp = np.full((h + 2 * pad, w + 2 * pad, c), fill, x.dtype)
    xp[pad:pad + h, pad:pad + w] = x
    return xp


def taps(xp, kh, kw, stride, oh, ow):
    """The (i, j, view) of each kernel tap: view[y, x] = xp[stride*y + i, stride*x + j]."""
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]


def conv_linear(x, w, b, stride: int, pad: int, groups: int):
    """W*x + b (no activation) of x (h, w, cin) float32, w (cout, cin/groups, kh, kw): (oh, ow, cout) float32."""
    x = np.asarray(x, F32)
    h, wd, c = x.shape
    cout, cg, kh, kw = w.shape
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    if groups == 1 and kh == kw == 1 and stride == 1 and pad == 0:
        y = x.reshape(-1, c) @ np.ascontiguousarray(w.reshape(cout, c).T)
        y = y.reshape(oh, ow, cout)
    elif groups == c == cout:                         # depthwise: one multiply-add per tap
        xp = pad_hw(x, pad)
        y = np.zeros((oh, ow, cout), F32)
        for i, j, v in taps(xp, kh, kw, stride, oh, ow):
            y += v * w[:, 0, i, j]
    else:
        xp = pad_hw(x, pad)
        cols = np.empty((oh, ow, kh, kw, c), F32)
        for i, j, v in taps(xp, kh, kw, stride, oh, ow):
            cols[:, :, i, j, :] = v
        og = cout // groups
        y = np.empty((oh * ow, cout), F32)
        cols = cols.reshape(oh * ow, kh, kw, groups, cg)
        for g in range(groups):
            a = cols[:, :, :, g, :].reshape(oh * ow, kh * kw * cg)
            wg = w[g * og:(g + 1) * og].transpose(2, 3, 1, 0).reshape(kh * kw * cg, og)
            y[:, g * og:(g + 1) * og] = a @ wg
        y = y.reshape(oh, ow, cout)
    if b is not None:
        y = y + np.asarray(b, F32)
    return y.astype(F32, copy=False)


def deconv2d(x, w, b, stride: int):
    """Transposed convolution (no padding): w (cin, cout, kh, kw)."""
    x = np.asarray(x, F32)
    h, wd, c = x.shape
    _, cout, kh, kw = w.shape
    y = np.zeros(((h - 1) * stride + kh, (wd - 1) * stride + kw, cout), F32)
    flat = x.reshape(-1, c)
    for i in range(kh):
        for j in range(kw):
            y[i:i + stride * (h - 1) + 1:stride, j:j + stride * (wd - 1) + 1:stride, :] += \
                (flat @ w[:, :, i, j]).reshape(h, wd, cout)
    if b is not None:
        y += np.asarray(b, F32)
    return y


def maxpool2d(x, k: int, stride: int, pad: int):
    x = np.asarray(x, F32)
    h, w, _ = x.shape
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    xp = pad_hw(x, pad, -np.inf)
    y = None
    for _, _, v in taps(xp, k, k, stride, oh, ow):
        y = v.copy() if y is None else np.maximum(y, v)
    return y


def upsample_nearest(x, scale: int):
    return np.repeat(np.repeat(x, scale, axis=0), scale, axis=1)


def attention(qkv, heads: int, key_dim: int, head_dim: int, scale: float):
    """Ultralytics' Attention core (block.py): (softmax(q^T k * scale) applied to v, v), each (h, w, heads*head_dim)."""
    h, w, c = qkv.shape
    n = h * w
    t = np.asarray(qkv, F32).reshape(n, c).T.reshape(heads, 2 * key_dim + head_dim, n)
    q, k, v = t[:, :key_dim], t[:, key_dim:2 * key_dim], t[:, 2 * key_dim:]
    s = np.matmul(np.swapaxes(q, 1, 2) * F32(scale), k)            # (heads, n, n)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    a = s / s.sum(axis=-1, keepdims=True)
    o = np.matmul(v, np.swapaxes(a, 1, 2))                          # (heads, head_dim, n)
    dim = heads * head_dim
    return (np.ascontiguousarray(o.reshape(dim, n).T.reshape(h, w, dim), F32),
            np.ascontiguousarray(v.reshape(dim, n).T.reshape(h, w, dim), F32))


def _decode_detect(inputs, nc: int, strides, xywh: bool):
    """Per anchor (all levels, row major): boxes (n, 4) in input pixels (xyxy, or xywh) and sigmoid scores (n, nc)."""
    boxes, scores = [], []
    for lv in range(len(inputs) // 2):
        box = np.asarray(inputs[2 * lv], np.float64)
        cls = np.asarray(inputs[2 * lv + 1], np.float64)
        h, w, _ = box.shape
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(w) + 0.5, indexing="ij")
        anchor = np.stack([sx, sy], -1).reshape(-1, 2)
        d = box.reshape(-1, 4)
        lt, rb = anchor - d[:, :2], anchor + d[:, 2:]
        b = np.concatenate([(lt + rb) / 2, rb - lt], 1) if xywh else np.concatenate([lt, rb], 1)
        boxes.append(b * strides[lv])
        scores.append(sigmoid(cls.reshape(-1, nc)))
    return np.concatenate(boxes), np.concatenate(scores)


def e2e_detect(inputs, attrs):
    """Detect.postprocess (end-to-end head): top-k anchors by best class, top-k (anchor, class) pairs; (1, k, 6)."""
    nc, k = attrs["nc"], attrs["k"]
    boxes, scores = _decode_detect(inputs, nc, attrs["strides"], xywh=False)
    kk = min(k, boxes.shape[0])
    ori = np.argsort(-scores.max(axis=1), kind="stable")[:kk]
    flat = scores[ori].reshape(-1)
    best = np.argsort(-flat, kind="stable")[:kk]
    anchor, label = ori[best // nc], best % nc
    rows = np.concatenate([boxes[anchor], flat[best][:, None], label[:, None].astype(np.float64)], 1)
    return rows[None].astype(F32)


def nms_detect(inputs, attrs, conf: float):
    """The one-to-many head's non_max_suppression (class-aware unless agnostic, greedy, IoU > iou removes): rows
    (1, n, 6) of the kept boxes, best first, padded with zero rows to k."""
    nc, k = attrs["nc"], attrs["k"]
    xywh, scores = _decode_detect(inputs, nc, attrs["strides"], xywh=True)
    xyxy = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], 1)
    best, label = scores.max(axis=1), scores.argmax(axis=1)
    cand = np.nonzero(best > conf)[0]
    cand = cand[np.argsort(-best[cand], kind="stable")][:30000]
    off = xyxy[cand] + (0.0 if attrs.get("agnostic") else label[cand, None] * 7680.0)
    area = (off[:, 2] - off[:, 0]) * (off[:, 3] - off[:, 1])
    keep = []
    alive = np.ones(len(cand), bool)
    for i in range(len(cand)):
        if not alive[i]:
            continue
        keep.append(i)
        if len(keep) == k:
            break
        lt = np.maximum(off[i, :2], off[i + 1:, :2])
        rb = np.minimum(off[i, 2:], off[i + 1:, 2:])
        inter = np.prod(np.clip(rb - lt, 0, None), axis=1)
        iou = inter / (area[i] + area[i + 1:] - inter)
        alive[i + 1:] &= ~(iou > attrs["iou"])
    idx = cand[keep]
    rows = np.zeros((k, 6))
    rows[:len(idx)] = np.concatenate([xyxy[idx], best[idx, None], label[idx, None].astype(np.float64)], 1)
    return rows[None].astype(F32)


# ---------------------------------------------------------------------------
# One op, the whole graph
# ---------------------------------------------------------------------------

def _weights(graph, op, role):
    name = op.params.get(role)
    return None if name is None else np.asarray(graph.weights[name], F32)


def conv2d(graph, op, ins, observe=None):
    """A conv2d op: act(W*x + b) (+ residual), reporting :pre and :conv to observe."""
    a = op.attrs
    y = conv_linear(ins[0], _weights(graph, op, "weight"), _weights(graph, op, "bias"), a["stride"], a["pad"],
                    a["groups"])
    if a["act"] == "silu":
        if observe:
            observe(pre_key(op), y)
        y = silu(y)
    if len(ins) > 1:
        if observe:
            observe(conv_key(op), y)
        y = y + ins[1]
    return y


def eval_op(graph, op, ins, observe=None, conf: float = 0.25) -> list:
    """The float32 outputs (a list) of ``op`` given its input arrays."""
    a = op.attrs
    k = op.kind
    if k == "conv2d":
        if "bn_gamma" in op.params:
            raise CarveError(f"{op.name}: the float executor runs the graph after passes.optimize (BN folded)")
        return [conv2d(graph, op, ins, observe)]
    if k == "deconv2d":
        return [deconv2d(ins[0], _weights(graph, op, "weight"), _weights(graph, op, "bias"), a["stride"])]
    if k == "maxpool2d":
        return [maxpool2d(ins[0], a["kernel"], a["stride"], a["pad"])]
    if k == "upsample_nearest":
        return [upsample_nearest(ins[0], a["scale"])]
    if k == "concat":
        return [np.concatenate(ins, axis=2)]
    if k == "slice":
        return [np.ascontiguousarray(ins[0][:, :, a["start"]:a["start"] + a["count"]])]
    if k == "add":
        return [ins[0] + ins[1]]
    if k == "attention":
        return list(attention(ins[0], a["heads"], a["key_dim"], a["head_dim"], a["scale"]))
    if k == "global_avgpool":
        return [np.asarray(ins[0], np.float64).mean(axis=(0, 1), keepdims=True).astype(F32)]
    if k == "linear":
        w, b = _weights(graph, op, "weight"), _weights(graph, op, "bias")
        return [(ins[0].reshape(1, -1) @ w.T + (0 if b is None else b)).reshape(1, 1, -1).astype(F32)]
    if k == "softmax":
        x = np.asarray(ins[0], np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return [(e / e.sum(axis=-1, keepdims=True)).astype(F32)]
    if k in POSTPROCESS:
        if a.get("task") != "detect" or a.get("extra_channels"):
            raise CarveError(f"{op.name}: the float executor post-processes the detect task only, not "
                             f"'{a.get('task')}'")
        return [e2e_detect(ins, a) if k == "e2e_detect" else nms_detect(ins, a, conf)]
    raise CarveError(f"{op.name}: the float executor has no '{k}' op")


def run(graph, image, observe=None, postprocess: bool = False, conf: float = 0.25, keep: bool = True) -> dict:
    """Run ``graph`` (after passes.optimize) on ``image`` (h, w, 3) float32; returns {tensor: array}.

    ``observe(key, array)`` (optional) sees the input, every output and the :pre / :conv values of convolutions.
    Post-processing ops run only with ``postprocess`` (detect; ``conf`` is nms_detect's run threshold).
    ``keep=False`` drops each tensor after its last reader (the graph outputs and the post-processing ops' inputs
    stay), for long calibration loops."""
    env = {graph.input: np.ascontiguousarray(image, F32)}
    if observe:
        observe(graph.input, env[graph.input])
    last = {}
    if not keep:
        for i, op in enumerate(graph.ops):
            if op.kind in POSTPROCESS:
                continue
            for t in op.inputs:
                last[t] = i
        for t in graph.outputs.values():
            last.pop(t, None)
    for i, op in enumerate(graph.ops):
        if op.kind in POSTPROCESS and not postprocess:
            continue
        with np.errstate(over="ignore", invalid="ignore"):   # non-finite activations: calibrate.check_finite
            outs = eval_op(graph, op, [env[t] for t in op.inputs], observe, conf)
        for t, y in zip(op.outputs, outs):
            env[t] = y
            if observe:
                observe(t, y)
        if not keep:
            for t in op.inputs:
                if last.get(t) == i:
                    del env[t]
    return env
