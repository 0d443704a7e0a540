"""The cuda backend's lanes (generator/carve/backends/cuda_lanes.py) and the memory plan's concurrent regions
(planner.Region), generator side: which ops become lanes, that the plan keeps the lanes' memory apart (and that
without the region it would not), the lanes' scratch slices and the rendered fork / join. Running them (the graph
replayed with the lanes' nodes interleaved) is tests/cuda/cuda_vs_xnnpack.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

from carve import compiler  # noqa: E402
from carve.backends import cuda_lanes, get_backend  # noqa: E402
from carve.backends.cuda import device_scratch_bytes, lanes_scratch_bytes  # noqa: E402
from carve.manifest import load_manifest  # noqa: E402
from carve.planner import Region, plan_memory  # noqa: E402

pytest.importorskip("torch")

MANIFEST = REPO / "manifests" / "yolo26n.yaml"
IMGSZ = 96


@pytest.fixture(scope="module")
def graph(irsim_yolo26n_pt):
    manifest = load_manifest(str(MANIFEST))
    _, g = compiler._optimized_graph(manifest, str(irsim_yolo26n_pt), IMGSZ, compiler.head_options(manifest, {}),
                                     lambda *a: None)
    return g


def _touched(graph, plan, ops) -> set:
    return {plan.views[t].storage for i in ops for t in (*graph.ops[i].inputs, *graph.ops[i].outputs)}


def test_head_region_is_the_detect_branches(graph):
    region = cuda_lanes.head_region(graph)
    assert region is not None
    post = [i for i, op in enumerate(graph.ops) if op.kind == "e2e_detect"]
    assert region.hi == post[0] and graph.ops[region.lo].layer == graph.ops[post[0]].layer
    # one lane per branch of each level: cv2 (box, 3 convs) and cv3 (classes, 5 convs), each lane a chain
    assert sorted(len(lane) for lane in region.lanes) == [3, 3, 3, 5, 5, 5]
    for lane in region.lanes:  # model.23.one2one_cv3.1.0.0 ...: one branch (cv2 / cv3) of one level per lane
        assert len({".".join(graph.ops[i].name.split(".")[:4]) for i in lane}) == 1
        for a, b in zip(lane, lane[1:]):  # each op reads the one before it
            assert graph.ops[a].outputs[0] in graph.ops[b].inputs
    assert sorted(i for lane in region.lanes for i in lane) == list(range(region.lo, region.hi))


def test_branch_regions_are_the_c3k_forks(graph):
    """Each C3k (yolo26n: layers 6, 8, 13, 16, 19) forks its input into cv1 -> bottlenecks and cv2 and joins them in
    its concat: a region of 2 lanes ending right before that concat, cv2 alone in lane 1; no other concat qualifies
    (C3k2's own split, SPPF, C2PSA: one branch is views only or they share their ops)."""
    head = cuda_lanes.head_region(graph)
    found = cuda_lanes.branch_regions(graph, graph.ops[head.lo].layer)
    assert [graph.ops[r.lo].layer for r in found] == [6, 8, 13, 16, 19]
    for r in found:
        join = graph.ops[r.hi + 1]
        assert join.kind == "concat" and join.name.endswith(".m.0.cat")
        assert [len(lane) for lane in r.lanes] == [5, 1]
        cv2 = graph.ops[r.lanes[1][0]]
        assert cv2.name.endswith(".m.0.cv2") and cv2.inputs == graph.ops[r.lanes[0][0]].inputs
        assert sorted(i for lane in r.lanes for i in lane) == list(range(r.lo, r.hi + 1))
    assert cuda_lanes.regions(graph) == tuple(found) + (head,)
    # and the plan keeps each C3k's two lanes apart: what both touch (the input, the concat cv2 writes its slot of)
    # lives over the whole region, and nothing only lane 0 touches (the bottlenecks' intermediates) shares memory
    # with what lane 1 touches
    plan = plan_memory(graph, cuda_lanes.regions(graph))
    for r in found:
        a, b = (_touched(graph, plan, lane) for lane in r.lanes)
        assert a & b and all(plan.storages[n].first <= r.lo and plan.storages[n].last >= r.hi for n in a & b)
        assert a - b
        for n in a - b:
            for m in b:
                sa, sb = plan.storages[n], plan.storages[m]
                assert sa.offset + sa.floats * 4 <= sb.offset or sb.offset + sb.floats * 4 <= sa.offset, (n, m)


def test_plan_keeps_lanes_apart(graph):
    region = cuda_lanes.head_region(graph)
    plan, serial = plan_memory(graph, (region,)), plan_memory(graph)
    assert plan.regions == (region,) and serial.regions == ()

    def spans(p, names):
        return [(p.storages[n].offset, p.storages[n].offset + p.storages[n].floats * 4, n) for n in names]

    def clashes(p) -> list:
        out = []
        per_lane = [_touched(graph, p, lane) for lane in region.lanes]
        for a in range(len(per_lane)):
            for b in range(a + 1, len(per_lane)):
                for lo, hi, n in spans(p, per_lane[a] - per_lane[b]):
                    out += [(n, m) for lo2, hi2, m in spans(p, per_lane[b] - per_lane[a]) if lo < hi2 and lo2 < hi]
        return out

    # planned op by op, the head's branches reuse each other's memory (what the region prevents) ...
    assert clashes(serial)
    # ... with the region no two lanes' storages overlap, while a lane still reuses its own in op order
    assert clashes(plan) == []
    lane_of = {n: st.lane for n, st in plan.storages.items() if st.lane is not None}
    assert {k for _, k in lane_of.values()} == set(range(len(region.lanes)))


def test_program_lanes_and_scratch(graph):
    be = get_backend("cuda")
    region = cuda_lanes.head_region(graph)
    program = be.lower(graph, plan_memory(graph, be.regions(graph)))
    head = next(lay for lay in program["layers"] if lay["index"] == graph.ops[region.lo].layer)
    assert [list(part) for part in head["parts"]] == [["lanes"], ["steps"]]
    head_lanes = head["parts"][0]["lanes"]
    assert program["lanes"] == len(head_lanes) == len(region.lanes) == 6
    assert [st.lane for lane in head_lanes for st in lane["steps"]] == \
        [lane["index"] for lane in head_lanes for _ in lane["steps"]]
    assert [st.macro for st in head["parts"][1]["steps"]] == ["cu_e2e"]
    # the C3k layers' lanes: 2 each, cv2 alone in lane 1
    c3k = [lay for lay in program["layers"] if lay is not head and lay.get("parts")]
    assert [lay["index"] for lay in c3k] == [6, 8, 13, 16, 19]
    for lay in c3k:
        assert [list(part) for part in lay["parts"]] == [["steps"], ["lanes"], ["steps"]]
        lanes = lay["parts"][1]["lanes"]
        assert [[st.name.split(".", 2)[2] for st in lane["steps"]] for lane in lanes][1] == ["m.0.cv2"]
        assert all(st.lane == -1 for k in (0, 2) for st in lay["parts"][k]["steps"])
    others = [st for lay in program["layers"] if lay is not head and lay not in c3k for st in lay["steps"]]
    assert others and all(st.lane == -1 for st in others)
    # the box branches' 3x3 convs need im2col scratch, the class branches' depthwise / 1x1 convs none: a slice per
    # lane of its own need, side by side in the device scratch
    assert [program["conv_lanes"][st.index] for st in others if st.macro == "cu_conv"] == \
        [-1] * sum(st.macro == "cu_conv" for st in others)
    box = {lane["index"] for lane in head_lanes if "cv2" in lane["what"]}
    assert len(box) == 3
    total = lanes_scratch_bytes(program)
    head_convs = {st.index for lane in head_lanes for st in lane["steps"] if st.macro == "cu_conv"}
    per_box = lanes_scratch_bytes(dict(program, conv_lanes=[k if k in box and i in head_convs else -1
                                                            for i, k in enumerate(program["conv_lanes"])]))
    # the class lanes' slices are empty but where a C3k's lane 0 (3x3 bottlenecks: im2col) needs more
    assert total >= per_box > 0 and total % 256 == 0
    assert device_scratch_bytes(program, "detect", 80, IMGSZ, IMGSZ, 64, 64) >= total
    # a plan made without the regions gets no lanes (nothing keeps their memory apart)
    plain = be.lower(graph, plan_memory(graph))
    assert plain["lanes"] == 0 and not any(lay.get("parts") for lay in plain["layers"])


def test_rendered_fork_and_join(irsim_yolo26n_pt):
    files = compiler.compile_model(str(MANIFEST), "cuda", str(irsim_yolo26n_pt), IMGSZ).files
    cu = files["yolo26n.cu"].decode()
    assert "#define LANES 6" in cu
    body = cu[cu.index("static carve_status layer_23_detect("):]
    body = body[:body.index("\n}\n")]
    assert body.index("TRY(lanes_fork(m, 6));") < body.index("&m->lanes[5].cu") \
        < body.index("TRY(lanes_join(m, 6));") < body.index("carve_cu_e2e_postprocess_task(&m->cu,")
    c3k = cu[cu.index("static carve_status layer_13_c3k2("):]
    c3k = c3k[:c3k.index("\n}\n")]
    assert c3k.index("TRY(lanes_fork(m, 2));") < c3k.index("&m->lanes[1].cu") < c3k.index("TRY(lanes_join(m, 2));")
    assert "&m->lanes[" not in cu[:cu.index("static carve_status layer_06_c3k2(")]
    assert "serial_head" in files["yolo26n.h"].decode()

