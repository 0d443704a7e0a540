"""The cuda backend's steps that run several IR ops in one call (generator/carve/backends/cuda.py): SPPF's chained
max pools (pool_chain: one carve_cu_maxpool2d_chain call), a depthwise convolution with the 1x1 after it
(dwpw_partner: one carve_cu_conv2d_dwpw call, its own tactic slot) and an attention with the PSA block's pe
convolution after it (attention_pe_partner: one carve_cu_attention_pe call): which ops combine, the layouts one call
can write, and the yolo26n program. Running the calls against the single ops is tests/cuda/pool_chain_check.h
(test_ops, test_f16), test_igemm.cu (test_dwpw) and test_ops.cu / test_f16.cu (test_attention_pe); a whole package
against the xnnpack one, tests/cuda/cuda_vs_xnnpack.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

from carve import compiler  # noqa: E402
from carve.backends import get_backend  # noqa: E402
from carve.backends import cuda_tactics  # noqa: E402
from carve.backends.cuda import _cu_maxpool, attention_pe_partner, dwpw_partner, pool_chain  # noqa: E402
from carve.backends.lowering import Lowering  # noqa: E402
from carve.ir import GraphBuilder, Layer  # noqa: E402
from carve.manifest import load_manifest  # noqa: E402
from carve.planner import plan_memory  # noqa: E402

POOL5 = dict(kernel=5, stride=1, pad=2)


def _steps(graph) -> list:
    """(macro, fields) of each max pool's steps, in order."""
    lw = Lowering(graph, plan_memory(graph), get_backend("cuda"))
    return [(st.macro, st) for op in graph.ops if op.kind == "maxpool2d" for st in _cu_maxpool(lw, op)]


