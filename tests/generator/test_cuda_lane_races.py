"""The cuda lanes' happens-before check (generator/carve/backends/cuda_lanes.py), over every order the streams allow.

The emulation's interleaved replay (tests/cuda/cuda_vs_xnnpack.py) runs one other order of the graph's nodes; this
check covers all of them, from the lowered program alone: it walks the parts of every layer as the generated
forward enqueues them (the run's stream, one stream per lane; lanes_fork, lane_wait, lanes_join and lanes_mark as
event records and waits, or options.late_head's), keeps a vector clock per stream, and gives each
step its accesses: the views its op reads and writes in the memory plan, and, for a step that computes, its
context's scratch, cuBLAS workspace and split-K counters (lane k's slices; the run's context, m->cu, overlaps every
lane's). Two forwards run back to back (a lane's work of one against the next one's). Any two accesses from
different streams that overlap, one a write, must be ordered; none may be left.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

from carve import compiler  # noqa: E402
from carve.backends import get_backend  # noqa: E402
from carve.manifest import load_manifest  # noqa: E402
from carve.planner import plan_memory  # noqa: E402

pytest.importorskip("torch")

IMGSZ = 96
VIEWS = ("slice", "concat")  # ops the cuda backend runs as no call (their tensors are views)


def _program(manifest: str, checkpoint, options: dict | None = None):
    m = load_manifest(str(REPO / "manifests" / manifest))
    options = options or {}
    _, g = compiler._optimized_graph(m, str(checkpoint), IMGSZ, compiler.head_options(m, options), lambda *a: None)
    be = get_backend("cuda")
    if options.get("precision") == "fp16":
        from carve.backends.cuda_f16 import BACKEND as be  # noqa: N811 - the fp16 variant of the backend
    plan = plan_memory(g, be.regions(g), be.reads(g))
    program = be.lower(g, plan)
    assert program["lanes"] > 1
    return g, plan, program


def _walk(g, plan, program, late: bool = False, drop_marks: bool = False) -> list:
    """The accesses of two forwards: (stream, vector clock, 'r' / 'w', what, step) in enqueue order."""
    clocks: dict = {}
    events: dict = {}
    out: list = []
    op_of = {op.name: op for op in g.ops}

    def stream(k: int) -> str:
        return "main" if k <= 0 else f"lane{k}"

    def record(event: str, s: str) -> None:
        events[event] = dict(clocks.setdefault(s, {}))

    def wait(s: str, event: str) -> None:
        c = clocks.setdefault(s, {})
        for k, v in events.get(event, {}).items():
            c[k] = max(c.get(k, 0), v)

    def step(st, s: str) -> None:
        c = clocks.setdefault(s, {})
        c[s] = c.get(s, 0) + 1
        at = dict(c)
        op = op_of[st.name]
        if op.kind not in VIEWS:
            out.extend((s, at, "r", plan.views[t], st.name) for t in op.inputs)
            out.extend((s, at, "w", plan.views[t], st.name) for t in op.outputs)
        if st.computes:
            out.append((s, at, "w", ("context", st.lane), st.name))

    for _ in range(2):
        for lay in program["layers"]:
            for part in lay.get("parts") or [dict(steps=lay["steps"])]:
                if "lanes" in part:
                    record("m->lanes_start", "main")
                    for lane in part["lanes"]:
                        for seg in lane["segments"]:
                            if seg["wait"] and not (drop_marks and "head_marks" in seg["wait"]):
                                wait(stream(lane["index"]), "m->lanes_start" if late else seg["wait"])
                            for st in seg["steps"]:
                                step(st, stream(lane["index"]))
                    for k in range(*part["join"]):
                        record(f"done{k}", stream(k))
                        wait("main", f"done{k}")
                elif "mark" in part:
                    if not late:
                        record(f"m->head_marks[{part['mark']}]", "main")
                else:
                    for st in part["steps"]:
                        step(st, stream(st.lane))
    return out


def _overlap(plan, x, y) -> bool:
    if isinstance(x, tuple) or isinstance(y, tuple):  # contexts: the same lane's, or the run's against any
        return isinstance(x, tuple) and isinstance(y, tuple) and (x[1] == y[1] or x[1] < 0 or y[1] < 0)
    if x.storage == y.storage and x.stride == y.stride:
        return x.offset < y.offset + y.c and y.offset < x.offset + x.c
    a, b = plan.storages[x.storage].offset + 4 * x.offset, plan.storages[y.storage].offset + 4 * y.offset
    span_x, span_y = 4 * ((x.h * x.w - 1) * x.stride + x.c), 4 * ((y.h * y.w - 1) * y.stride + y.c)
    return a < b + span_y and b < a + span_x


def races(g, plan, program, **walk) -> list:
    """The unordered pairs of overlapping accesses from different streams, one of them a write."""
    acc = _walk(g, plan, program, **walk)
    found = []
    for a, b in itertools.combinations(acc, 2):
        if a[0] == b[0] or (a[2] == "r" and b[2] == "r"):
            continue
        before = a[1][a[0]] <= b[1].get(a[0], 0) or b[1][b[0]] <= a[1].get(b[0], 0)
        if not before and _overlap(plan, a[3], b[3]):
            found.append((a[4], b[4]))
    return found


def test_detect_lanes_are_ordered(irsim_yolo26n_pt):
    g, plan, program = _program("yolo26n.yaml", irsim_yolo26n_pt)
    assert program["marks"] == [16, 19]
    for late in (False, True):
        assert races(g, plan, program, late=late) == []
    # the check can fail: the P3 / P4 lanes without their marks' waits start before the neck has written layer
    # 16's / 19's outputs (and beside the previous forward's neck)
    assert races(g, plan, program, drop_marks=True)


@pytest.mark.parametrize("options", [{"head": "nms"}, {"precision": "fp16"}, {"batch": 2}],
                         ids=["nms", "fp16", "batch2"])
def test_detect_variants_are_ordered(irsim_yolo26n_pt, options):
    g, plan, program = _program("yolo26n.yaml", irsim_yolo26n_pt, options)
    assert program["marks"] == [16, 19] and races(g, plan, program) == []


def test_segment_and_classify_lanes_are_ordered(seg_cls_checkpoints):
    """yolo26n-seg: ten head chains (the prototypes' among them) on seven lanes, two chains on some; classify: only
    the C3k forks."""
    g, plan, program = _program("yolo26n-seg.yaml", seg_cls_checkpoints["segment"])
    assert any(len(lane["segments"]) > 1 for lay in program["layers"] for part in lay.get("parts", [])
               for lane in part.get("lanes", []))
    assert races(g, plan, program) == [] and races(g, plan, program, late=True) == []
    g, plan, program = _program("yolo26n-cls.yaml", seg_cls_checkpoints["classify"])
    assert program["marks"] == [] and races(g, plan, program) == []
