"""The cuda backend's lanes: independent branches run at the same time, each on a stream of its own.

A YOLO26 head is six to ten chains of small convolutions (per level: the box branch cv2, the class branch cv3, the
pose / obb / mask-coefficient branch cv4; the segment head's prototype network) that only meet in the
post-processing. Run in order on one stream at batch 1, its 50-70 kernels are a chain of launch latencies (about
3 us each on an H100, a quarter of the forward). As lanes, each lane is a carve_cu_ctx on a stream of its own
(lane 0 on the run's stream) with its own slice of the scratch and of the cuBLAS workspace, the lanes' kernels
overlap, and the run's stream waits for every lane before the post-processing. A chain starts once the layer it
reads is done (the early fork: yolo26n's P3 chains after layer 16, beside layers 17-22, which run in lane 0 with
lane 0's context); the others wait for marks the run's stream records after their layers, or for the fork before
the head. Captured into the CUDA Graph, the marks, fork and join are graph edges.

The same goes for the branches a layer forks and joins again (``branch_regions``): a C3k block's cv2 (one 1x1
convolution of its input) beside its cv1 -> bottlenecks chain, both read by its concat: one convolution less on the
critical path per C3k (5 in yolo26n), the same lanes and fork / join around them.

What lanes need from the rest of the generator:

* the memory plan (planner.Region): a lane's activations never share memory with another lane's, also where a
  region lies in a lane of another (the neck's C3k forks in the head's lane 0);
* a slice of the device scratch per lane, each its own lane's largest need, side by side (cuda.py's
  ``lanes_scratch_bytes``, the generated ``lane_scratch_bytes(k)`` / ``lane_scratch_offset(k)``);
* every step of a lane rendered with its lane's context and scratch (``Step.lane``, templates/common/steps.c.j2).

``head_chains``, ``head_region`` and ``branch_regions`` are pure functions of the graph; ``assign`` marks the
program's steps.
"""

from __future__ import annotations

from ..errors import CarveError
from ..ir import Graph
from ..planner import Region
from .steps import CuAttention, CuAttentionPe, CuConv, CuConvPair, CuDeconv

MAX_LANES = 8                               # streams of one package (the head of a pose / seg model has 9-10 chains)
POST_KINDS = ("e2e_detect", "nms_detect")   # the post-processing op the chains meet in (it runs after the join)


def _chains(graph: Graph, members: list) -> list:
    """``members`` (op indices) split into the chains that share no tensor they produce (connected components),
    each in op order, the chains in the order of their first op."""
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
    return sorted(chains.values())


def _layer_end(graph: Graph, layer: int) -> int:
    """The index of the layer's last op."""
    return max(i for i, op in enumerate(graph.ops) if op.layer == layer)


def head_chains(graph: Graph) -> tuple:
    """(the head layer's op indices, its chains, each chain's fork layer): the chains of the head layer's ops other
    than the post-processing, and for each the layer before the head whose output it reads last (the lanes may
    start once that layer is done; None: it reads only the graph input or its own layer). ((), [], []) when the
    graph has no post-processing op (classify) or the head layer's ops are not contiguous."""
    post = [i for i, op in enumerate(graph.ops) if op.kind in POST_KINDS]
    if not post:
        return (), [], []
    layer = graph.ops[post[0]].layer
    idx = [i for i, op in enumerate(graph.ops) if op.layer == layer]
    if idx != list(range(idx[0], idx[-1] + 1)):
        return (), [], []
    chains = _chains(graph, [i for i in idx if graph.ops[i].kind not in POST_KINDS])
    producer = {t: i for i, op in enumerate(graph.ops[:idx[0]]) for t in op.outputs}
    forks = []
    for chain in chains:
        read = [producer[t] for i in chain for t in graph.ops[i].inputs if t in producer]
        forks.append(graph.ops[max(read)].layer if read else None)
    return tuple(idx), chains, forks


