"""The xnnpack backend runs a convolution whose weights exceed SLICE_WEIGHT_BYTES as several XNNPACK operators,
one per slice of the output channels, each writing its channels of the same output.

The rule (``xnnpack.conv_slices``): slices of a multiple of 16 channels, as even as that allows, covering every
output channel once, each slice's weights within the limit where 16 channels fit in it; grouped convolutions and
the stem are never split. The lowering: one descriptor per slice with the slice's weights (PyTorch's, sliced, in
XNNPACK's layout) and bias, the same input, the output offset by the slice's first channel with the whole
output's pixel stride; one step runs them in order, then the one SiLU epilogue over all channels. The portable
backend does not split. The shipped demo model at imgsz 64, with the limit lowered so that it splits: no torch
needed (the oracle tests run split packages of every scale against Ultralytics).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.backends import get_backend, xnnpack  # noqa: E402
from carve.compiler import compile_model  # noqa: E402
from carve.planner import plan_memory  # noqa: E402

MANIFEST = str(REPO / "manifests" / "yolo26n-shapes.yaml")
WEIGHTS = str(REPO / "assets" / "yolo26n-shapes.pt")
CONV = dict(kernel=(3, 3), stride=2, pad=1, groups=1, act="silu")


def weight_bytes(attrs, channels):
    return attrs["cin"] * attrs["kernel"][0] * attrs["kernel"][1] * 4 * channels


@pytest.mark.parametrize("cin,cout,k", [(256, 512, 3), (512, 512, 3), (128, 256, 3), (768, 1024, 1), (384, 96, 3),
                                        (1024, 48, 3), (64, 64, 3), (512, 256, 1), (3072, 80, 1)])
def test_the_rule(cin, cout, k):
    attrs = dict(CONV, cin=cin, cout=cout, kernel=(k, k))
    parts = xnnpack.conv_slices(attrs)
    if weight_bytes(attrs, cout) <= xnnpack.SLICE_WEIGHT_BYTES:
        assert parts is None
        return
    if parts is None:  # no split possible: a single 16-channel group is already over the limit
        assert cout <= xnnpack.SLICE_CHANNELS or weight_bytes(attrs, xnnpack.SLICE_CHANNELS) * 2 > weight_bytes(attrs, cout)
        return
    assert parts[0][0] == 0 and parts[-1][1] == cout and len(parts) > 1
    assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
    widths = [c1 - c0 for c0, c1 in parts]
    assert all(w % xnnpack.SLICE_CHANNELS == 0 for w in widths[:-1]) and widths[-1] > 0
    assert max(widths) - min(widths) < max(widths)  # the last one may be shorter, none empty
    if weight_bytes(attrs, xnnpack.SLICE_CHANNELS) <= xnnpack.SLICE_WEIGHT_BYTES:
        assert all(weight_bytes(attrs, w) <= xnnpack.SLICE_WEIGHT_BYTES + weight_bytes(attrs, xnnpack.SLICE_CHANNELS)
                   for w in widths)


def test_never_split():
    big = dict(CONV, cin=512, cout=512)
    assert xnnpack.conv_slices(big) is not None
    assert xnnpack.conv_slices(dict(big, groups=512, cin=512)) is None        # depthwise
    assert xnnpack.conv_slices(dict(big, groups=2)) is None
    assert xnnpack.conv_slices(dict(CONV, cin=3, cout=16)) is None             # the stem


def shifted(expr: str, channels: int) -> str:
    """An arena offset expression ("S_X" or "S_X + k", as lowering.off writes it) moved by `channels` floats."""
    macro, _, k = expr.partition(" + ")
    k = int(k or 0) + channels
    return f"{macro} + {k}" if k else macro


@pytest.fixture(scope="module")
def lowered():
    seen = {}

    def hook(g):
        seen["graph"] = g
        return g

    compile_model(MANIFEST, "xnnpack", WEIGHTS, 64, graph_hook=hook)
    graph = seen["graph"]
    plan = plan_memory(graph)
    mp = pytest.MonkeyPatch()
    mp.setattr(xnnpack, "SLICE_WEIGHT_BYTES", 16 * 1024)   # so that the small demo model splits
    try:
        split = get_backend("xnnpack").lower(graph, plan)
    finally:
        mp.undo()
    whole = get_backend("xnnpack").lower(graph, plan)
    portable = get_backend("portable").lower(graph, plan)
    return graph, split, whole, portable


def test_lowering(lowered):
    graph, split, whole, portable = lowered
    blob = np.frombuffer(split["blob"], dtype="<f4")
    byname = {o.name: o for o in graph.ops}
    n_split = 0
    for lay in split["layers"]:
        for st in lay["steps"]:
            if st["kind"] != "op" or not st.get("slices"):
                continue
            n_split += 1
            op = byname[st["name"]]
            w = graph.weights[op.params["weight"]]
            b = graph.weights[op.params["bias"]]
            assert st["slices"][0]["c0"] == 0 and st["slices"][-1]["c1"] == op.attrs["cout"]
            assert st["index"] == st["slices"][0]["index"]
            assert [s["index"] for s in st["slices"]] == list(range(st["index"], st["index"] + len(st["slices"])))
            first = split["ops"][st["index"]]["fields"]
            for s in st["slices"]:
                d = split["ops"][s["index"]]
                f = d["fields"]
                assert d["kind"] == "CARVE_XNN_CONV" and d["name"] == f"{op.name} [out {s['c0']}:{s['c1']}]"
                assert f["cout"] == s["c1"] - s["c0"] and f["cin"] == op.attrs["cin"]
                assert f["in_off"] == first["in_off"] and f["out_stride"] == first["out_stride"]
                assert f["out_off"] == shifted(first["out_off"], s["c0"])
                want = np.transpose(w[s["c0"]:s["c1"]], (0, 2, 3, 1)).reshape(-1)
                np.testing.assert_array_equal(blob[f["weight_off"]:f["weight_off"] + want.size], want)
                np.testing.assert_array_equal(blob[f["bias_off"]:f["bias_off"] + f["cout"]], b[s["c0"]:s["c1"]])
            # one epilogue over every channel, after all slices
            if op.attrs["act"] == "silu":
                assert st["epilogue"]["channels"] == op.attrs["cout"]
    assert n_split > 0
    # the same program otherwise: the same steps, FLOPs and arena; more descriptors
    assert [[(s["kind"], s["name"], s["flops"]) for s in lay["steps"]] for lay in split["layers"]] == \
        [[(s["kind"], s["name"], s["flops"]) for s in lay["steps"]] for lay in whole["layers"]]
    assert split["arena_bytes"] == whole["arena_bytes"] and split["flops"] == whole["flops"]
    assert len(split["ops"]) > len(whole["ops"])
    # the portable backend never splits
    assert not any(st.get("slices") for lay in portable["layers"] for st in lay["steps"])
