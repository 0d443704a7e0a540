"""The cuda backend's lanes: independent branches run at the same time, each on a stream of its own.

A YOLO26 head is six to ten chains of small convolutions (per level: the box branch cv2, the class branch cv3, the
pose / obb / mask-coefficient branch cv4; the segment head's prototype network) that only meet in the
post-processing. Run in order on one stream at batch 1, its 50-70 kernels are a chain of launch latencies (about
3 us each on an H100, a quarter of the forward). As lanes, the forward forks after the last backbone / neck layer:
each lane is a carve_cu_ctx on a stream of its own (lane 0 on the run's stream) with its own slice of the scratch
and of the cuBLAS workspace, the lanes' kernels overlap, and the run's stream waits for every lane before the
post-processing. Captured into the CUDA Graph, the fork and join are graph edges.

The same goes for the branches a layer forks and joins again (``branch_regions``): a C3k block's cv2 (one 1x1
convolution of its input) beside its cv1 -> bottlenecks chain, both read by its concat: one convolution less on the
critical path per C3k (5 in yolo26n), the same lanes and fork / join around them.

What lanes need from the rest of the generator:

* the memory plan (planner.Region): a lane's activations never share memory with another lane's;
* a slice of the device scratch per lane, each its own lane's largest need, side by side (cuda.py's
  ``lanes_scratch_bytes``, the generated ``lane_scratch_bytes(k)`` / ``lane_scratch_offset(k)``);
* every step of a lane rendered with its lane's context and scratch (``Step.lane``, templates/common/steps.c.j2).

``head_region`` and ``branch_regions`` are pure functions of the graph; ``assign`` marks the program's steps.
"""

from __future__ import annotations

from ..ir import Graph
from ..planner import Region
from .steps import CuConv, CuConvPair, CuDeconv

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
    return _packed(list(chains.values()), idx[0], idx[-1])


def _packed(chains: list, lo: int, hi: int) -> Region:
    """The region [lo, hi] with its chains (lists of op indices) as lanes: at most MAX_LANES, more chains packed
    longest first onto the lane with the fewest ops (lane 0, on the run's stream, gets the longest)."""
    lanes: list = [[] for _ in range(min(len(chains), MAX_LANES))]
    for chain in sorted(chains, key=lambda c: (-len(c), c[0])):
        min(lanes, key=len).extend(chain)
    return Region(lo=lo, hi=hi, lanes=tuple(tuple(sorted(lane)) for lane in lanes))


VIEW_KINDS = ("slice", "concat")           # ops that compute nothing on the cuda backend (views, in place)


def branch_regions(graph: Graph, skip_layer: int | None = None) -> list:
    """The fork / join branches of each concat outside layer ``skip_layer`` (the head's): the ops that lead to
    exactly one of its inputs within its layer (the inputs' ancestors there, less those shared by two inputs), when
    they are the concat's whole op range before it (contiguous, ending right before it), at least two of them
    compute something (a branch of views only is no lane), and nothing else reads what they produce. Each branch a
    lane (the longest first: lane 0 runs on the run's stream), at most MAX_LANES. In YOLO26: each C3k's cv2 beside
    its cv1 -> bottlenecks chain."""
    producer = {t: i for i, op in enumerate(graph.ops) for t in op.outputs}
    readers: dict = {}
    for i, op in enumerate(graph.ops):
        for t in op.inputs:
            readers.setdefault(t, set()).add(i)
    out = []
    for j, op in enumerate(graph.ops):
        if op.kind != "concat" or op.layer == skip_layer:
            continue

        def ancestors(t: str) -> set:
            seen, todo = set(), [t]
            while todo:
                i = producer.get(todo.pop(), -1)
                if i < 0 or i in seen or graph.ops[i].layer != op.layer:
                    continue
                seen.add(i)
                todo.extend(graph.ops[i].inputs)
            return seen

        anc = [ancestors(t) for t in op.inputs]
        shared = {i for k, a in enumerate(anc) for i in a if any(i in b for m, b in enumerate(anc) if m != k)}
        branches = [sorted(a - shared) for a in anc]
        branches = [b for b in branches if b]
        members = sorted(i for b in branches for i in b)
        computing = [b for b in branches if any(graph.ops[i].kind not in VIEW_KINDS for i in b)]
        if (len(computing) < 2 or members != list(range(members[0], j))
                or any(not readers.get(t, set()) <= set(members) | {j}
                       for i in members for t in graph.ops[i].outputs)
                or any(t in graph.outputs.values() for i in members for t in graph.ops[i].outputs)):
            continue
        out.append(_packed(branches, members[0], j - 1))
    return out


def regions(graph: Graph) -> tuple:
    """The concurrent regions of the cuda forward (the memory plan's), in op order: each layer's fork / join branches
    (``branch_regions``) and the head's, if any."""
    head = head_region(graph)
    skip = graph.ops[head.lo].layer if head is not None else None
    found = branch_regions(graph, skip) + ([head] if head is not None else [])
    return tuple(sorted(found, key=lambda r: r.lo))


def assign(program: dict, graph: Graph, regions: tuple) -> dict:
    """Marks each step of the regions' lanes with its lane (Step.lane) and gives each layer with a region its
    ``parts``: in order, ``dict(steps=[...])`` for steps on the run's stream and ``dict(lanes=[...])`` for a region (a
    dict per lane: its steps in order, its op count and what it computes), forked before and joined after.
    ``program["lanes"]``: the lane contexts a package makes, the most any region has (0: none);
    ``program["conv_lanes"]``: each k_conv entry's lane (-1: none); ``program["lane_deconvs"]``: the deconv steps of
    the lanes (their scratch: cuda.py's ``lanes_scratch_bytes``)."""
    program.update(lanes=0, conv_lanes=[-1] * len(program["convs"]), lane_deconvs=[])
    for region in regions:
        lane_of = {graph.ops[i].name: k for k, ops in enumerate(region.lanes) for i in ops}
        layer = next(lay for lay in program["layers"] if lay["index"] == graph.ops[region.lo].layer)
        parts = layer.setdefault("parts", [dict(steps=list(layer["steps"]))])
        plain = parts.pop()  # the layer's steps not yet in a region: this region's come out of them
        lanes: list = [[] for _ in region.lanes]
        before, after = [], []
        for st in plain["steps"]:
            k = lane_of.get(st.name)
            if k is not None:
                st.lane = k
                lanes[k].append(st)
            else:
                (after if any(lanes) else before).append(st)
        parts += [dict(steps=before)] if before else []
        parts.append(dict(lanes=[dict(index=k, steps=steps, ops=len(region.lanes[k]),
                                      what=", ".join(sorted({_chain_name(s.name) for s in steps if s.computes})))
                                 for k, steps in enumerate(lanes)]))
        parts.append(dict(steps=after))
        program["lanes"] = max(program["lanes"], len(region.lanes))
        for st in (st for steps in lanes for st in steps if isinstance(st, CuConv)):
            program["conv_lanes"][st.index] = st.lane
            if isinstance(st, CuConvPair):
                program["conv_lanes"][st.pw_index] = st.lane
        program["lane_deconvs"] += [st for steps in lanes for st in steps if isinstance(st, CuDeconv)]
    return program


def _chain_name(op_name: str) -> str:
    """model.23.one2one_cv3.0.1.1 -> one2one_cv3.0, model.13.m.0.m.1.cv2 -> m.0.m.1: the branch a step comes from
    (for the lane's comment)."""
    parts = op_name.split(".")
    return ".".join(parts[2:-1] if parts[2:3] == ["m"] else parts[2:4]) if len(parts) > 3 else op_name