def head_region(graph: Graph) -> Region | None:
    """The head layer's chains as a concurrent region that starts where the first of them may (the early fork):
    after the layer whose output it reads (yolo26n: the P3 branches after layer 16, the P4 ones after 19, the P5
    ones after 22). Lane 0 runs on the run's stream: the layers between the earliest fork and the head (the neck),
    then the longest chain of those that fork last; each other chain a lane of its own, at most MAX_LANES contexts
    with those the neck's own forks take after the head's (``branch_regions`` inside the neck: their lanes past lane
    0, one fork at a time); more chains are packed onto the lane with the fewest ops whose chains all come before
    them (each lane's ops stay in op order, the memory plan's assumption), else onto lane 0. None when the graph has no post-processing op (classify), the head
    layer's ops are not contiguous, or the layer is one chain."""
    idx, chains, forks = head_chains(graph)
    if len(chains) < 2:
        return None
    start = idx[0]
    lo = min([_layer_end(graph, f) + 1 for f in forks if f is not None] + [start])  # a None chain: at the fork
    nested = [r for r in branch_regions(graph, graph.ops[start].layer) if r.lo >= lo]
    extra = max((len(r.lanes) - 1 for r in nested), default=0)
    if MAX_LANES - extra < 2:  # the neck's forks would leave the head one lane: no early fork
        lo, extra = start, 0
    rank = {id(c): (-1 if f is None else f) for c, f in zip(chains, forks)}
    latest = max(rank.values())
    first = max((c for c in chains if rank[id(c)] == latest), key=lambda c: (len(c), -c[0]))
    lanes: list = [list(range(lo, start)) + first]
    for chain in sorted((c for c in chains if c is not first), key=lambda c: (rank[id(c)], c[0])):
        if len(lanes) < MAX_LANES - extra:
            lanes.append(list(chain))
            continue
        after = [k for k in range(1, len(lanes)) if max(lanes[k]) < chain[0]]
        k = min(after, key=lambda k: (len(lanes[k]), k)) if after else 0
        lanes[k] = sorted(lanes[k] + chain)
    return Region(lo=lo, hi=idx[-1], lanes=tuple(tuple(sorted(lane)) for lane in lanes))


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
    """The concurrent regions of the cuda forward (the memory plan's), in op order, a region before the ones it
    holds: each layer's fork / join branches (``branch_regions``) and the head's, if any (``head_region``: it holds
    the neck's)."""
    head = head_region(graph)
    skip = graph.ops[head.hi].layer if head is not None else None
    found = branch_regions(graph, skip) + ([head] if head is not None else [])
    return tuple(sorted(found, key=lambda r: (r.lo, -r.hi)))


def assign(program: dict, graph: Graph, regions: tuple) -> dict:
    """Marks each step of the regions' lanes with its lane context (Step.lane) and gives each layer with a region,
    or a fork point of the head's, its ``parts`` in order: ``dict(steps=[...])`` for steps on the run's stream (or
    lane 0's context in the head's region: the neck), ``dict(lanes=[...])`` for a region, forked before and joined
    after (a dict per lane: its context ``index``, its ``segments``, each the steps after one wait for the run's
    stream, its op count and what it computes), ``dict(mark=i)`` where the head's lanes that read the layer's output
    may start (``program["marks"][i]``: that layer's index). A layer fork inside the head's region (the neck's C3k)
    runs its lanes 1.. on the contexts after the head's. ``program["lanes"]``: the lane contexts a package makes
    (0: none); ``program["conv_lanes"]``: each k_conv entry's lane (-1: none); ``program["lane_deconvs"]`` /
    ``["lane_attention"]``: the lanes' deconv and attention steps (their scratch: cuda.py's ``lanes_scratch_bytes``)."""
    program.update(lanes=0, conv_lanes=[-1] * len(program["convs"]), lane_deconvs=[], lane_attention=[], marks=[])
    layers = {lay["index"]: lay for lay in program["layers"]}
    idx, chains, forks = head_chains(graph)
    # the head's region: the one that ends with the head layer (branch_regions skip that layer)
    head = next((r for r in regions if idx and r.hi == idx[-1]), None)
    for region in regions:
        if region is head:
            continue
        base = len(head.lanes) - 1 if head is not None and head.lo <= region.lo <= head.hi else 0
        contexts = [0] + [base + k for k in range(1, len(region.lanes))]
        lay = layers[graph.ops[region.lo].layer]
        _fork(lay, graph, region, contexts, [[(None, ops)] for ops in region.lanes])
    if head is not None:
        fork_of = {i: f for chain, f in zip(chains, forks) for i in chain}
        last = graph.ops[idx[0] - 1].layer  # its output's lanes wait for the fork itself
        for f in sorted({f for f in forks if f is not None and f != last}):
            if _layer_end(graph, f) + 1 < head.lo:  # pragma: no cover - head_region's invariant
                raise CarveError(f"internal: the head's lanes wait for layer {f}, before their region")
            lay = layers[f]
            lay.setdefault("parts", [dict(steps=list(lay["steps"]))]).append(dict(mark=len(program["marks"])))
            program["marks"].append(f)
        segments = []
        for ops in head.lanes:
            segs: list = []
            for i in (i for i in ops if i >= idx[0]):
                f = fork_of[i]
                if not segs or _later(f, segs[-1][0]):
                    segs.append((f, []))
                segs[-1][1].append(i)
            segments.append(segs)
        neck = sorted({graph.ops[i].layer for i in range(head.lo, idx[0])})
        for n in neck:
            early = sorted({k for k, segs in enumerate(segments) if k and _later(n, segs[0][0])})
            beside = f": the head's lane{'s' * (len(early) > 1)} {', '.join(map(str, early))} may run beside it"
            layers[n]["note"] = "on lane 0's context" + (beside if early else "")
            for st in (st for st in layers[n]["steps"] if st.lane < 0):
                st.lane = 0
        _fork(layers[graph.ops[head.hi].layer], graph, head, list(range(len(head.lanes))), segments,
              marks=program["marks"])
    for st in (st for lay in program["layers"] for st in lay["steps"] if st.lane >= 0):
        program["lanes"] = max(program["lanes"], st.lane + 1)
        if isinstance(st, CuConv):
            program["conv_lanes"][st.index] = st.lane
            if isinstance(st, CuConvPair):
                program["conv_lanes"][st.pw_index] = st.lane
        elif isinstance(st, CuAttention):
            program["lane_attention"].append(st)
            if isinstance(st, CuAttentionPe):
                program["conv_lanes"][st.index] = st.lane
        elif isinstance(st, CuDeconv):
            program["lane_deconvs"].append(st)
    return program


