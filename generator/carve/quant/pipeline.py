"""The quantization pass as one function: float graph + calibration images -> quantized graph + report.

    calibrate (float executor + observers) -> estimate ranges -> rewrite with every conv / add in int8
      -> sensitivity (each op alone, then the greedy selection measured on the mixed graph)
      -> rewrite again with the selected ops in float -> report (quant.json)

``compiler.compile_model`` runs it after passes.optimize when ``--precision int8`` is asked;
``compiler.quantized_graph`` runs it without a backend (tests, tools).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import calibrate, report, rewrite, sensitivity


@dataclass(frozen=True)
class QuantResult:
    graph: object           # the quantized ir.Graph (validated)
    float_graph: object     # the float graph it came from (after passes.optimize)
    report: dict            # quant.json as a dict
    json: bytes             # quant.json's bytes
    summary: dict           # for the generation summary (report.summary)
    ranges: dict            # {observation key: (lo, hi)}
    errors: dict            # {op: sensitivity.OpError} of every conv2d / add alone in int8
    selection: object       # sensitivity.Selection: the ops kept in float32 and the measured rounds


def quantize_model(float_graph, images, progress=None, estimator: str = calibrate.DEFAULT_ESTIMATOR,
                   threshold_db: float | None = None,
                   sens_images: int = sensitivity.SENSITIVITY_IMAGES) -> QuantResult:
    """Quantize ``float_graph`` (after passes.optimize) from ``images`` (images.CalibImages). ``threshold_db``:
    one threshold for every criterion of the sensitivity pass (None: sensitivity.thresholds' defaults; -inf-like
    values keep every conv / add in int8)."""
    stats = calibrate.calibrate(float_graph, images, progress)
    ranges = calibrate.ranges(float_graph, stats, estimator)
    all_int8 = rewrite.quantize(float_graph, ranges)
    errors = sensitivity.measure(float_graph, all_int8.graph, images, sens_images, progress)
    limits = sensitivity.thresholds(float_graph, threshold_db)
    sel = sensitivity.select(float_graph, ranges, images, errors, limits, sens_images, progress=progress)
    keep = sel.keep
    final = rewrite.quantize(float_graph, ranges, keep) if keep else all_int8
    rows = report.op_rows(float_graph, final.precisions, errors, sel)
    rep = report.build(float_graph, final.graph, images, rows, estimator, limits, sel,
                       min(sens_images, len(images)))
    return QuantResult(graph=final.graph, float_graph=float_graph, report=rep, json=report.to_json(rep),
                       summary=report.summary(rows, rep), ranges=ranges, errors=errors, selection=sel)
