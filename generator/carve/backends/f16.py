"""--weights-dtype f16: what an f16 package stores, and the pieces that rebuild the f32 package's weights from it.

An Ultralytics checkpoint holds float16 tensors (the trainer saves ``model.half()``). An f16 package stores
them as the checkpoint holds them, half the bytes of float32, and rebuilds at create the float32 weights that
the f32 package links, bit for bit, so that both packages compute the same bits:

* a BatchNorm-folded convolution (``Graph.folds``): its unfolded weights and its BatchNorm's gamma, beta,
  mean and var (and its own bias, if any), folded at create with the arithmetic of ``passes.fold_arrays``
  (float32, one correctly rounded operation at a time, in the same order);
* a Winograd convolution (the xnnpack backend's ``winograd_weights``): the (cout, cin, 3, 3) weights, folded,
  then transformed at create in the same order of float64 operations;
* any other tensor (a plain conv's weights and bias, a transposed conv's, a linear layer's): its halves, in the
  blob's layout, widened.

``build`` returns the payload (little-endian halves) and the pieces that say how (``carve_weights_piece`` of
runtime/carve_weights.h, which ``carve_weights_expand`` runs); it runs the pieces itself with numpy (``expand``)
and checks that they give the f32 blob's bits. A value that is not a float16 (a checkpoint saved in float32, e.g.
``tools/oracle.py make-checkpoint --no-half``) cannot be stored losslessly: such a tensor is rounded to float16
(after the fold, as carve did before this module), the package is no longer bit-identical to the f32 one, and
``lossy_tensors`` names them for the warning ``carve generate`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import CarveError

F16_MAX = 65504.0
MAX_DIMS = 6            # CARVE_WEIGHTS_MAX_DIMS of runtime/carve_weights.h


def is_f16(a: np.ndarray) -> bool:
    """Whether every value of the float32 array ``a`` is a float16 (rounding it to float16 changes no bit)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    with np.errstate(over="ignore"):   # beyond float16's range: inf, not equal
        return bool(np.array_equal(a.astype(np.float16).astype(np.float32).view(np.uint32), a.view(np.uint32)))


def fold_is_f16(fold) -> bool:
    """Whether every array a BatchNorm fold starts from is float16 (then the f16 package stores them)."""
    arrays = [fold.weight, fold.gamma, fold.beta, fold.mean, fold.var] + ([fold.bias] if fold.bias is not None else [])
    return all(is_f16(a) for a in arrays)


def lossy_tensors(graph) -> list:
    """The checkpoint tensors an f16 package of ``graph`` cannot store exactly (not float16), sorted: the
    sources of each fold that is not all float16, and each other weight that is not float16."""
    folded = {f.bias_name for f in graph.folds.values()} | set(graph.folds)
    out = set()
    for f in graph.folds.values():
        if f.weight_name in graph.weights and not fold_is_f16(f):
            out.update(f.sources)
    for name, w in graph.weights.items():
        if name not in folded and not is_f16(w):
            out.add(name)
    return sorted(out)


@dataclass
class Piece:
    """One carve_weights_piece: ``kind`` "halves" (``count`` halves at ``src`` widened to floats at ``dst``) or
    "conv" (a convolution's weights at ``dst``: ``bn`` folded, ``winograd`` transformed; see the module doc)."""

    kind: str
    name: str                 # the weight's macro (W_...), for the table's comment
    what: str                 # a comment
    dst: int                  # floats into the weights
    count: int                # floats written at dst (halves read at src for "halves")
    src: int                  # halves into the payload
    channels: int = 0
    cin: int = 0
    bn: bool = False
    bias: bool = False        # bn: the conv's own bias follows var
    winograd: bool = False
    bias_dst: int = 0         # bn: the folded biases
    bias_name: str = ""
    bn_src: int = 0           # bn: gamma, beta, mean, var (channels each) [, bias]
    eps: float = 0.0
    dims: tuple = ()
    steps: tuple = ()


@dataclass
class F16Weights:
    payload: bytes
    pieces: list
    lossy: list = field(default_factory=list)    # graph weights rounded to float16


class _Payload:
    def __init__(self):
        self.parts: list = []
        self.halves = 0

    def add(self, a: np.ndarray) -> int:
        h = np.ascontiguousarray(a, dtype=np.float32).reshape(-1).astype("<f2")
        self.parts.append(h)
        self.halves += h.size
        return self.halves - h.size

    def bytes(self) -> bytes:
        return np.concatenate(self.parts).tobytes() if self.parts else b""


def _round_checked(a: np.ndarray, name: str) -> np.ndarray:
    if a.size and float(np.max(np.abs(a))) > F16_MAX:
        raise CarveError(f"--weights-dtype f16: {name} is not float16 in the checkpoint and exceeds float16's range "
                         "(|w| > 65504)", hint="use --weights-dtype f32")
    return a


