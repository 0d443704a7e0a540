"""The cuda backend's lanes: the head's independent branches run at the same time, each on a stream of its own.

A YOLO26 head is six to ten chains of small convolutions (per level: the box branch cv2, the class branch cv3, the
pose / obb / mask-coefficient branch cv4; the segment head's prototype network) that only meet in the
post-processing. Run in order on one stream at batch 1, its 50-70 kernels are a chain of launch latencies (about
3 us each on an H100, a quarter of the forward). As lanes, the forward forks after the last backbone / neck layer:
each lane is a carve_cu_ctx on a stream of its own (lane 0 on the run's stream) with its own slice of the scratch
and of the cuBLAS workspace, the lanes' kernels overlap, and the run's stream waits for every lane before the
post-processing. Captured into the CUDA Graph, the fork and join are graph edges.

What lanes need from the rest of the generator:

* the memory plan (planner.Region): a lane's activations never share memory with another lane's;
* a slice of the device scratch per lane, each its own lane's largest need, side by side (cuda.py's
  ``lanes_scratch_bytes``, the generated ``lane_scratch_bytes(k)`` / ``lane_scratch_offset(k)``);
* every step of a lane rendered with its lane's context and scratch (``Step.lane``, templates/common/steps.c.j2).

``head_region`` is a pure function of the graph; ``assign`` marks the program's steps.
"""

from __future__ import annotations

from ..ir import Graph
from ..planner import Region
from .steps import CuConv, CuDeconv

MAX_LANES = 8                               # streams of one package (the head of a pose / seg model has 9-10 chains)
POST_KINDS = ("e2e_detect", "nms_detect")   # the post-processing op the chains meet in (it runs after the join)


def head_region(graph: Graph) -> Region | None:
    """The head layer's ops as a concurrent region: its ops other than the post-processing, split into the chains
    that share no tensor they produce (connected components), at most MAX_LANES lanes (more chains are packed
    longest first onto the lane with the fewest ops). None when the graph has no post-processing op (classify),
    the layer's ops are not contiguous, or the layer is one chain."""
    post = [i for i, op in enumerate(graph.ops) if op.kind in POST_KINDS]
    if not post:
        return None
    layer = graph.ops[post[0]].layer
    idx = [i for i, op in enumerate(graph.ops) if op.layer == layer]
    if idx != list(range(idx[0], idx[-1] + 1)):
        return None
    members = [i for i in idx if graph.ops[i].kind not in POST_KINDS]
    parent = {i: i for i in members}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    producer = {t: i for i in members for t in graph.ops[i].outputs}
    for i in members:
        for t in graph.ops[i].inputs:
            if t in producer:
                parent[find(i)] = find(producer[t])
    chains: dict = {}
    for i in members:
        chains.setdefault(find(i), []).append(i)
    if len(chains) < 2:
        return None
    lanes: list = [[] for _ in range(min(len(chains), MAX_LANES))]
    for chain in sorted(chains.values(), key=lambda c: (-len(c), c[0])):
        min(lanes, key=len).extend(chain)
    return Region(lo=idx[0], hi=idx[-1], lanes=tuple(tuple(sorted(lane)) for lane in lanes))


def regions(graph: Graph) -> tuple:
    """The concurrent regions of the cuda forward (the memory plan's): the head's, if any."""
    region = head_region(graph)
    return (region,) if region is not None else ()


def assign(program: dict, graph: Graph, region: Region | None) -> dict:
    """Marks each step of the region's lanes with its lane (Step.lane) and gives the head layer's entry of
    ``program["layers"]`` its ``lanes`` (a list per lane of its steps, in order) and ``post`` (the steps after the
    join). ``program["lanes"]``: the number of lanes (0: none); ``program["conv_lanes"]``: each k_conv entry's lane
    (-1: none); ``program["lane_deconvs"]``: the deconv steps of the lanes (their scratch: cuda.py's
    ``lanes_scratch_bytes``)."""
    program.update(lanes=0, conv_lanes=[-1] * len(program["convs"]), lane_deconvs=[])
    if region is None:
        return program
    lane_of = {graph.ops[i].name: k for k, ops in enumerate(region.lanes) for i in ops}
    layer = next(lay for lay in program["layers"] if lay["index"] == graph.ops[region.lo].layer)
    lanes: list = [[] for _ in region.lanes]
    post = []
    for st in layer["steps"]:
        k = lane_of.get(st.name)
        if k is None:
            post.append(st)
        else:
            st.lane = k
            lanes[k].append(st)
    layer.update(lanes=[dict(index=k, steps=steps, ops=len(region.lanes[k]),
                             what=", ".join(sorted({_chain_name(s.name) for s in steps if s.computes})))
                        for k, steps in enumerate(lanes)], post=post)
    program["lanes"] = len(region.lanes)
    for st in (st for steps in lanes for st in steps if isinstance(st, CuConv)):
        program["conv_lanes"][st.index] = st.lane
    program["lane_deconvs"] = [st for steps in lanes for st in steps if isinstance(st, CuDeconv)]
    return program


def _chain_name(op_name: str) -> str:
    """model.23.one2one_cv3.0.1.1 -> one2one_cv3.0: the branch a step comes from (for the lane's comment)."""
    parts = op_name.split(".")
    return ".".join(parts[2:4]) if len(parts) > 3 else op_name
