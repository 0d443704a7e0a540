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


def _level_layer(graph, chain) -> int:
    """The layer whose output a head chain's first op reads (the Detect's `from` of that level)."""
    return next(lay.index for lay in graph.layers if lay.output in graph.ops[chain[0]].inputs)


def test_head_region_is_the_detect_branches(graph):
    """The head's six chains (cv2 box, cv3 classes per level) as lanes of a region that starts right after layer 16
    (the P3 chains read its output): lane 0 is the rest of the neck (layers 17-22) then the longest of the P5
    chains, each other chain a lane of its own."""
    region = cuda_lanes.head_region(graph)
    assert region is not None
    post = [i for i, op in enumerate(graph.ops) if op.kind == "e2e_detect"]
    head = graph.ops[post[0]].layer
    idx, chains, forks = cuda_lanes.head_chains(graph)
    assert region.hi == post[0] == idx[-1] and len(chains) == 6
    assert forks == [_level_layer(graph, c) for c in chains] and sorted(set(forks)) == [16, 19, 22]
    assert graph.ops[region.lo - 1].layer == 16 and graph.ops[region.lo].layer == 17
    neck = [i for i in range(region.lo, idx[0])]
    assert {graph.ops[i].layer for i in neck} == set(range(17, head))
    assert region.lanes[0][:len(neck)] == tuple(neck)
    p5 = region.lanes[0][len(neck):]  # the longest chain of the last fork: the P5 classes (5 ops)
    assert len(p5) == 5 and all(graph.ops[i].name.startswith("model.23.one2one_cv3.2.") for i in p5)
    # one lane per other branch: cv2 (box, 3 convs) and cv3 (classes, 5 convs), each lane a chain
    assert sorted(len(lane) for lane in region.lanes[1:]) == [3, 3, 3, 5, 5]
    for lane in (*region.lanes[1:], p5):  # model.23.one2one_cv3.1.0.0 ...: one branch (cv2 / cv3) of one level
        assert len({".".join(graph.ops[i].name.split(".")[:4]) for i in lane}) == 1
        for a, b in zip(lane, lane[1:]):  # each op reads the one before it
            assert graph.ops[a].outputs[0] in graph.ops[b].inputs
    assert sorted(i for lane in region.lanes for i in lane) == list(range(region.lo, region.hi))


def test_branch_regions_are_the_c3k_forks(graph):
    """Each C3k (yolo26n: layers 6, 8, 13, 16, 19) forks its input into cv1 -> bottlenecks and cv2 and joins them in
    its concat: a region of 2 lanes ending right before that concat, cv2 alone in lane 1; no other concat qualifies
    (C3k2's own split, SPPF, C2PSA: one branch is views only or they share their ops)."""
    head = cuda_lanes.head_region(graph)
    found = cuda_lanes.branch_regions(graph, graph.ops[head.hi].layer)
    assert [graph.ops[r.lo].layer for r in found] == [6, 8, 13, 16, 19]
    for r in found:
        join = graph.ops[r.hi + 1]
        assert join.kind == "concat" and join.name.endswith(".m.0.cat")
        assert [len(lane) for lane in r.lanes] == [5, 1]
        cv2 = graph.ops[r.lanes[1][0]]
        assert cv2.name.endswith(".m.0.cv2") and cv2.inputs == graph.ops[r.lanes[0][0]].inputs
        assert sorted(i for lane in r.lanes for i in lane) == list(range(r.lo, r.hi + 1))
    # in op order, the head's before layer 19's C3k, which lies in its lane 0 (the neck)
    assert cuda_lanes.regions(graph) == (*found[:4], head, found[4])
    assert head.lo < found[4].lo and found[4].hi < head.hi and set(range(found[4].lo, found[4].hi + 1)) <= \
        set(head.lanes[0])
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


def _clashes(graph, plan, region) -> list:
    """Storages that only one lane of ``region`` touches overlapping in memory with ones only another lane touches."""
    def spans(names):
        return [(plan.storages[n].offset, plan.storages[n].offset + plan.storages[n].floats * 4, n) for n in names]

    out = []
    per_lane = [_touched(graph, plan, lane) for lane in region.lanes]
    for a in range(len(per_lane)):
        for b in range(a + 1, len(per_lane)):
            for lo, hi, n in spans(per_lane[a] - per_lane[b]):
                out += [(n, m) for lo2, hi2, m in spans(per_lane[b] - per_lane[a]) if lo < hi2 and lo2 < hi]
    return out