def _later(f, g) -> bool:
    """Fork layer f comes after g (None: the fork itself, before every layer's mark)."""
    return (-1 if f is None else f) > (-1 if g is None else g)


def _fork(layer: dict, graph: Graph, region: Region, contexts: list, segments: list, marks: list = ()) -> None:
    """The layer's parts with the region's lanes (``assign``): its steps not yet in a region split into those
    before the lanes, the lanes (lane k on context ``contexts[k]``, its steps in ``segments[k]``: (fork layer, op
    indices) pairs, each after a wait for the run's stream at that layer's mark, or at the fork itself when the
    layer has none: None, or the layer right before the head) and those after."""
    wait_of = {f: f"m->head_marks[{k}]" for k, f in enumerate(marks)}
    seg_of = {graph.ops[i].name: (k, s) for k, segs in enumerate(segments) for s, (_, ops) in enumerate(segs)
              for i in ops}
    parts = layer.setdefault("parts", [dict(steps=list(layer["steps"]))])
    plain = parts.pop()  # the layer's steps not yet in a region: this region's come out of them
    steps: list = [[[] for _ in segs] for segs in segments]
    before, after = [], []
    for st in plain["steps"]:
        where = seg_of.get(st.name)
        if where is not None:
            st.lane = contexts[where[0]]
            steps[where[0]][where[1]].append(st)
        else:
            (after if any(s for lane in steps for s in lane) else before).append(st)
    parts += [dict(steps=before)] if before else []
    lanes = []
    for k, segs in enumerate(segments):
        own = [dict(wait=None if contexts[k] == 0 else wait_of.get(f, "m->lanes_start"),
                    after=f"layer {f}" if f in wait_of else "the fork", steps=st)
               for (f, _), st in zip(segs, steps[k])]
        lanes.append(dict(index=contexts[k], segments=own, ops=sum(len(ops) for _, ops in segs),
                          what=", ".join(sorted({_chain_name(s.name) for seg in own for s in seg["steps"]
                                                 if s.computes}))))
    joined = [c for c in contexts if c > 0]
    parts.append(dict(lanes=lanes, join=(min(joined), max(joined) + 1)))
    parts.append(dict(steps=after))


def _chain_name(op_name: str) -> str:
    """model.23.one2one_cv3.0.1.1 -> one2one_cv3.0, model.13.m.0.m.1.cv2 -> m.0.m.1: the branch a step comes from
    (for the lane's comment)."""
    parts = op_name.split(".")
    return ".".join(parts[2:-1] if parts[2:3] == ["m"] else parts[2:4]) if len(parts) > 3 else op_name
