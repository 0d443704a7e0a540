"""Calibration: the float executor over the calibration images, one observer per value int8 needs a range of.

Each observed value (a tensor, a SiLU convolution's pre-activation ``<op>:pre``, a fused-residual convolution's
output before its add ``<op>:conv``: floatexec) gets a ``Stats``: its exact minimum and maximum over every image
and a histogram of its values (at most ``SAMPLES`` per image, evenly strided) with ``BINS`` equal bins whose range
grows (by merging bins, 2**k at a time) to hold every value seen. An estimator turns a Stats into the range [lo, hi] the
QParams cover (``estimate``):

* ``minmax``: the exact minimum and maximum;
* ``percentile``: the PERCENTILE-th percentiles at both ends (rare outliers clipped);
* ``mse``: the range that minimises the expected squared error of the int8 value (rounding inside the range,
  clipping outside), searched over the histogram.

``DEFAULT_ESTIMATOR`` is chosen by measurement on the demo model (docs/quantization.md#range-estimator); the
network's outputs always use ``minmax`` (``ranges``).
Outputs of concat, slice, max pool and upsample are not observed: their values are their inputs' values, and they
share their inputs' QParams (qparams.py).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import CarveError
from . import floatexec

BINS = 2048
SAMPLES = 1 << 18      # values per tensor and image that enter the histogram (evenly strided); min/max see all
PERCENTILE = 99.999
ESTIMATORS = ("minmax", "percentile", "mse")
DEFAULT_ESTIMATOR = "percentile"
SHARING = ("concat", "slice", "maxpool2d", "upsample_nearest")   # outputs share their inputs' QParams


@dataclass
class Stats:
    """Running range and histogram of one observed value."""

    lo: float = math.inf           # exact minimum seen
    hi: float = -math.inf          # exact maximum seen
    count: int = 0
    bad: float | None = None       # a NaN or infinity seen (the first), which int8 cannot hold
    h_lo: float = 0.0              # histogram: bin i holds [h_lo + i*width, h_lo + (i+1)*width)
    width: float = 0.0
    hist: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32).reshape(-1)
        if x.size == 0:
            return
        mn, mx = float(x.min()), float(x.max())
        if not (math.isfinite(mn) and math.isfinite(mx)):
            if self.bad is None:                                    # checked by the caller (check_finite)
                self.bad = mn if not math.isfinite(mn) else mx
            return
        if self.count == 0:
            span = mx - mn
            self.width = span / BINS if span > 0 else max(abs(mx), 1e-6) / BINS
            self.h_lo = mn
        self._cover(mn, mx)
        step = -(-x.size // SAMPLES)              # every step-th value (all of them up to SAMPLES values)
        v = (x[::step] - np.float32(self.h_lo)) * np.float32(1.0 / self.width)
        np.clip(v, 0, BINS - 1, out=v)
        self.hist += np.bincount(v.astype(np.intp), minlength=BINS)
        self.lo, self.hi = min(self.lo, mn), max(self.hi, mx)
        self.count += x.size

    def _cover(self, mn: float, mx: float) -> None:
        """Grow the histogram's range to hold [mn, mx]: bin width x 2**k, old bins merged f = 2**k at a time."""
        if mn >= self.h_lo and mx < self.h_lo + BINS * self.width:
            return
        k = 0
        while True:
            k += 1
            f = 1 << k
            w = self.width * f
            j = math.ceil((self.h_lo - mn) / w) if mn < self.h_lo else 0
            if j <= BINS and self.h_lo - j * w + BINS * w > mx:
                break
        new = np.zeros(BINS, np.int64)
        dst = np.minimum(j + np.arange(BINS) // f, BINS - 1)
        np.add.at(new, dst, self.hist)
        self.hist, self.h_lo, self.width = new, self.h_lo - j * w, w

    def finite(self) -> bool:
        return self.bad is None


def _percentile_range(s: Stats, pct: float) -> tuple:
    cum = np.cumsum(s.hist)
    total = cum[-1]
    tail = total * (1.0 - pct / 100.0)
    lo_bin = int(np.searchsorted(cum, tail, side="right"))
    hi_bin = int(np.searchsorted(cum, total - tail, side="left"))
    lo = max(s.lo, s.h_lo + lo_bin * s.width)
    hi = min(s.hi, s.h_lo + (hi_bin + 1) * s.width)
    return lo, hi


def _mse_range(s: Stats) -> tuple:
    """The [lo, hi] (lo <= 0 <= hi, as range_qparams widens to) minimising the expected squared error of an int8
    value over the histogram: step**2 / 12 for each value inside, (distance to the range)**2 outside. Searched by
    coordinate descent over hi, then lo, then hi again, on a grid of the histogram's bin edges."""
    centers = s.h_lo + (np.arange(BINS) + 0.5) * s.width
    c = s.hist.astype(np.float64)
    lo0, hi0 = min(s.lo, 0.0), max(s.hi, 0.0)

    def err(lo, hi):
        step = (hi - lo) / 255.0
        below = np.clip(lo - centers, 0, None)
        above = np.clip(centers - hi, 0, None)
        inside = (centers >= lo) & (centers <= hi)
        return float(np.sum(c * (below ** 2 + above ** 2)) + np.sum(c[inside]) * step * step / 12.0)

    def search(fixed_lo, fixed_hi, moving_hi: bool):
        best, arg = None, None
        edge = fixed_hi if moving_hi else fixed_lo
        for t in np.linspace(0.02, 1.0, 200):
            cand = edge * t
            e = err(fixed_lo, cand) if moving_hi else err(cand, fixed_hi)
            if best is None or e < best:
                best, arg = e, cand
        return arg

    lo, hi = lo0, hi0
    if hi > 0:
        hi = search(lo, hi0, True)
    if lo < 0:
        lo = search(lo0, hi, False)
    if hi > 0:
        hi = search(lo, hi0, True)
    return lo, hi


def estimate(s: Stats, estimator: str = DEFAULT_ESTIMATOR) -> tuple:
    """The range [lo, hi] of a Stats by ``estimator`` (one of ESTIMATORS)."""
    if estimator == "minmax" or s.count == 0 or s.lo == s.hi:
        return s.lo, s.hi
    if estimator == "percentile":
        return _percentile_range(s, PERCENTILE)
    if estimator == "mse":
        return _mse_range(s)
    raise ValueError(f"unknown range estimator {estimator!r} (one of {', '.join(ESTIMATORS)})")


def network_outputs(graph) -> tuple:
    """The tensors the network hands to post-processing or returns (inputs of e2e_detect / nms_detect, graph
    outputs no post-processing op writes), in graph order: what the sensitivity pass measures errors at, and whose
    ranges are never clipped (their extremes are the detections)."""
    out = []
    post_outputs = set()
    for op in graph.ops:
        if op.kind in floatexec.POSTPROCESS:
            out += [t for t in op.inputs if t not in out]
            post_outputs.update(op.outputs)
    out += [t for t in graph.outputs.values() if t not in post_outputs and t not in out]
    return tuple(out)


def ranges(graph, stats: dict, estimator: str = DEFAULT_ESTIMATOR) -> dict:
    """{key: (lo, hi)} of every observed key: ``estimator`` inside the network, min/max at the network's outputs
    (network_outputs): clipping there would cut the largest class logits, the confident detections."""
    outs = set(network_outputs(graph))
    return {k: estimate(s, "minmax" if k in outs else estimator) for k, s in stats.items()}


def observed_keys(graph) -> set:
    """What int8 needs a range of: the input, every output of a computing op (not of concat / slice / max pool /
    upsample, nor post-processing), the :pre of SiLU convolutions and the :conv of fused-residual ones."""
    keys = {graph.input}
    for op in graph.ops:
        if op.kind in SHARING or op.kind in floatexec.POSTPROCESS:
            continue
        keys.update(op.outputs)
        if op.kind == "conv2d":
            if op.attrs.get("act") == "silu":
                keys.add(floatexec.pre_key(op))
            if len(op.inputs) > 1:
                keys.add(floatexec.conv_key(op))
    return keys


def calibrate(graph, images, progress=None, every: int = 20) -> dict:
    """{key: Stats} over every image of ``images`` (a CalibImages, or a list of float32 inputs); progress lines
    ("calibrating: 37/200 images") every ``every`` images. CarveError when an activation is not finite."""
    keys = observed_keys(graph)
    stats = {k: Stats() for k in sorted(keys)}

    def observe(key, x):
        s = stats.get(key)
        if s is not None:
            s.add(x)
    n = len(images)
    t0 = time.perf_counter()
    for i in range(n):
        x = images.input(i) if hasattr(images, "input") else np.asarray(images[i], np.float32)
        floatexec.run(graph, x, observe=observe, keep=False)
        if progress and ((i + 1) % every == 0 or i + 1 == n):
            progress(f"calibrating: {i + 1}/{n} images ({time.perf_counter() - t0:.0f} s)")
    check_finite(graph, stats)
    return stats


def check_finite(graph, stats: dict) -> None:
    """CarveError naming the first op whose activation reached infinity or NaN on a calibration image."""
    producer = {}
    for op in graph.ops:
        for t in op.outputs:
            producer[t] = op
        producer[floatexec.pre_key(op)] = op
        producer[floatexec.conv_key(op)] = op
    for op in graph.ops:
        for key in (floatexec.pre_key(op), floatexec.conv_key(op)) + tuple(op.outputs):
            s = stats.get(key)
            if s is not None and not s.finite():
                raise CarveError(f"{op.name} (layer {op.layer}, {op.source or op.kind}): activations overflow int8 "
                                 f"ranges: tensor '{key}' reaches {s.bad} on "
                                 "the calibration images", hint="the checkpoint's activations are not finite in "
                                 "float32; use --precision fp32 (nothing was written)")
