"""Static memory plan: zero-copy views, then liveness-based offsets in one arena.

1. Views. Every tensor lives in a *storage* at a channel offset with a pixel
   stride (NHWC, so a channel slice of a wider storage is a strided view):
   a ``slice`` output is a view of its input; a ``concat`` input is placed
   directly in its slot of the concat's storage when its base storage fits
   there and nothing it overlaps is still needed (else the backend copies it).
2. Liveness. A storage lives from the first op writing any of its tensors to
   the last op reading any of them (graph outputs: to the end).
3. Offsets. Storages are placed greedily by size, largest first, at the
   lowest 64-byte aligned offset that overlaps no storage alive at the same
   time (the "greedy by size" planner of TFLite).
4. Concurrency (a backend's ``Region``s: ops that may run at the same time,
   the cuda backend's lanes). Within a region's op range the ops of different
   lanes are unordered, so "alive at the same time" changes there: a storage
   touched only by the ops of one lane, within the region, conflicts with the
   storages of the other lanes whatever their op indices; every other storage
   alive in the region (read or written by several lanes or by the ops that
   follow the lanes, or alive across the region's ends) lives over the whole
   region. Storages of one lane still reuse each other's memory in op order.
   Regions may nest (a lane of one region holding a whole other region: the
   cuda backend's head lanes beside the neck, whose C3k forks are regions of
   their own): a storage carries a (region, lane) tag per region it lies in
   one lane of, and two storages conflict when any region has them in
   different lanes. The outer region comes first (``regions`` sorted by lo,
   the wider first).
5. Later reads (a backend's ``reads``: tensor -> op index). A backend that
   runs several ops as one call reads the first op's inputs until the last
   of them (the cuda backend's depthwise + 1x1 pairs: the fused kernel reads
   the depthwise input while it writes the 1x1's output), so such a tensor
   lives at least to that op.

The plan is a pure function of the graph; its arena size is emitted as a
constant in the generated code.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CarveError
from .ir import Graph

ITEMSIZE = {"f32": 4, "i8": 1}   # bytes per element of each tensor dtype

ALIGN = 64          # bytes; cache line and AVX-512 vector
TAIL_PAD = 64       # bytes after the arena: XNNPACK kernels may over-read up to XNN_EXTRA_BYTES


@dataclass(frozen=True)
class View:
    storage: str        # name of the storage (a tensor name)
    offset: int         # channel offset inside the storage
    stride: int         # channels per pixel of the storage (the pixel stride)
    h: int
    w: int
    c: int


@dataclass(frozen=True)
class Storage:
    name: str
    floats: int         # its size in 4-byte words (an int8 storage of n elements: ceil(n / 4))
    first: int          # index of the first op writing it (-1: before the run, the input)
    last: int           # index of the last op reading it
    offset: int = 0     # bytes into the arena
    lanes: tuple = ()   # (region, lane) per concurrent region only that lane of which touches it (4.)


@dataclass(frozen=True)
class Region:
    """Ops that may run concurrently: ``lanes`` are tuples of op indices in [lo, hi], each lane's ops in order; the
    lanes are unordered with respect to each other. The other ops of [lo, hi] run after every lane."""
    lo: int
    hi: int
    lanes: tuple


@dataclass(frozen=True)
class Plan:
    views: dict         # tensor -> View
    storages: dict      # name -> Storage
    copies: tuple       # (concat op name, input tensor) pairs the backend must copy
    arena_bytes: int
    regions: tuple = ()  # the concurrent regions it was planned for (Region)

    def float_offset(self, tensor: str) -> int:
        """Offset of the tensor's first element, in floats from the arena base (a float32 tensor)."""
        v = self.views[tensor]
        return self.storages[v.storage].offset // 4 + v.offset

    def byte_offset(self, tensor: str, itemsize: int) -> int:
        """Offset of the tensor's first element, in bytes from the arena base, for elements of ``itemsize`` bytes
        (1 for an int8 tensor: its view's channel offset counts bytes)."""
        v = self.views[tensor]
        return self.storages[v.storage].offset + v.offset * itemsize


def _base(tensor: str, slice_of: dict) -> tuple:
    """(base tensor, channel offset) following slice views."""
    off = 0
    while tensor in slice_of:
        tensor, start = slice_of[tensor]
        off += start
    return tensor, off