def channel_map(src, shape: tuple, channels: int) -> tuple:
    """(dims, steps) of a blob tensor laid out by ``src.layout`` from an array of ``shape`` whose first axis is
    ``channels`` output channels: element (i_0, ..., i_n) of dims (row-major, the blob's order) belongs to channel
    sum i_j * steps[j], and a channel >= ``channels`` is padding the layout added (zeros). Found by laying out
    the channel numbers themselves; adjacent dims merged, at most MAX_DIMS. Raises AssertionError (a carve bug)
    for a layout that is not of this form."""
    ids = np.broadcast_to((np.arange(channels, dtype=np.int64) + 1).reshape((-1,) + (1,) * (len(shape) - 1)),
                          shape)
    d = np.ascontiguousarray(src.layout(np.ascontiguousarray(ids)) if src.layout else ids)
    dims = d.shape
    origin = (0,) * d.ndim
    if d.size == 0 or d[origin] != 1:
        raise AssertionError(f"{src.tensor}: its layout does not start with channel 0")
    steps = []
    for j, n in enumerate(dims):
        if n == 1:
            steps.append(0)
            continue
        unit = list(origin)
        unit[j] = 1
        v = int(d[tuple(unit)])
        steps.append(v - 1 if v else channels)   # a step onto padding: any step >= channels
    pred = _channels_of(dims, steps)
    want = np.where(pred < channels, pred + 1, 0)
    if not np.array_equal(d.reshape(-1), want.reshape(-1)):
        raise AssertionError(f"{src.tensor}: its layout is not affine in the channels")
    dims = list(dims)
    j = 0
    while j < len(dims):                    # drop dims of one element, merge runs of one stride
        if dims[j] == 1 and len(dims) > 1:
            del dims[j], steps[j]
            continue
        if j + 1 < len(dims) and steps[j] == steps[j + 1] * dims[j + 1]:
            dims[j:j + 2] = [dims[j] * dims[j + 1]]
            steps[j:j + 2] = [steps[j + 1]]
            continue
        j += 1
    if len(dims) > MAX_DIMS:
        raise AssertionError(f"{src.tensor}: its layout needs {len(dims)} dims (carve_weights_piece has {MAX_DIMS})")
    return tuple(dims), tuple(steps)


def _channels_of(dims, steps) -> np.ndarray:
    """The channel of every element of a (dims, steps) map, flat in the blob's order (int64)."""
    pred = np.zeros(dims, dtype=np.int64)
    for j, (n, s) in enumerate(zip(dims, steps)):
        if s:
            pred += (np.arange(n, dtype=np.int64) * s).reshape((1,) * j + (n,) + (1,) * (len(dims) - j - 1))
    return pred.reshape(-1)


def build(graph, program: dict) -> F16Weights:
    """The payload and pieces of an f16 package of ``program`` (lowering.lower's: its weight_refs and
    weight_sources, in blob order), checked against the program's float32 blob (see ``expand``)."""
    refs, sources = program["weight_refs"], program["weight_sources"]
    where = {(s.tensor, s.rows): r for r, s in zip(refs, sources)}
    exact_folds = {n: f for n, f in graph.folds.items() if fold_is_f16(f)}
    claimed_bias = {f.bias_name for f in exact_folds.values()}
    lossy = set()
    out = _Payload()
    pieces = []
    for ref, src in zip(refs, sources):
        if src.tensor in claimed_bias:
            continue                                      # its weight's piece folds it
        fold = exact_folds.get(src.tensor)
        w = graph.weights[src.tensor]
        if fold is not None:
            c0, c1 = src.rows or (0, w.shape[0])
            bias_ref = where.get((fold.bias_name, src.rows))
            if bias_ref is None:
                raise AssertionError(f"{src.tensor}: no bias in the blob for rows {src.rows}")  # a backend's bug
            rows = f" [out {c0}:{c1}]" if src.rows and (c0, c1) != (0, w.shape[0]) else ""
            what = f"{ref.macro}, {ref.shape}: {fold.sources[0]}{rows} with its BatchNorm folded"
            p = Piece("conv", ref.macro, what, dst=int(ref), count=0, src=0,
                      channels=c1 - c0, bn=True, bias=fold.bias is not None, bias_dst=int(bias_ref),
                      bias_name=bias_ref.macro, eps=float(fold.eps))
            unfolded = fold.weight[c0:c1]
            if src.transform == "winograd":
                p.winograd, p.cin = True, unfolded.shape[1]
                p.src = out.add(unfolded)
                p.count = 16 * unfolded.size // 9
                p.what += ", then Winograd's G g G^T"
            elif src.transform is None:
                laid = src.layout(unfolded) if src.layout else unfolded
                p.src = out.add(laid)
                p.count = laid.size
                p.dims, p.steps = channel_map(src, unfolded.shape, c1 - c0)
            else:  # pragma: no cover - a backend's bug
                raise AssertionError(f"{src.tensor}: no f16 piece for transform {src.transform!r}")
            p.bn_src = out.add(np.concatenate([a[c0:c1] for a in (fold.gamma, fold.beta, fold.mean, fold.var)]
                                              + ([fold.bias[c0:c1]] if fold.bias is not None else [])))
            pieces.append(p)
            continue
        rows = src.rows_of(w)
        if not is_f16(rows):
            lossy.add(src.tensor)
            _round_checked(rows, src.tensor)
        if src.transform == "winograd":
            # weights without an exact fold (rounded, if not float16): widened, then transformed at create
            rounded = " (rounded)" if src.tensor in lossy else ""
            pieces.append(Piece("conv", ref.macro, f"{ref.macro}, {ref.shape}: {src.tensor}{rounded}, Winograd's "
                                "G g G^T", dst=int(ref),
                                count=16 * rows.size // 9, src=out.add(rows), channels=rows.shape[0],
                                cin=rows.shape[1], winograd=True))
        elif src.transform is None:
            laid = src.apply(w)
            pieces.append(Piece("halves", ref.macro, f"{ref.macro}, {ref.shape}: {src.tensor}"
                                + ("" if src.tensor not in lossy else " (rounded)"), dst=int(ref), count=laid.size,
                                src=out.add(laid)))
        else:  # pragma: no cover - a backend's bug
            raise AssertionError(f"{src.tensor}: no f16 piece for transform {src.transform!r}")
    result = F16Weights(payload=out.bytes(), pieces=pieces, lossy=sorted(lossy))
    _check(result, program, refs, sources)
    return result


