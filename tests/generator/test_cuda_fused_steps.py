"""The cuda backend's steps that run several IR ops in one call (generator/carve/backends/cuda.py): SPPF's chained
max pools (pool_chain: one carve_cu_maxpool2d_chain call): which ops combine, the layouts one call can write, and
the yolo26n program. Running the call against the single ops is tests/cuda/pool_chain_check.h (test_ops, test_f16);
a whole package against the xnnpack one, tests/cuda/cuda_vs_xnnpack.py."""

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
from carve.backends.cuda import _cu_maxpool, pool_chain  # noqa: E402
from carve.backends.lowering import Lowering  # noqa: E402
from carve.ir import GraphBuilder  # noqa: E402
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
    return g, be.lower(g, plan_memory(g, be.regions(g)))


def test_yolo26n_sppf_is_one_launch(yolo26n_program):
    _, program = yolo26n_program
    steps = [st for lay in program["layers"] for st in lay["steps"]]
    assert [st.macro for st in steps if "maxpool" in st.macro] == ["cu_maxpool_chain"]
    chain = next(st for st in steps if st.macro == "cu_maxpool_chain")
    assert (chain.n, chain.k, chain.c, chain.y_step) == (3, 5, 128, 128) and chain.name.startswith("model.9.")