def _sppf(kernels=(5, 5, 5), concat=True):
    """input (12,12,16) -> pools in a row (SPPF's when kernels are all 5), their outputs concatenated with the input
    (or the last one the output)."""
    gb = GraphBuilder("t", (12, 12, 16))
    ys = [gb.input]
    for j, k in enumerate(kernels):
        ys.append(gb.add("maxpool2d", f"m{j}", [ys[-1]], 0, dict(kernel=k, stride=1, pad=k // 2))[0])
    out = gb.add("concat", "cat", ys, 1)[0] if concat else ys[-1]
    return gb.build({"output0": out}, {})


def test_sppf_pools_are_one_call():
    steps = _steps(_sppf())
    assert [m for m, _ in steps] == ["cu_maxpool_chain", "view", "view"]
    chain = steps[0][1]
    assert (chain.n, chain.k, chain.c, chain.y_step, chain.x_stride, chain.y_stride) == (3, 5, 16, 16, 16, 64)
    assert "3 chained" in chain.source and "m0's chain of 3 pools" in steps[1][1].what


def test_pools_that_do_not_chain_run_one_by_one():
    g = _sppf(concat=False)  # the outputs in storages of their own: one call could not write them in order
    assert len(pool_chain(g, g.ops[0])) == 3
    assert [m for m, _ in _steps(g)] == ["cu_maxpool"] * 3
    g = _sppf(kernels=(5, 3, 5))  # another window breaks the chain: m0 alone, m1, m2 alone
    assert [len(pool_chain(g, op)) for op in g.ops if op.kind == "maxpool2d"] == [1, 1, 1]
    assert [m for m, _ in _steps(g)] == ["cu_maxpool"] * 3
    gb = GraphBuilder("t", (12, 12, 16))  # not consecutive ops: m1 pools m0's output after another op
    m0 = gb.add("maxpool2d", "m0", [gb.input], 0, POOL5)[0]
    other = gb.add("maxpool2d", "other", [gb.input], 0, dict(kernel=3, stride=1, pad=1))[0]
    m1 = gb.add("maxpool2d", "m1", [m0], 0, POOL5)[0]
    g = gb.build({"output0": gb.add("concat", "cat", [m0, other, m1], 1)[0]}, {})
    assert [len(pool_chain(g, op)) for op in g.ops if op.kind == "maxpool2d"] == [1, 1, 1]
    assert [m for m, _ in _steps(g)] == ["cu_maxpool"] * 3
    gb = GraphBuilder("t", (12, 12, 16))  # stride 2: the size changes
    a = gb.add("maxpool2d", "a", [gb.input], 0, dict(kernel=3, stride=2, pad=1))[0]
    b = gb.add("maxpool2d", "b", [a], 0, dict(kernel=3, stride=2, pad=1))[0]
    g = gb.build({"output0": b}, {})
    assert [len(pool_chain(g, op)) for op in g.ops if op.kind == "maxpool2d"] == [1, 1]

@pytest.fixture(scope="module")
def yolo26n_program(irsim_yolo26n_pt):
    manifest = load_manifest(str(REPO / "manifests" / "yolo26n.yaml"))
    _, g = compiler._optimized_graph(manifest, str(irsim_yolo26n_pt), 96, compiler.head_options(manifest, {}),
                                     lambda *a: None)
    be = get_backend("cuda")
    return g, be.lower(g, plan_memory(g, be.regions(g), be.reads(g)))


def test_yolo26n_sppf_is_one_launch(yolo26n_program):
    _, program = yolo26n_program
    steps = [st for lay in program["layers"] for st in lay["steps"]]
    assert [st.macro for st in steps if "maxpool" in st.macro] == ["cu_maxpool_chain"]
    chain = next(st for st in steps if st.macro == "cu_maxpool_chain")
    assert (chain.n, chain.k, chain.c, chain.y_step) == (3, 5, 128, 128) and chain.name.startswith("model.9.")


def test_yolo26n_class_branches_are_pairs(yolo26n_program):
    g, program = yolo26n_program
    steps = [st for lay in program["layers"] for st in lay["steps"]]
    pairs = [st for st in steps if st.macro == "cu_conv_pair"]
    # two per level of the one-to-one head's class branches (cv3: DWConv -> Conv, twice), each with its partner a
    # comment; the attention's depthwise pe (a residual) goes with its attention (below)
    assert [st.name.split(".", 2)[2] for st in pairs] == [f"one2one_cv3.{lv}.{j}.0" for lv in range(3) for j in range(2)]
    convs = program["convs"]
    for st in pairs:
        dw, pw = convs[st.index], convs[st.pw_index]
        assert st.pw_index == st.index + 1 and dw["pw"] == st.pw_index and dw["groups"] == dw["cin"] > 1
        assert (pw["kh"], pw["stride"], pw["groups"], pw["cin"], pw["in_stride"]) == (1, 1, 1, dw["cout"],
                                                                                      dw["out_stride"])
        assert program["conv_lanes"][st.index] == program["conv_lanes"][st.pw_index] == st.lane >= 0
        partner = next(s for s in steps if s.name == pw["name"])
        assert partner.macro == "view" and st.name in partner.what
    assert sum(st.macro == "cu_conv" and convs[st.index]["groups"] > 1 for st in steps) == 0  # (the pe convs: below)
    # the fused kernel reads the depthwise input while it writes the 1x1's output: never the same memory
    plan = plan_memory(g, get_backend("cuda").regions(g), get_backend("cuda").reads(g))
    for st in pairs:
        dw = next(op for op in g.ops if op.name == convs[st.index]["name"])
        x, y = (plan.storages[plan.views[t].storage] for t in (dw.inputs[0], g.ops[g.ops.index(dw) + 1].outputs[0]))
        assert x.offset + x.floats * 4 <= y.offset or y.offset + y.floats * 4 <= x.offset
    # tactic slots: the pairs' own (distinct shapes: 6), the groups-1 convs' as before, the other depthwise none
    slots = cuda_tactics.assign(convs, lambda c: c["cin"] <= 4)
    pair_slots = {convs[st.index]["slot"] for st in pairs}
    assert len(pair_slots) == 6 and 0 not in pair_slots
    assert all(c["slot"] == 0 for c in convs if c["groups"] > 1 and "pw" not in c)
    assert slots == len({c["slot"] for c in convs} - {0})


def _dw_graph(readers=1, layer_output=False, residual=False, pw_stride=1):
    """input (10,10,16) -> depthwise 3x3 (+ input as residual) -> 1x1 16 -> 24 (stride pw_stride); `readers` 2: a
    max pool reads the depthwise output too; `layer_output`: the depthwise output is layer 0's."""
    gb = GraphBuilder("t", (10, 10, 16))
    dw = gb.add("conv2d", "dw", [gb.input, gb.input] if residual else [gb.input], 0,
                dict(kernel=(3, 3), stride=1, pad=1, groups=16, cin=16, cout=16, act="silu"))[0]
    pw = gb.add("conv2d", "pw", [dw], 1, dict(kernel=(1, 1), stride=pw_stride, pad=0, groups=1, cin=16, cout=24,
                                              act="silu"))[0]
    outs = {"output0": pw}
    if readers > 1:
        outs["output1"] = gb.add("maxpool2d", "mp", [dw], 1, POOL5)[0]
    if layer_output:
        gb.layers.append(Layer(index=0, type="DWConv", output=dw, sources=(-1,)))
    return gb.build(outs, {})


def test_which_depthwise_convs_pair():
    g = _dw_graph()
    assert dwpw_partner(g, g.ops[0]) is g.ops[1] and dwpw_partner(g, g.ops[1]) is None
    for g in (_dw_graph(readers=2), _dw_graph(layer_output=True), _dw_graph(residual=True), _dw_graph(pw_stride=2)):
        assert dwpw_partner(g, g.ops[0]) is None


def test_pairs_need_the_plan_to_keep_their_input(yolo26n_program):
    """Planned without the backend's reads, a pair whose 1x1 output may take its depthwise input's memory (that
    input dies at the depthwise conv) runs as two steps; with them every pair forms."""
    g, _ = yolo26n_program
    be = get_backend("cuda")
    reads = be.reads(g)
    assert len(reads) == 8 and all(g.ops[i - 1].inputs[0] == t for t, i in reads.items())
    pair_reads = {t: i for t, i in reads.items() if g.ops[i - 1].kind == "conv2d"}
    plain = be.lower(g, plan_memory(g, be.regions(g)))
    formed = sum(st.macro == "cu_conv_pair" for lay in plain["layers"] for st in lay["steps"])
    plan = plan_memory(g, be.regions(g))
    early = [t for t, i in pair_reads.items() if plan.storages[plan.views[t].storage].last < i]
    assert len(pair_reads) == 6 and early and formed == 6 - len(early)


def test_yolo26n_attention_runs_with_its_pe(yolo26n_program):
    """Both PSA attentions (layers 10 and 22) are one carve_cu_attention_pe step each, the pe conv a comment, its
    k_conv descriptor the call's; the plan keeps qkv (read by the fused kernel to the end) apart from the output."""
    g, program = yolo26n_program
    steps = [st for lay in program["layers"] for st in lay["steps"]]
    calls = [st for st in steps if st.macro == "cu_attention_pe"]
    assert [st.name.split(".")[1] for st in calls] == ["10", "22"]
    assert not any(st.macro == "cu_attention" for st in steps)
    plan = plan_memory(g, get_backend("cuda").regions(g), get_backend("cuda").reads(g))
    for st in calls:
        att = next(op for op in g.ops if op.name == st.name)
        pe = g.ops[g.ops.index(att) + 1]
        assert program["convs"][st.index]["name"] == pe.name and program["convs"][st.index]["groups"] == 128
        assert (st.heads, st.key_dim, st.head_dim, st.n) == (2, 32, 64, 9)  # at 96: 3 x 3 pixels
        partner = next(s for s in steps if s.name == pe.name)
        assert partner.macro == "view" and "carve_cu_attention_pe" in partner.what
        x, y = (plan.storages[plan.views[t].storage] for t in (att.inputs[0], pe.outputs[0]))
        assert x.offset + x.floats * 4 <= y.offset or y.offset + y.floats * 4 <= x.offset


def _attn_graph(v_readers=1, o_readers=1, groups=16, kernel=3, swap=False):
    """input (6,5,48) -> attention (2 heads, key_dim 8, head_dim 8) -> pe: a k x k conv (groups 16: depthwise) of v,
    residual o (`swap`: of o, residual v); `v_readers` / `o_readers` 2: a max pool reads v / o too."""
    gb = GraphBuilder("t", (6, 5, 48))
    o, v = gb.add("attention", "attn", [gb.input], 0, dict(heads=2, key_dim=8, head_dim=8, scale=0.5),
                  outputs=["attn.o", "attn.v"])
    pe = gb.add("conv2d", "pe", [o, v] if swap else [v, o], 0,
                dict(kernel=(kernel, kernel), stride=1, pad=kernel // 2, groups=groups, cin=16, cout=16,
                     act="none"))[0]
    outs = {"output0": pe}
    for j, (t, n) in enumerate(((v, v_readers), (o, o_readers))):
        if n > 1:
            outs[f"output{j + 1}"] = gb.add("maxpool2d", f"mp{j}", [t], 0, POOL5)[0]
    return gb.build(outs, {})


def test_which_attentions_take_their_pe():
    for g in (_attn_graph(), _attn_graph(kernel=5)):
        assert attention_pe_partner(g, g.ops[0]) is g.ops[1] and attention_pe_partner(g, g.ops[1]) is None
    for g in (_attn_graph(v_readers=2), _attn_graph(o_readers=2), _attn_graph(groups=1), _attn_graph(swap=True)):
        assert attention_pe_partner(g, g.ops[0]) is None
