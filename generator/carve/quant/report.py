"""The quantization report: what ``quant.json`` (beside a package's code) and the generation summary say.

Everything in it is a function of the float graph, the calibration images' bytes and carve's code, written with
sorted keys and no time stamps or paths, so regenerating from the same images gives the same bytes.
"""

from __future__ import annotations

import json
import math

from .rewrite import QUANTIZABLE
from .sensitivity import DETECTION_CONF, FLOAT_BUDGET

FORMAT = "carve-quant"
VERSION = 2
NO_KERNEL = "no int8 kernel"


def _db(v):
    """SQNR for JSON: rounded to 0.01 dB; None when the op is exact (no error at all)."""
    if v is None or math.isinf(v) and v > 0:
        return None
    if math.isinf(v):
        return -999.0
    return round(float(v), 2)


def _crit(criteria) -> dict:
    """{criterion: SQNR dB for JSON}."""
    return {c: _db(db) for c, db in criteria}


def _crit_text(criteria) -> str:
    return ", ".join(f"{c} {db:.1f} dB" if math.isfinite(db) else f"{c} no error" for c, db in criteria)


def op_rows(float_graph, precisions: dict, errors: dict, selection) -> list:
    """One row per op of the float graph: name, kind, layer, precision ("int8" | "float32"), reason, and for conv2d
    / add the errors of sensitivity.OpError (sqnr_db: at the op's output; output_sqnr_db: at the decoded outputs,
    the op alone in int8, the worst criterion; output_sqnr: every criterion) and, for an op kept in float32, the
    round of the sensitivity pass that moved it."""
    keep = set(selection.keep)
    round_of = {n: k for k, r in enumerate(selection.rounds) for n in r.added}
    rows = []
    for op in float_graph.ops:
        p = "int8" if precisions[op.name] == "i8" else "float32"
        e = errors.get(op.name)
        row = dict(name=op.name, kind=op.kind, layer=op.layer, precision=p)
        if op.kind in QUANTIZABLE:
            if op.name in keep:
                k = round_of[op.name]
                before = selection.rounds[k - 1].criteria
                reason = (f"sensitivity round {k}: the int8 graph measured {_crit_text(before)}; alone in int8 this "
                          f"op costs {_crit_text(e.criteria)}")
                row["round"] = k
            else:
                reason = (f"alone in int8: {_crit_text(e.criteria)}" if math.isfinite(e.output_db)
                          else "alone in int8: no error at the scored outputs")
            row.update(sqnr_db=_db(e.local_db), output_sqnr_db=_db(e.output_db), output_sqnr=_crit(e.criteria))
        elif p == "int8":
            reason = "moves int8 values (shares its inputs' QParams)"
        elif op.kind in ("concat", "slice", "maxpool2d", "upsample_nearest"):
            reason = "a float op reads it"
        else:
            reason = f"{NO_KERNEL} ({op.kind})"
        row["reason"] = reason
        rows.append(row)
    return rows


def build(float_graph, qgraph, images, rows: list, estimator: str, limits: dict, selection, sens_images: int) -> dict:
    """The report as a dict (see docs/quantization.md#quantjson)."""
    tensors = {}
    for name in sorted(qgraph.tensors):
        t = qgraph.tensors[name]
        if t.dtype == "i8":
            tensors[name] = dict(shape=list(t.shape), scale=float(t.quant.scale), zero_point=int(t.quant.zero_point))
    meta = float_graph.meta
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": float_graph.name,
        "weights_sha256": meta.get("weights_sha256"),
        "input_hw": list(meta.get("input_hw") or ()),
        "scheme": {
            "weights": "int8, per output channel, symmetric (zero point 0, [-127, 127])",
            "activations": "int8, per tensor, asymmetric: real = scale * (q - zero_point)",
            "accumulator": "int32; bias int32 at scale_in * scale_w",
            "requantize": "(acc * mul + 2^(shift-1)) >> shift, mul in [2^30, 2^31)",
            "silu": "256-entry int8 lookup table",
        },
        "calibration": {
            "count": len(images),
            "files_in_folder": int(getattr(images, "total", len(images))),
            "images": [dict(name=n, sha256=h) for n, h in zip(images.names, images.sha256)],
            "estimator": estimator,
        },
        "sensitivity": {
            "metric": "SQNR (dB) at the decoded outputs against float over the images: for a detection head, at "
                      "the anchors the float graph detects at (score > detection_conf), box (edge errors relative "
                      "to the box size), score (sigmoid class scores), extra (seg / pose / obb channels); else each "
                      "network output. Each conv / add alone in int8 (output_sqnr), then greedy: the all-int8 "
                      "graph measured, the ops whose cost alone explains most of a criterion below its threshold "
                      "moved to float32, measured again (rounds)",
            "images": sens_images,
            "detection_conf": DETECTION_CONF,
            "thresholds_db": {c: _db(v) for c, v in sorted(limits.items())},
            "float_budget": FLOAT_BUDGET,
            "rounds": [dict(added=list(r.added), output_sqnr=_crit(r.criteria)) for r in selection.rounds],
            "met": selection.met,
            "stop": selection.stop,
            "float_flops": int(selection.float_flops),
            "total_flops": int(selection.total_flops),
        },
        "ops": rows,
        "tensors": tensors,
    }


def to_json(report: dict) -> bytes:
    return (json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def summary(rows: list, report: dict) -> dict:
    """The generation summary's part: counts, the measured errors of the int8 graph against the thresholds, the
    ops that stay in float (with their reason and error) and the int8 ops with the largest errors alone."""
    qops = [r for r in rows if r["kind"] in QUANTIZABLE]
    n_float = sum(1 for r in qops if r["precision"] == "float32")
    sens = report["sensitivity"]
    measured = sens["rounds"][-1]["output_sqnr"]
    warnings = []
    if 2 * n_float > len(qops):
        warnings.append(f"int8: {n_float} of {len(qops)} conv/add ops stay float32 (in int8 they cost the "
                        "network's outputs too much): this model gains little from int8; are the calibration "
                        "images like the ones it will see?")
    if not sens["met"]:
        short = ", ".join(f"{c} {'-' if v is None else v} dB < {sens['thresholds_db'][c]:g}" for c, v in
                          sorted(measured.items()) if v is not None and v < sens["thresholds_db"][c])
        why = (f"the budget of {sens['float_budget']:.0%} of the FLOPs in float32 is spent" if sens["stop"] == "budget"
               else f"after {len(sens['rounds']) - 1} rounds")
        warnings.append(f"int8: the int8 graph misses the sensitivity thresholds ({short}): {why}")
    return {
        "warnings": warnings,
        "images": report["calibration"]["count"],
        "estimator": report["calibration"]["estimator"],
        "thresholds_db": sens["thresholds_db"],
        "measured_db": measured,
        "float_flops_share": sens["float_flops"] / sens["total_flops"] if sens["total_flops"] else 0.0,
        "int8_ops": sum(1 for r in qops if r["precision"] == "int8"),
        "quantizable_ops": len(qops),
        "float_ops": [(r["name"], r["kind"], r["reason"]) for r in rows if r["precision"] == "float32"
                      and r["kind"] not in ("concat", "slice", "maxpool2d", "upsample_nearest")],
        "worst": sorted(((r["output_sqnr_db"], r["name"]) for r in qops if r["precision"] == "int8"
                         and r["output_sqnr_db"] is not None))[:5],
    }
