"""End-to-end agreement of a quantized graph with its float graph (detect): what the threshold of the sensitivity
pass was chosen by, and what the tests check (docs/quantization.md#measured-on-the-demo-model)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import floatexec, simulate


def iou(a, b) -> float:
    lt = np.maximum(a[:2], b[:2])
    rb = np.minimum(a[2:4], b[2:4])
    inter = float(np.prod(np.clip(rb - lt, 0, None)))
    union = float(np.prod(a[2:4] - a[:2]) + np.prod(b[2:4] - b[:2]) - inter)
    return inter / union if union > 0 else 0.0


@dataclass
class Agreement:
    """Float detections above conf matched by int8 detections of the same class (greedy, best score first), the
    int8 side taken down to ``conf - slack`` so that a score that only crosses conf counts as a score difference,
    not as a lost detection."""

    reference: int = 0                  # float detections (score > conf)
    matched: int = 0                    # of them, with an int8 match at IoU > min_iou
    extra: int = 0                      # int8 detections (score > conf) matching no float one above conf - slack
    score_diffs: list = field(default_factory=list)
    ious: list = field(default_factory=list)

    def add(self, other: "Agreement") -> None:
        self.reference += other.reference
        self.matched += other.matched
        self.extra += other.extra
        self.score_diffs += other.score_diffs
        self.ious += other.ious

    def line(self) -> str:
        d = np.asarray(self.score_diffs) if self.score_diffs else np.zeros(1)
        return (f"{self.matched}/{self.reference} matched at IoU > 0.9, {self.extra} extra, |score diff| mean "
                f"{d.mean():.4f} p95 {np.percentile(d, 95):.4f} max {d.max():.4f}")


def _rows(rows, conf):
    return [r for r in np.asarray(rows, np.float64).reshape(-1, 6) if r[4] > conf]


def match(ref_rows, rows, conf: float, min_iou: float = 0.9, slack: float = 0.1) -> Agreement:
    """Agreement of int8 rows (k, 6) [x1, y1, x2, y2, score, class] with the float rows."""
    ref, ref_low = _rows(ref_rows, conf), _rows(ref_rows, conf - slack)
    cand, cand_low = _rows(rows, conf), _rows(rows, conf - slack)
    ag = Agreement(reference=len(ref))
    used = set()
    for r in sorted(ref, key=lambda r: -r[4]):
        best, arg = 0.0, None
        for j, c in enumerate(cand_low):
            if j in used or c[5] != r[5]:
                continue
            v = iou(r, c)
            if v > best:
                best, arg = v, j
        if arg is not None and best > min_iou:
            used.add(arg)
            ag.matched += 1
            ag.ious.append(best)
            ag.score_diffs.append(abs(float(cand_low[arg][4] - r[4])))
    for c in cand:
        if not any(c[5] == r[5] and iou(r, c) > 0.5 for r in ref_low):
            ag.extra += 1
    return ag


def compare(float_graph, qgraph, inputs, conf: float) -> Agreement:
    """Agreement of the simulated quantized graph with the float graph over ``inputs`` (float32 images)."""
    total = Agreement()
    out = float_graph.outputs["output0"]
    for x in inputs:
        ref = floatexec.run(float_graph, x, postprocess=True, conf=conf)[out]
        got = simulate.run(qgraph, x, postprocess=True, conf=conf)[out]
        total.add(match(ref, got, conf))
    return total
