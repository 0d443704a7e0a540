"""Graph passes: pure functions Graph -> Graph.

* ``fold_bn``: BatchNorm folded into the conv weight and bias, in float32
  exactly as PyTorch's ``fuse_conv_bn_weights`` (bit-identical weights).
* ``fuse_residual``: ``add(x, conv(...))`` becomes the conv's epilogue
  (``y = act(conv) + x``) when the conv output has no other reader.
* ``prune_weights``: drops weights no op references.
"""

from __future__ import annotations

import numpy as np

from .ir import BnFold, Graph, validate


def fold_bn(graph: Graph) -> Graph:
    """W' = W * (gamma * rsqrt(var + eps)); b' = (b - mean) * rsqrt(var + eps) * gamma + beta.

    Computed in float32 in the same order as PyTorch's ``fuse_conv_bn_weights`` (which Ultralytics' ``fuse()``
    calls), so the folded weights are bit-identical to those of the fused Ultralytics model.
    """
    f32 = np.float32
    weights = dict(graph.weights)
    folds = dict(graph.folds)
    ops = []
    for op in graph.ops:
        if op.kind != "conv2d" or "bn_gamma" not in op.params:
            ops.append(op)
            continue
        p = op.params
        gamma, beta = graph.weights[p["bn_gamma"]].astype(f32), graph.weights[p["bn_beta"]].astype(f32)
        mean, var = graph.weights[p["bn_mean"]].astype(f32), graph.weights[p["bn_var"]].astype(f32)
        eps = f32(op.attrs["bn_eps"])
        w0 = graph.weights[p["weight"]].astype(f32)
        b0 = graph.weights[p["bias"]].astype(f32) if "bias" in p else None
        w, b = fold_arrays(w0, gamma, beta, mean, var, b0, eps)
        wn, bn = f"{op.name}.weight:folded", f"{op.name}.bias:folded"
        weights[wn] = w
        weights[bn] = b
        folds[wn] = BnFold(weight=w0, gamma=gamma, beta=beta, mean=mean, var=var, bias=b0, eps=eps, weight_name=wn,
                           bias_name=bn, sources=tuple(p[k] for k in ("weight", "bias", "bn_gamma", "bn_beta",
                                                                     "bn_mean", "bn_var") if k in p))
        attrs = {k: v for k, v in op.attrs.items() if k != "bn_eps"}
        ops.append(op.replace(params={"weight": wn, "bias": bn}, attrs=attrs))
    return prune_weights(graph.replace(ops=tuple(ops), weights=weights, folds=folds))


def fold_arrays(w, gamma, beta, mean, var, bias, eps):
    """The fold of fold_bn on float32 arrays: (W', b'). Each operation is one float32 operation of numpy, correctly
    rounded, in this order (runtime/carve_weights.c's carve_weights_expand does the same ones for f16 packages):
    r = 1 / sqrt(var + eps); W' = W * (gamma * r); b' = ((b - mean) * r) * gamma + beta, b = 0 without a bias."""
    f32 = np.float32
    rsqrt = f32(1) / np.sqrt(var + eps)       # torch.rsqrt on CPU: 1 / sqrt
    w = w * (gamma * rsqrt)[:, None, None, None]
    b = bias if bias is not None else np.zeros_like(mean)
    b = (b - mean) * rsqrt * gamma + beta
    return w.astype(f32), b.astype(f32)


def fuse_residual(graph: Graph) -> Graph:
    """Fold each ``add`` into the epilogue of the conv producing one of its inputs."""
    ops = list(graph.ops)
    tensors = dict(graph.tensors)
    layer_outputs = {layer.output for layer in graph.layers}
    changed = True
    while changed:
        changed = False
        producer = {t: i for i, op in enumerate(ops) for t in op.outputs}
        readers: dict = {}
        for op in ops:
            for t in op.inputs:
                readers[t] = readers.get(t, 0) + 1
        for i, op in enumerate(ops):
            if op.kind != "add":
                continue
            # prefer the most recently produced operand (the branch), the other is the residual
            cands = sorted(op.inputs, key=lambda t: producer.get(t, -1), reverse=True)
            for conv_out in cands:
                j = producer.get(conv_out)
                if j is None:
                    continue
                conv = ops[j]
                if (conv.kind != "conv2d" or len(conv.inputs) != 1 or readers.get(conv_out) != 1
                        or conv_out in layer_outputs or conv_out in graph.outputs.values()):
                    continue
                residual = op.inputs[1] if op.inputs[0] == conv_out else op.inputs[0]
                if residual == conv_out or producer.get(residual, -1) > j:
                    continue  # the residual must exist when the conv runs
                fused = conv.replace(inputs=(conv.inputs[0], residual), outputs=op.outputs,
                                     source=conv.source + " + residual")
                del tensors[conv_out]
                ops[j] = fused
                del ops[i]
                changed = True
                break
            if changed:
                break
    g = graph.replace(ops=tuple(ops), tensors=tensors)
    validate(g)
    return g


def prune_weights(graph: Graph) -> Graph:
    used = {w for op in graph.ops for w in op.params.values()}
    return graph.replace(weights={k: v for k, v in graph.weights.items() if k in used})


def optimize(graph: Graph) -> Graph:
    """The default pipeline of graph passes, in order."""
    return fuse_residual(fold_bn(graph))