def plan_memory(graph: Graph, regions: tuple = (), reads: dict | None = None) -> Plan:
    """The plan of ``graph`` run op by op, or with the concurrent ``regions`` (``Region``: see 4. above) and the
    backend's later ``reads`` (5. above)."""
    producer_idx = {graph.input: -1}
    last_use: dict = {}
    slice_of: dict = {}
    for i, op in enumerate(graph.ops):
        for t in op.outputs:
            producer_idx[t] = i
        for t in op.inputs:
            last_use[t] = i
        if op.kind == "slice":
            slice_of[op.outputs[0]] = (op.inputs[0], op.attrs["start"])
    end = len(graph.ops)
    for t in graph.outputs.values():
        last_use[t] = end
    for t, i in (reads or {}).items():
        last_use[t] = max(last_use.get(t, -1), i)
    for layer in graph.layers:  # layer outputs are read by the per-layer callback right after the layer
        last_layer_op = max(i for i, op in enumerate(graph.ops) if op.layer == layer.index)
        last_use[layer.output] = max(last_use.get(layer.output, -1), last_layer_op)

    def last_read(t: str, lo: int, hi: int, base_off: int = 0) -> int:
        """Last read of t, or of any slice view of t that touches channels [lo, hi) of t's base."""
        last = last_use.get(t, producer_idx.get(t, -1))
        for s, (b, start) in slice_of.items():
            if b == t:
                c = graph.tensors[s].shape[2]
                if base_off + start < hi and base_off + start + c > lo:
                    last = max(last, last_read(s, lo, hi, base_off + start))
        return last

    # ---- 1. place concat inputs in their slots ---------------------------
    placed: dict = {}       # base tensor -> (concat output tensor, channel offset)
    copies = []
    for op in graph.ops:
        if op.kind != "concat":
            continue
        out = op.outputs[0]
        cout = graph.tensors[out].shape[2]
        slots = []
        off = 0
        for t in op.inputs:
            slots.append((t, off, graph.tensors[t].shape[2]))
            off += graph.tensors[t].shape[2]
        nested = {dst for dst, _ in placed.values()}   # storages that already hold placed members
        for k, (t, o, c) in enumerate(slots):
            base, s = _base(t, slice_of)
            where = o - s
            if base in placed:
                if placed[base] != (out, where):
                    copies.append((op.name, t))   # already lives in another concat
                continue                          # else: a second view of an already placed base
            cb = graph.tensors[base].shape[2]
            # A base that already holds placed members is never placed again: the overlap rule below
            # reasons about one level of views only.
            ok = base != graph.input and base not in nested and where >= 0 and where + cb <= cout
            # Every other slot overlapping the base's region must be a consistent view of the
            # base, or be written only after the base and all its views are dead.
            for j, (u, uo, uc) in enumerate(slots):
                if not ok:
                    break
                if j == k or uo + uc <= where or uo >= where + cb:
                    continue
                ub, us = _base(u, slice_of)
                if ub == base and uo - us == where:
                    continue
                if (ub == graph.input or ub in nested or ub == base
                        or producer_idx.get(u, -1) <= last_read(base, uo - where, uo + uc - where)):
                    ok = False
            if ok:
                placed[base] = (out, where)
            else:
                copies.append((op.name, t))

    # ---- 2. resolve views -------------------------------------------------
    def resolve(t: str) -> tuple:
        base, s = _base(t, slice_of)
        off = s
        while base in placed:
            base, o = placed[base]
            off += o
        return base, off

    views = {}
    members: dict = {}
    for name, tensor in graph.tensors.items():
        h, w, c = tensor.shape
        root, off = resolve(name)
        views[name] = View(storage=root, offset=off, stride=graph.tensors[root].shape[2], h=h, w=w, c=c)
        members.setdefault(root, []).append(name)

    # ---- 3. liveness and offsets (4. concurrency) --------------------------
    touched: dict = {}      # storage -> the ops reading or writing any of its tensors
    for i, op in enumerate(graph.ops):
        for t in (*op.inputs, *op.outputs):
            touched.setdefault(views[t].storage, set()).add(i)
    storages = {}
    for root, names in members.items():
        h, w, c = graph.tensors[root].shape
        dtypes = {graph.tensors[n].dtype for n in names}
        if len(dtypes) != 1:
            raise CarveError(f"internal: storage '{root}' holds tensors of dtypes {sorted(dtypes)}")
        words = (h * w * c * ITEMSIZE[dtypes.pop()] + 3) // 4
        first = min(producer_idx.get(n, end) for n in names)
        last = max(max(last_use.get(n, -1), producer_idx.get(n, -1)) for n in names)
        first, last, lanes = _concurrent_life(first, last, touched.get(root, set()), regions)
        storages[root] = Storage(name=root, floats=words, first=first, last=last, lanes=lanes)

    def conflict(p: Storage, st: Storage) -> bool:
        if not (p.last < st.first or st.last < p.first):
            return True
        theirs = dict(p.lanes)
        return any(r in theirs and theirs[r] != k for r, k in st.lanes)

    placed_st: list = []
    for st in sorted(storages.values(), key=lambda s: (-s.floats, s.first, s.name)):
        size = _align(st.floats * 4)
        busy = sorted((p.offset, p.offset + _align(p.floats * 4)) for p in placed_st if conflict(p, st))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed_st.append(Storage(st.name, st.floats, st.first, st.last, offset, st.lanes))
    storages = {s.name: s for s in placed_st}
    arena = max((s.offset + _align(s.floats * 4) for s in placed_st), default=0) + TAIL_PAD
    return Plan(views=views, storages=storages, copies=tuple(copies), arena_bytes=_align(arena), regions=tuple(regions))


def _concurrent_life(first: int, last: int, ops: set, regions: tuple) -> tuple:
    """(first, last, lanes) of a storage alive over [first, last] and touched by ``ops``, under the concurrent
    ``regions`` (outer ones before the regions they hold): unchanged outside them; inside one, a (region, lane) tag
    when a single lane's ops alone touch it there, else its life stretched over the whole region."""
    lanes = []
    for r, reg in enumerate(regions):
        if last < reg.lo or first > reg.hi:
            continue
        inside = {i for i in ops if reg.lo <= i <= reg.hi}
        owners = {next((k for k, lane_ops in enumerate(reg.lanes) if i in lane_ops), None) for i in inside}
        if first >= reg.lo and last <= reg.hi and len(owners) == 1 and None not in owners:
            lanes.append((r, owners.pop()))
        else:
            first, last = min(first, reg.lo), max(last, reg.hi)
    return first, last, tuple(lanes)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN
