"""The sensitivity pass: how much int8 costs the network's result, op by op, and which ops stay in float32.

The error is measured where it matters, on the decoded outputs (``Outputs``): for a detection head (e2e_detect /
nms_detect), at the anchors the float graph detects something at (best class score > ``DETECTION_CONF``; an image
with none: the best anchor of each level), three criteria:

* ``box``: the box edges' error relative to the box's size (left / right edge error over the box width, top /
  bottom over its height: what IoU sees, whatever the box's size or level), the mean of its square;
* ``score``: the class scores after the sigmoid (every class at those anchors);
* ``extra``: the extra channels of seg / pose / obb heads (mask coefficients, keypoints, angle), raw.

A model without such a head is scored at its network outputs (calibrate.network_outputs), raw. Each criterion is an
SQNR in dB, 10 log10(signal / noise) over the images (the box's signal: 1 per anchor, so 40 dB is an edge error of
1 % of the box's size, RMS).

Two passes, on ``SENSITIVITY_IMAGES`` calibration images:

1. ``measure``: each conv2d / add quantized **alone** (its float input(s) quantized with the QParams they have in
   the all-int8 graph, the op run as the quantized graph runs it, its output dequantized, the rest of the network in
   float): ``local_db`` at its own output, and its cost at the decoded outputs (``criteria``; ``output_db``: the
   worst criterion). These costs add up: the noise of several ops in int8 is about the sum of their noises alone,
   which is how a branch of ops each cheap alone (the box branch of a detection head) shows up.
2. ``select``: greedy. The whole graph in int8 (rewrite.quantize, run by the simulator) is measured; while a
   criterion is below ``THRESHOLD_DB``, the ops that explain most of the measured noise of the failing criteria
   (by their cost alone, largest first) go to float32 until the sum predicts the threshold is met, and the graph is
   measured again, at most ``MAX_ROUNDS`` times and within a budget of ``FLOAT_BUDGET`` of the conv FLOPs kept in
   float32. The measured errors of every round are reported (quant.json, the generation summary).

The threshold was chosen on the demo model by the mAP of the int8 packages on held-out images
(docs/quantization.md#sensitivity-pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ir import op_flops
from . import arith, floatexec, rewrite, simulate
from .calibrate import network_outputs
from .rewrite import QUANTIZABLE

SENSITIVITY_IMAGES = 8
THRESHOLDS_DB = {"box": 55.0, "score": 25.0, "extra": 25.0}   # per criterion of a detection head
OUTPUT_THRESHOLD_DB = 35.0  # each network output of a model without one
DETECTION_CONF = 0.25      # anchors whose float best class score exceeds it are the ones scored
MIN_BOX_CELLS = 0.5        # box sizes below half a grid cell count as half a cell (relative box error)
FLOAT_BUDGET = 0.10        # at most this share of the conv / add FLOPs stays in float32 (speed)
MAX_ROUNDS = 6             # measurements of the mixed graph after the all-int8 one
DETECT_TASKS = ("detect", "segment", "pose", "obb")


@dataclass(frozen=True)
class OpError:
    local_db: float         # SQNR at the op's output
    output_db: float        # SQNR at the decoded outputs, this op alone in int8: the worst criterion
    criteria: tuple = ()    # ((criterion, SQNR dB), ...) this op alone in int8
    ratios: tuple = ()      # ((criterion, noise / signal), ...): what adds up over ops


@dataclass(frozen=True)
class Round:
    added: tuple            # ops moved to float32 before this measurement (sorted)
    criteria: tuple         # ((criterion, SQNR dB), ...) of the graph measured


@dataclass(frozen=True)
class Selection:
    keep: tuple             # the ops that stay in float32, sorted
    rounds: tuple           # Round per measurement: the all-int8 graph first
    float_flops: int        # FLOPs of the conv / add ops kept in float32
    total_flops: int        # FLOPs of every conv / add op
    met: bool               # the last measurement meets the threshold
    stop: str               # why the loop ended (met | budget | rounds)


def sqnr_db(signal: float, noise: float) -> float:
    if noise <= 0.0:
        return math.inf
    if signal <= 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def _ratio_db(r: float) -> float:
    return math.inf if r <= 0.0 else -10.0 * math.log10(r)


class Outputs:
    """What the errors are measured on: ``reference(env)`` from a float env, ``compare(ref, graph, env)`` -> {criterion:
    (signal, noise)} for an env of ``graph`` (the float graph or a quantized one, whose head reads the same tensors
    under other names)."""

    def __init__(self, float_graph):
        self.head = next((op for op in float_graph.ops if op.kind in floatexec.POSTPROCESS
                          and op.attrs.get("task") in DETECT_TASKS), None)
        if self.head is None:
            self.tensors = network_outputs(float_graph)
            self.names = tuple(self.tensors)
        else:
            a = self.head.attrs
            self.per = a["inputs_per_level"]
            self.nc = a["nc"]
            self.levels = len(self.head.inputs) // self.per
            self.names = ("box", "score") + (("extra",) if self.per > 2 else ())

    def _inputs(self, graph, env) -> list:
        op = next(o for o in graph.ops if o.name == self.head.name)
        return [env[t] for t in op.inputs]

    def reference(self, graph, env):
        if self.head is None:
            return [np.asarray(env[t], np.float64) for t in self.tensors]
        ins = self._inputs(graph, env)
        sel, best_all = [], []
        for lv in range(self.levels):
            cls = np.asarray(ins[lv * self.per + 1], np.float64).reshape(-1, self.nc)
            best = floatexec.sigmoid(cls.max(axis=1))
            sel.append(np.nonzero(best > DETECTION_CONF)[0])
            best_all.append(best)
        if not any(len(s) for s in sel):                      # no detection: the best anchor of each level
            sel = [np.array([int(np.argmax(b))]) for b in best_all]
        return sel, self._values(ins, sel)

    def _values(self, ins, sel):
        out = []
        for lv, idx in enumerate(sel):
            vals = [np.asarray(ins[lv * self.per + j], np.float64).reshape(-1, ins[lv * self.per + j].shape[-1])[idx]
                    for j in range(self.per)]
            vals[1] = floatexec.sigmoid(vals[1])
            out.append(vals)
        return out

    def compare(self, ref, graph, env) -> dict:
        if self.head is None:
            res = {}
            for name, r, t in zip(self.names, ref, self.tensors):
                d = np.asarray(env[t], np.float64) - r
                res[name] = (float(np.sum(r * r)), float(np.sum(d * d)))
            return res
        sel, rv = ref
        gv = self._values(self._inputs(graph, env), sel)
        acc = {n: [0.0, 0.0] for n in self.names}
        for r, g in zip(rv, gv):
            if not len(r[0]):
                continue
            w, h = r[0][:, 0] + r[0][:, 2], r[0][:, 1] + r[0][:, 3]     # distances left, top, right, bottom
            size = np.maximum(np.stack([w, h, w, h], 1), MIN_BOX_CELLS)
            rel = (g[0][:, :4] - r[0][:, :4]) / size
            acc["box"][0] += float(len(rel))
            acc["box"][1] += float(np.sum(np.mean(rel * rel, axis=1)))
            d = g[1] - r[1]
            acc["score"][0] += float(np.sum(r[1] * r[1]))
            acc["score"][1] += float(np.sum(d * d))
            for j in range(2, self.per):
                d = g[j] - r[j]
                acc["extra"][0] += float(np.sum(r[j] * r[j]))
                acc["extra"][1] += float(np.sum(d * d))
        return {n: (s, e) for n, (s, e) in acc.items()}


def picks(n: int, count: int) -> list:
    """``count`` image indices spread evenly over ``n``."""
    return sorted({int(i * n / min(count, n)) for i in range(min(count, n))})


def _input(images, i):
    return images.input(i) if hasattr(images, "input") else np.asarray(images[i], np.float32)


def isolated(qgraph, op, env) -> np.ndarray:
    """The dequantized int8 output of float-graph op ``op`` run alone, as ``qgraph`` runs it, on the float env."""
    qt = qgraph.tensors
    by_name = {o.name: o for o in qgraph.ops}
    qop = by_name[op.name]
    if op.kind == "conv2d":
        xq = qt[qop.inputs[0]].quant
        x = arith.quantize(env[op.inputs[0]], xq.scale, xq.zero_point)
        y = simulate.qconv2d(qgraph, qop, x, xq.zero_point)
        out = qop.outputs[0]
        if len(op.inputs) > 1:
            add = by_name[f"{op.name}:add"]
            rq = qt[add.inputs[1]].quant
            r = arith.quantize(env[op.inputs[1]], rq.scale, rq.zero_point)
            y = simulate.eval_op(qgraph, add, [y, r])[0]
            out = add.outputs[0]
    else:                                                     # add
        ins = []
        for t, qname in zip(op.inputs, qop.inputs):
            q = qt[qname].quant
            ins.append(arith.quantize(env[t], q.scale, q.zero_point))
        y = simulate.eval_op(qgraph, qop, ins)[0]
        out = qop.outputs[0]
    q = qt[out].quant
    return arith.dequantize(y, q.scale, q.zero_point)


def _downstream(float_graph, start: int, env: dict, changed: str, y) -> dict:
    """The float env after op ``start`` wrote ``y`` instead of env[changed]: the ops that depend on it rerun."""
    e = dict(env)
    e[changed] = y
    dirty = {changed}
    for op in float_graph.ops[start + 1:]:
        if op.kind in floatexec.POSTPROCESS or not any(t in dirty for t in op.inputs):
            continue
        for t, v in zip(op.outputs, floatexec.eval_op(float_graph, op, [e[t] for t in op.inputs])):
            e[t] = v
            dirty.add(t)
    return e


def measure(float_graph, qgraph, images, count: int = SENSITIVITY_IMAGES, progress=None) -> dict:
    """{op name: OpError} of every conv2d / add of ``float_graph`` alone in int8, from the all-int8 ``qgraph``
    (rewrite.quantize with nothing kept in float), on ``count`` images spread evenly over ``images``."""
    index = {op.name: i for i, op in enumerate(float_graph.ops)}
    ops = [op for op in float_graph.ops if op.kind in QUANTIZABLE]
    outs = Outputs(float_graph)
    local = {op.name: [0.0, 0.0] for op in ops}
    output = {op.name: {c: [0.0, 0.0] for c in outs.names} for op in ops}
    chosen = picks(len(images), count)
    for k, i in enumerate(chosen):
        env = floatexec.run(float_graph, _input(images, i))
        ref = outs.reference(float_graph, env)
        for op in ops:
            r = np.asarray(env[op.outputs[0]], np.float64)
            y = isolated(qgraph, op, env)
            d = y.astype(np.float64) - r
            local[op.name][0] += float(np.sum(r * r))
            local[op.name][1] += float(np.sum(d * d))
            e = _downstream(float_graph, index[op.name], env, op.outputs[0], y)
            for c, (s, n) in outs.compare(ref, float_graph, e).items():
                output[op.name][c][0] += s
                output[op.name][c][1] += n
        if progress:
            progress(f"sensitivity: {k + 1}/{len(chosen)} images")
    res = {}
    for op in ops:
        crit = tuple((c, sqnr_db(*output[op.name][c])) for c in outs.names)
        ratios = tuple((c, n / s if s > 0 else (0.0 if n <= 0 else math.inf)) for c, (s, n) in
                       ((c, output[op.name][c]) for c in outs.names))
        res[op.name] = OpError(sqnr_db(*local[op.name]), min(db for _, db in crit), crit, ratios)
    return res


def measure_graph(float_graph, qgraph, images, count: int = SENSITIVITY_IMAGES) -> dict:
    """{criterion: noise / signal} of the quantized graph ``qgraph`` (the simulator) against ``float_graph`` on the
    same images as ``measure``."""
    outs = Outputs(float_graph)
    acc = {c: [0.0, 0.0] for c in outs.names}
    for i in picks(len(images), count):
        x = _input(images, i)
        ref = outs.reference(float_graph, floatexec.run(float_graph, x, keep=False))
        for c, (s, n) in outs.compare(ref, qgraph, simulate.run(qgraph, x)).items():
            acc[c][0] += s
            acc[c][1] += n
    return {c: (n / s if s > 0 else (0.0 if n <= 0 else math.inf)) for c, (s, n) in acc.items()}


def _criteria(ratios: dict) -> tuple:
    return tuple((c, _ratio_db(r)) for c, r in ratios.items())


def thresholds(float_graph, threshold_db: float | None = None) -> dict:
    """{criterion: threshold dB} of ``float_graph``'s outputs: THRESHOLDS_DB for a detection head,
    OUTPUT_THRESHOLD_DB per network output otherwise; ``threshold_db`` (not None) for every criterion."""
    names = Outputs(float_graph).names
    if threshold_db is not None:
        return {c: float(threshold_db) for c in names}
    return {c: THRESHOLDS_DB.get(c, OUTPUT_THRESHOLD_DB) for c in names}


def _allowed(db: float) -> float:
    """The noise / signal ratio a threshold of ``db`` allows (any, below -3000 dB)."""
    return math.inf if db < -3000.0 else 10.0 ** (-db / 10.0)


def select(float_graph, ranges, images, errors: dict, limits: dict | None = None,
           count: int = SENSITIVITY_IMAGES, budget: float = FLOAT_BUDGET, progress=None) -> Selection:
    """The ops that stay in float32: the greedy loop of the module's docstring, on the measured errors ``errors``
    (``measure``) and the graph rewrite.quantize(float_graph, ranges, keep) measured by the simulator, against
    ``limits`` ({criterion: dB}; default ``thresholds(float_graph)``)."""
    limits = limits or thresholds(float_graph)
    allowed = {c: _allowed(db) for c, db in limits.items()}
    flops = {op.name: op_flops(float_graph, op) for op in float_graph.ops if op.kind in QUANTIZABLE}
    total = sum(flops.values())
    alone = {name: dict(e.ratios) for name, e in errors.items()}
    keep: list = []
    spent = 0
    cur = measure_graph(float_graph, rewrite.quantize(float_graph, ranges).graph, images, count)
    rounds = [Round((), _criteria(cur))]
    stop = "met"
    while any(r > allowed[c] for c, r in cur.items()):
        if len(rounds) > MAX_ROUNDS:
            stop = "rounds"
            break
        failing = [c for c, r in cur.items() if r > allowed[c]]
        share = {n: max(alone[n].get(c, 0.0) / cur[c] for c in failing) for n in alone if n not in keep}
        order = sorted(share, key=lambda n: (-share[n], n))
        pred = {c: cur[c] for c in failing}
        batch = []
        for n in order:
            if share[n] <= 0.0 or all(pred[c] <= allowed[c] for c in failing):
                break
            if spent + flops[n] > budget * total:
                continue
            batch.append(n)
            spent += flops[n]
            for c in failing:
                pred[c] -= alone[n].get(c, 0.0)
        if not batch:
            stop = "budget"
            break
        keep += batch
        cur = measure_graph(float_graph, rewrite.quantize(float_graph, ranges, tuple(sorted(keep))).graph, images,
                            count)
        rounds.append(Round(tuple(sorted(batch)), _criteria(cur)))
        if progress:
            worst = min(db for _, db in rounds[-1].criteria)
            progress(f"sensitivity: round {len(rounds) - 1}: {len(keep)} ops in float32, worst {worst:.1f} dB")
    met = all(r <= allowed[c] for c, r in cur.items())
    return Selection(tuple(sorted(keep)), tuple(rounds), spent, total, met, "met" if met else stop)