def test_plan_keeps_lanes_apart(graph):
    region = cuda_lanes.head_region(graph)
    plan, serial = plan_memory(graph, (region,)), plan_memory(graph)
    assert plan.regions == (region,) and serial.regions == ()
    # planned op by op, the head's branches and the neck reuse each other's memory (what the region prevents) ...
    assert _clashes(graph, serial, region)
    # ... with the region no two lanes' storages overlap, while a lane still reuses its own in op order
    assert _clashes(graph, plan, region) == []
    lane_of = {n: st.lanes for n, st in plan.storages.items() if st.lanes}
    assert {k for tags in lane_of.values() for _, k in tags} == set(range(len(region.lanes)))
    # with every region (layer 19's C3k inside the head's lane 0): both regions' lanes apart, and the C3k's
    # bottleneck intermediates carry both tags (head lane 0, C3k lane 0)
    regions = cuda_lanes.regions(graph)
    full = plan_memory(graph, regions, get_backend("cuda").reads(graph))
    for r in regions:
        assert _clashes(graph, full, r) == []
    h, c = regions.index(region), next(k for k, r in enumerate(regions) if region.lo < r.lo < region.hi)
    assert any(set(st.lanes) == {(h, 0), (c, 0)} for st in full.storages.values())


def test_nested_regions_keep_every_region_apart():
    """A region inside one lane of another (planner.py 4.): a storage only the inner region's lane 0 touches and
    one only the outer region's lane 1 touches, alive at different op indices, must not share memory (the lanes
    run at the same time); each carries its tags. The same storages share memory without the regions."""
    from carve.ir import GraphBuilder

    gb = GraphBuilder("t", (8, 8, 4))
    pool = dict(kernel=3, stride=1, pad=1)
    a = gb.add("maxpool2d", "a", [gb.input], 0, pool)[0]
    b0 = gb.add("maxpool2d", "b0", [a], 1, pool)[0]    # op 1: outer lane 0, inner lane 0
    b = gb.add("maxpool2d", "b", [b0], 1, pool)[0]     # op 2: outer lane 0, inner lane 0
    c = gb.add("maxpool2d", "c", [a], 1, pool)[0]      # op 3: outer lane 0, inner lane 1
    e0 = gb.add("maxpool2d", "e0", [a], 2, pool)[0]    # op 4: outer lane 1
    e = gb.add("maxpool2d", "e", [e0], 2, pool)[0]     # op 5: outer lane 1
    y = gb.add("concat", "y", [b, c, e], 3)[0]         # op 6: after the lanes
    g = gb.build({"output0": y}, {})
    outer, inner = Region(lo=1, hi=6, lanes=((1, 2, 3), (4, 5))), Region(lo=1, hi=3, lanes=((1, 2), (3,)))
    plan = plan_memory(g, (outer, inner))
    sb, se = plan.storages[plan.views[b0].storage], plan.storages[plan.views[e0].storage]
    assert sb.lanes == ((0, 0), (1, 0)) and se.lanes == ((0, 1),) and sb.last < se.first
    assert sb.offset + sb.floats * 4 <= se.offset or se.offset + se.floats * 4 <= sb.offset
    plain = plan_memory(g)
    assert plain.storages[plain.views[b0].storage].offset == plain.storages[plain.views[e0].storage].offset


