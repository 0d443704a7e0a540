"""Graph passes (carve.passes) on tiny graphs built with ir.GraphBuilder.

* fold_bn: the folded conv equals conv -> BatchNorm computed by a plain numpy
  reference (3x3 conv, depthwise 3x3/2, a conv with its own bias; each with
  its own eps taken from the op's attrs); BN parameters are gone afterwards.
* fuse_residual: an add whose conv operand has no other reader becomes the
  conv's epilogue (same values); it is kept when the conv output is read
  elsewhere, is a layer output or a graph output.
* prune_weights: unreferenced weights are dropped, referenced ones kept.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "generator"))
sys.path.insert(0, str(HERE))

import irsim  # noqa: E402
from carve import ir, passes  # noqa: E402

F32 = np.float32


def _conv_bn(gb, rng, name, x, cout, k=3, s=1, groups=1, eps=1e-3, bias=False, act="silu", layer=0):
    """A conv2d op with BN parameters, as the YOLO26 frontend builds one (random weights and stats)."""
    cin = gb.shape(x)[2]
    w = {f"{name}.weight": rng.standard_normal((cout, cin // groups, k, k)) * 0.5,
         f"{name}.bn.weight": rng.uniform(0.5, 2.0, cout),
         f"{name}.bn.bias": rng.standard_normal(cout),
         f"{name}.bn.running_mean": rng.standard_normal(cout),
         # small variances: eps matters, so using the wrong eps shows
         f"{name}.bn.running_var": rng.uniform(1e-4, 3e-3, cout)}
    params = dict(weight=f"{name}.weight", bn_gamma=f"{name}.bn.weight", bn_beta=f"{name}.bn.bias",
                  bn_mean=f"{name}.bn.running_mean", bn_var=f"{name}.bn.running_var")
    if bias:
        w[f"{name}.bias"] = rng.standard_normal(cout)
        params["bias"] = f"{name}.bias"
    gb.weights.update({key: v.astype(F32) for key, v in w.items()})
    attrs = dict(kernel=(k, k), stride=s, pad=k // 2, groups=groups, cin=cin, cout=cout, act=act, bn_eps=eps)
    return gb.add("conv2d", name, [x], layer, attrs, params)[0]


def _conv_bn_reference(graph_before, op_name, x):
    """conv (+ bias) then BatchNorm (then the op's activation), straight from the unfolded weights."""
    op = next(o for o in graph_before.ops if o.name == op_name)
    W = graph_before.weights
    p, a = op.params, op.attrs
    y = irsim.conv2d(x, W[p["weight"]], W[p["bias"]] if "bias" in p else None, a["stride"], a["pad"], a["groups"])
    y = y.astype(np.float64)
    y = (y - W[p["bn_mean"]]) / np.sqrt(W[p["bn_var"]].astype(np.float64) + a["bn_eps"]) * W[p["bn_gamma"]] \
        + W[p["bn_beta"]]
    return irsim.silu(y) if a["act"] == "silu" else y


@pytest.fixture(scope="module")
def bn_graph():
    rng = np.random.default_rng(0)
    gb = ir.GraphBuilder("bn", (9, 11, 5))
    a = _conv_bn(gb, rng, "full3x3", gb.input, 6, k=3, eps=1e-3, act="none")
    b = _conv_bn(gb, rng, "dw3x3s2", a, 6, k=3, s=2, groups=6, eps=1e-5, act="silu")
    c = _conv_bn(gb, rng, "biased1x1", b, 7, k=1, eps=3e-4, bias=True, act="none")
    gb.layers.append(ir.Layer(0, "X", c, (-1,)))
    return gb.build({"output0": c}, {})


@pytest.mark.parametrize("name", ["full3x3", "dw3x3s2", "biased1x1"])
def test_fold_bn_matches_conv_then_batchnorm(bn_graph, name):
    graph = bn_graph
    op = next(o for o in graph.ops if o.name == name)
    x = np.random.default_rng(7).standard_normal(graph.tensors[op.inputs[0]].shape).astype(F32)
    ref = _conv_bn_reference(graph, name, x)
    folded = passes.fold_bn(graph)
    fop = next(o for o in folded.ops if o.name == name)
    ours = irsim.eval_op(folded, fop, [x])[0]
    err = np.abs(ours - ref).max() / np.abs(ref).max()
    assert err < 1e-5, f"{name}: folded conv differs from conv->BN by {err:.2e} (relative)"


def test_fold_bn_removes_batchnorm(bn_graph):
    graph = bn_graph
    folded = passes.fold_bn(graph)
    for op in folded.ops:
        assert set(op.params) == {"weight", "bias"}, op.params
        assert "bn_eps" not in op.attrs
        assert op.params["weight"] in folded.weights and op.params["bias"] in folded.weights
        assert folded.weights[op.params["weight"]].dtype == np.float32
    assert not any(".bn." in k for k in folded.weights), "BN tensors should be pruned"
    assert [op.name for op in folded.ops] == [op.name for op in graph.ops]
    ir.validate(folded)


def test_fold_bn_uses_each_ops_eps(bn_graph):
    """Changing one op's bn_eps changes that op's folded weights (eps is read per op)."""
    graph = bn_graph
    ops = tuple(o.replace(attrs=dict(o.attrs, bn_eps=o.attrs["bn_eps"] * 10)) if o.name == "dw3x3s2" else o
                for o in graph.ops)
    a, b = passes.fold_bn(graph), passes.fold_bn(graph.replace(ops=ops))
    for op in a.ops:
        same = np.array_equal(a.weights[op.params["weight"]], b.weights[op.params["weight"]])
        assert same == (op.name != "dw3x3s2"), op.name


# ---------------------------------------------------------------------------
# fuse_residual
# ---------------------------------------------------------------------------

def _conv(gb, rng, name, x, cout, layer=0, act="silu"):
    cin = gb.shape(x)[2]
    gb.weights[f"{name}.w"] = rng.standard_normal((cout, cin, 3, 3)).astype(F32) * 0.3
    gb.weights[f"{name}.b"] = rng.standard_normal(cout).astype(F32)
    return gb.add("conv2d", name, [x], layer, dict(kernel=(3, 3), stride=1, pad=1, groups=1, cin=cin, cout=cout,
                                                   act=act), dict(weight=f"{name}.w", bias=f"{name}.b"))[0]


def _residual_graph(extra_reader=False, conv_is_layer_output=False, conv_is_graph_output=False):
    """x -> c1 -> c2; s = add(c1, c2) -> c3. Variants give c2 another reader or make it an output."""
    rng = np.random.default_rng(1)
    gb = ir.GraphBuilder("res", (6, 5, 4))
    c1 = _conv(gb, rng, "c1", gb.input, 4, layer=0)
    c2 = _conv(gb, rng, "c2", c1, 4, layer=1)
    s = gb.add("add", "s", [c1, c2], 1)[0]
    outs = {"output0": _conv(gb, rng, "c3", s, 4, layer=2)}
    if extra_reader:
        outs["output1"] = _conv(gb, rng, "other", c2, 4, layer=2)
    if conv_is_graph_output:
        outs["output1"] = c2
    gb.layers += [ir.Layer(0, "X", c1, (-1,)),
                  ir.Layer(1, "Y", c2 if conv_is_layer_output else s, (0,)),
                  ir.Layer(2, "Z", outs["output0"], (1,))]
    graph = gb.build(outs, {})
    ir.validate(graph)
    return graph, rng.standard_normal((6, 5, 4)).astype(F32)


def test_fuse_residual_folds_the_add_into_the_conv():
    graph, image = _residual_graph()
    fused = passes.fuse_residual(graph)
    kinds = [op.kind for op in fused.ops]
    assert "add" not in kinds and len(fused.ops) == len(graph.ops) - 1
    c2 = next(op for op in fused.ops if op.name == "c2")
    assert c2.inputs == ("c1", "c1") and c2.outputs == ("s",), c2   # y = act(conv(c1)) + c1, written to s
    assert "c2" not in fused.tensors
    ref, ours = irsim.run_graph(graph, image), irsim.run_graph(fused, image)
    for t in ("s", "c3"):
        np.testing.assert_allclose(ours[t], ref[t], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("variant", ["extra_reader", "conv_is_layer_output", "conv_is_graph_output"])
def test_fuse_residual_keeps_the_add_when_the_conv_output_is_needed(variant):
    graph, _ = _residual_graph(**{variant: True})
    fused = passes.fuse_residual(graph)
    # c1 (the other operand) is read by c2 as well, so no conv can absorb the add
    assert [op.kind for op in fused.ops] == [op.kind for op in graph.ops]
    assert fused.ops == graph.ops


def _two_branch_graph(c2_read_elsewhere):
    """c1 = conv(x); c2 = conv(x); s = add(c2, c1); optionally c2 also read by another conv."""
    rng = np.random.default_rng(2)
    gb = ir.GraphBuilder("order", (4, 4, 3))
    c1 = _conv(gb, rng, "c1", gb.input, 3)
    c2 = _conv(gb, rng, "c2", gb.input, 3)
    s = gb.add("add", "s", [c2, c1], 0)[0]
    outs = {"output0": s}
    if c2_read_elsewhere:
        outs["output1"] = _conv(gb, rng, "d", c2, 3)
    gb.layers.append(ir.Layer(0, "X", s, (-1,)))
    graph = gb.build(outs, {})
    ir.validate(graph)
    return graph, rng.standard_normal((4, 4, 3)).astype(F32)


def test_fuse_residual_prefers_the_later_conv_as_the_branch():
    """Both operands are single-reader convs: the later one (c2) absorbs the add and the earlier
    one (c1, already computed when c2 runs) becomes its residual."""
    graph, image = _two_branch_graph(False)
    fused = passes.fuse_residual(graph)
    c2 = next(op for op in fused.ops if op.name == "c2")
    assert c2.inputs == ("images", "c1") and c2.outputs == ("s",)
    assert "add" not in [op.kind for op in fused.ops]
    np.testing.assert_allclose(irsim.run_graph(fused, image)["s"], irsim.run_graph(graph, image)["s"],
                               rtol=1e-6, atol=1e-6)


def test_fuse_residual_never_reads_a_residual_before_it_exists():
    """c2 is read elsewhere, so only c1 could absorb the add; but its residual c2 is computed after
    c1 runs, so the add must stay."""
    graph, _ = _two_branch_graph(True)
    fused = passes.fuse_residual(graph)
    assert fused.ops == graph.ops


# ---------------------------------------------------------------------------
# prune_weights
# ---------------------------------------------------------------------------

def test_prune_weights_drops_only_unreferenced_weights(bn_graph):
    graph = bn_graph
    stale = {"stale.a": np.zeros(3, F32), "stale.b": np.ones((2, 2), F32)}
    pruned = passes.prune_weights(graph.replace(weights={**graph.weights, **stale}))
    used = {w for op in graph.ops for w in op.params.values()}
    assert set(pruned.weights) == used
    for k in used:
        assert pruned.weights[k] is graph.weights[k]