def expand(payload: bytes, pieces: list, floats: int) -> np.ndarray:
    """What carve_weights_expand (runtime/carve_weights.c) computes, with numpy: the float32 weights the pieces
    rebuild from the payload (0 where no piece writes)."""
    from .xnnpack import winograd_weights
    halves = np.frombuffer(payload, dtype="<f2")
    out = np.zeros(floats, dtype=np.float32)
    f32 = np.float32
    for p in pieces:
        if p.kind == "halves":
            out[p.dst:p.dst + p.count] = halves[p.src:p.src + p.count].astype(np.float32)
            continue
        n = p.channels
        if p.winograd:
            w = halves[p.src:p.src + 9 * n * p.cin].astype(np.float32).reshape(n, p.cin, 3, 3)
        else:
            w = halves[p.src:p.src + p.count].astype(np.float32)
        if p.bn:
            bn = halves[p.bn_src:p.bn_src + (5 if p.bias else 4) * n].astype(np.float32).reshape(-1, n)
            gamma, beta, mean, var = bn[:4]
            r = f32(1) / np.sqrt(var + f32(p.eps))
            scale = gamma * r
            b = bn[4] if p.bias else np.zeros(n, dtype=np.float32)
            out[p.bias_dst:p.bias_dst + n] = (b - mean) * r * gamma + beta
            if p.winograd:
                w = w * scale[:, None, None, None]
            else:
                ch = _channels_of(p.dims, p.steps)
                real = ch < n
                w = w.copy()
                w[real] = w[real] * scale[ch[real]]
        out[p.dst:p.dst + p.count] = winograd_weights(w).reshape(-1) if p.winograd else w
    return out


def _check(result: F16Weights, program: dict, refs: list, sources: list) -> None:
    """The pieces give the blob's bits for every tensor that is not lossy, and write each blob tensor once."""
    blob = np.frombuffer(program["blob"], dtype="<f4")
    got = expand(result.payload, result.pieces, blob.size)
    written = np.zeros(blob.size, dtype=bool)
    for p in result.pieces:
        for a, n in ((p.dst, p.count), (p.bias_dst, p.channels if p.bn else 0)):
            if n and written[a:a + n].any():
                raise AssertionError(f"{p.name}: f16 pieces overlap")
            written[a:a + n] = True
    lossy = set(result.lossy)
    starts = sorted(int(r) for r in refs) + [blob.size]
    for ref, src in zip(refs, sources):
        if src.tensor in lossy:
            continue
        end = starts[starts.index(int(ref)) + 1]    # the next tensor's offset (the padding between is 0 in both)
        if not written[int(ref):end].any():
            raise AssertionError(f"{ref.macro}: no f16 piece writes it")
        if not np.array_equal(got[int(ref):end].view(np.uint32), blob[int(ref):end].view(np.uint32)):
            bad = int(np.argmax(got[int(ref):end].view(np.uint32) != blob[int(ref):end].view(np.uint32)))
            raise AssertionError(f"{ref.macro} ({src.tensor}): the f16 pieces give {got[int(ref) + bad]!r} at "
                                 f"{bad}, the f32 blob {blob[int(ref) + bad]!r}")
    if (got[~written] != 0).any() or (blob[~written] != 0).any():
        raise AssertionError("the f16 pieces leave blob floats unwritten that are not 0")