def test_program_lanes_and_scratch(graph):
    be = get_backend("cuda")
    region = cuda_lanes.head_region(graph)
    program = be.lower(graph, plan_memory(graph, be.regions(graph), be.reads(graph)))
    layers = {lay["index"]: lay for lay in program["layers"]}
    head = layers[graph.ops[region.hi].layer]
    assert [list(part) for part in head["parts"]] == [["lanes", "join"], ["steps"]]
    head_lanes = head["parts"][0]["lanes"]
    # the head's 6 lanes, then one context for layer 19's C3k fork inside the neck (its cv2 beside lanes 1-5)
    assert len(head_lanes) == len(region.lanes) == 6 and program["lanes"] == 7
    assert [lane["index"] for lane in head_lanes] == list(range(6)) and head["parts"][0]["join"] == (1, 6)
    assert [st.lane for lane in head_lanes for seg in lane["segments"] for st in seg["steps"]] == \
        [lane["index"] for lane in head_lanes for seg in lane["segments"] for _ in seg["steps"]]
    assert [st.macro for st in head["parts"][1]["steps"]] == ["cu_e2e"]
    # each lane waits for the layer its chain reads: P3 after layer 16's mark, P4 after 19's, P5 at the fork
    assert program["marks"] == [16, 19]
    waits = {"m->head_marks[0]": 16, "m->head_marks[1]": 19, "m->lanes_start": 22}
    for lane in head_lanes[1:]:
        assert len(lane["segments"]) == 1
        seg = lane["segments"][0]
        level = next(lay.index for lay in graph.layers
                     if any(lay.output in graph.ops[i].inputs for i in range(len(graph.ops))
                            if graph.ops[i].name == seg["steps"][0].name))
        assert waits[seg["wait"]] == level
    assert head_lanes[0]["segments"][0]["wait"] is None
    assert layers[16]["parts"][-1] == dict(mark=0) and layers[19]["parts"][-1] == dict(mark=1)
    # the neck (layers 17-22) on lane 0's context, but layer 19's C3k cv2 on context 6
    neck = [layers[n] for n in range(17, 23)]
    c3k19 = layers[19]["parts"][1]
    assert [lane["index"] for lane in c3k19["lanes"]] == [0, 6] and c3k19["join"] == (6, 7)
    assert [st.name.split(".", 2)[2] for st in c3k19["lanes"][1]["segments"][0]["steps"]] == ["m.0.cv2"]
    assert all(st.lane == (6 if st in c3k19["lanes"][1]["segments"][0]["steps"] else 0)
               for lay in neck for st in lay["steps"])
    # the C3k layers before it: 2 lanes each, cv2 alone in lane 1
    c3k = [layers[n] for n in (6, 8, 13, 16)]
    for lay in c3k:
        assert [list(part) for part in lay["parts"]][:3] == [["steps"], ["lanes", "join"], ["steps"]]
        lanes = lay["parts"][1]["lanes"]
        assert [[st.name.split(".", 2)[2] for seg in lane["segments"] for st in seg["steps"]] for lane in lanes][1] \
            == ["m.0.cv2"]
        assert all(st.lane == -1 for k in (0, 2) for st in lay["parts"][k]["steps"])
    others = [st for n, lay in layers.items() if n < 17 and lay not in c3k for st in lay["steps"]]
    assert others and all(st.lane == -1 for st in others)
    assert [program["conv_lanes"][st.index] for st in others if st.macro == "cu_conv"] == \
        [-1] * sum(st.macro == "cu_conv" for st in others)
    # scratch: a slice per lane of its own need, side by side. Lane 0's holds the neck's 3x3 convs' im2col and
    # layer 22's attention (its S matrix), which run beside the head's lanes now
    total = lanes_scratch_bytes(program)
    attention = [st for st in layers[22]["steps"] if st.macro.startswith("cu_attention")]
    assert attention and program["lane_attention"] == attention and all(st.lane == 0 for st in attention)
    only = lanes_scratch_bytes(dict(program, conv_lanes=[-1] * len(program["conv_lanes"]), lane_deconvs=[]))
    assert only >= max(st.heads * st.n * st.n * 4 for st in attention) > 0, "the attention's scratch is lane 0's"
    box = {lane["index"] for lane in head_lanes if "cv2" in lane["what"]}
    assert len(box) == 3
    head_convs = {st.index for lane in head_lanes for seg in lane["segments"] for st in seg["steps"]
                  if st.macro == "cu_conv"}
    per_box = lanes_scratch_bytes(dict(program, lane_attention=[],
                                       conv_lanes=[k if k in box and i in head_convs else -1
                                                   for i, k in enumerate(program["conv_lanes"])]))
    assert total >= per_box > 0 and total % 256 == 0
    assert device_scratch_bytes(program, "detect", 80, IMGSZ, IMGSZ, 64, 64) >= total
    # a plan made without the regions gets no lanes (nothing keeps their memory apart)
    plain = be.lower(graph, plan_memory(graph))
    assert plain["lanes"] == 0 and plain["marks"] == [] and not any(lay.get("parts") for lay in plain["layers"])


def _body(cu: str, fn: str) -> str:
    body = cu[cu.index(f"static carve_status {fn}("):]
    return body[:body.index("\n}\n")]


def test_rendered_fork_and_join(irsim_yolo26n_pt):
    files = compiler.compile_model(str(MANIFEST), "cuda", str(irsim_yolo26n_pt), IMGSZ).files
    cu = files["yolo26n.cu"].decode()
    assert "#define LANES 7" in cu and "#define NUM_HEAD_MARKS 2" in cu
    body = _body(cu, "layer_23_detect")
    order = ["TRY(lanes_fork(m));", "TRY(lane_wait(m, 1, m->head_marks[0]));", "&m->lanes[1].cu",
             "TRY(lane_wait(m, 3, m->head_marks[1]));", "TRY(lane_wait(m, 5, m->lanes_start));", "&m->lanes[5].cu",
             "TRY(lanes_join(m, 1, 6));", "carve_cu_e2e_postprocess_task(&m->cu,"]
    assert [body.index(x) for x in order] == sorted(body.index(x) for x in order)
    assert body.index("&m->lanes[0].cu") < body.index("TRY(lane_wait(m, 1,")  # lane 0 first, no wait
    c3k = _body(cu, "layer_13_c3k2")
    assert c3k.index("TRY(lanes_fork(m));") < c3k.index("TRY(lane_wait(m, 1, m->lanes_start));") \
        < c3k.index("&m->lanes[1].cu") < c3k.index("TRY(lanes_join(m, 1, 2));")
    p3 = _body(cu, "layer_16_c3k2")
    assert p3.index("TRY(lanes_join(m, 1, 2));") < p3.index("TRY(lanes_mark(m, 0));") and p3.endswith(
        "TRY(lanes_mark(m, 0));  // the head's lanes that read this layer's output may start\n  return CARVE_OK;")
    p4 = _body(cu, "layer_19_c3k2")
    assert p4.index("TRY(lane_wait(m, 6, m->lanes_start));") < p4.index("TRY(lanes_join(m, 6, 7));") \
        < p4.index("TRY(lanes_mark(m, 1));")
    for fn in ("layer_17_conv", "layer_20_conv", "layer_22_c3k2"):  # the neck: lane 0's context and scratch
        assert "&m->cu," not in _body(cu, fn) and "m->scratch" not in _body(cu, fn).replace("m->lanes[0].scratch", "")
    assert "&m->lanes[" not in cu[:cu.index("static carve_status layer_06_c3k2(")]
    h = files["yolo26n.h"].decode()
    assert "int serial_head;" in h and "int late_head;" in h
    assert "m->late_head ? m->lanes_start : event" in cu and "opt->late_head != 0" in cu


def test_a_chain_without_a_fork_layer_waits_for_the_fork(graph, monkeypatch):
    """A chain that reads no layer before the head (fork None) starts at the fork; the others keep their early
    forks, and the region still starts where the earliest of those does (its lanes wait for marks inside it)."""
    idx, chains, forks = cuda_lanes.head_chains(graph)
    k = forks.index(22)
    monkeypatch.setattr(cuda_lanes, "head_chains", lambda g: (idx, chains, forks[:k] + [None] + forks[k + 1:]))
    region = cuda_lanes.head_region(graph)
    assert graph.ops[region.lo - 1].layer == 16
    be = get_backend("cuda")
    monkeypatch.setattr(cuda_lanes, "regions", lambda g: tuple(sorted(
        cuda_lanes.branch_regions(g, graph.ops[region.hi].layer) + [region], key=lambda r: (r.lo, -r.hi))))
    program = be.lower(graph, plan_memory(graph, cuda_lanes.regions(graph), be.reads(graph)))
    head = next(lay for lay in program["layers"] if lay["index"] == graph.ops[region.hi].layer)
    lane = next(lane for lane in head["parts"][0]["lanes"]
                if any(graph.ops[chains[k][0]].name == st.name for seg in lane["segments"] for st in seg["steps"]))
    assert program["marks"] == [16, 19]
    assert lane["index"] == 0 or [seg["wait"] for seg in lane["segments"]] == ["m->lanes_start"]
