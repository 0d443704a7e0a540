"""The quantization report: what ``quant.json`` (beside a package's code) and the generation summary say.

Everything in it is a function of the float graph, the calibration images' bytes and carve's code, written with
sorted keys and no time stamps or paths, so regenerating from the same images gives the same bytes.
"""

from __future__ import annotations

import json
import math

from .rewrite import QUANTIZABLE

FORMAT = "carve-quant"
VERSION = 1
NO_KERNEL = "no int8 kernel"


def _db(v):
    """SQNR for JSON: rounded to 0.01 dB; None when the op is exact (no error at all)."""
    if v is None or math.isinf(v) and v > 0:
        return None
    if math.isinf(v):
        return -999.0
    return round(float(v), 2)


def op_rows(float_graph, precisions: dict, errors: dict, keep_float, threshold_db: float) -> list:
    """One row per op of the float graph: name, kind, layer, precision ("int8" | "float32"), reason, and for conv2d
    / add the two errors of sensitivity.OpError (sqnr_db: at the op's output; output_sqnr_db: at the network's
    outputs, the op alone in int8)."""
    keep = set(keep_float)
    rows = []
    for op in float_graph.ops:
        p = "int8" if precisions[op.name] == "i8" else "float32"
        e = errors.get(op.name)
        row = dict(name=op.name, kind=op.kind, layer=op.layer, precision=p)
        if op.kind in QUANTIZABLE:
            if op.name in keep:
                reason = f"sensitivity: alone in int8, output SQNR {e.output_db:.1f} dB < {threshold_db:g} dB"
            else:
                reason = f"output SQNR {e.output_db:.1f} dB alone in int8" if math.isfinite(e.output_db) else "exact"
            row.update(sqnr_db=_db(e.local_db), output_sqnr_db=_db(e.output_db))
        elif p == "int8":
            reason = "moves int8 values (shares its inputs' QParams)"
        elif op.kind in ("concat", "slice", "maxpool2d", "upsample_nearest"):
            reason = "a float op reads it"
        else:
            reason = f"{NO_KERNEL} ({op.kind})"
        row["reason"] = reason
        rows.append(row)
    return rows


def build(float_graph, qgraph, images, rows: list, estimator: str, threshold_db: float, sens_images: int) -> dict:
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
            "metric": "SQNR (dB) of each conv / add run alone in int8 against float, over the images: sqnr_db at "
                      "its output, output_sqnr_db at the network's worst output; float32 when output_sqnr_db < "
                      "threshold_db",
            "images": sens_images,
            "threshold_db": threshold_db,
        },
        "ops": rows,
        "tensors": tensors,
    }


def to_json(report: dict) -> bytes:
    return (json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def summary(rows: list, report: dict) -> dict:
    """The generation summary's part: counts, the ops that stay in float (with their reason and error) and the int8
    ops with the largest errors."""
    qops = [r for r in rows if r["kind"] in QUANTIZABLE]
    n_float = sum(1 for r in qops if r["precision"] == "float32")
    warnings = []
    if 2 * n_float > len(qops):
        warnings.append(f"int8: {n_float} of {len(qops)} conv/add ops stay float32 (alone in int8, each costs the "
                        "network's outputs too much): this model gains little from int8; are the calibration "
                        "images like the ones it will see?")
    return {
        "warnings": warnings,
        "images": report["calibration"]["count"],
        "estimator": report["calibration"]["estimator"],
        "threshold_db": report["sensitivity"]["threshold_db"],
        "int8_ops": sum(1 for r in qops if r["precision"] == "int8"),
        "quantizable_ops": len(qops),
        "float_ops": [(r["name"], r["kind"], r["reason"]) for r in rows if r["precision"] == "float32"
                      and r["kind"] not in ("concat", "slice", "maxpool2d", "upsample_nearest")],
        "worst": sorted(((r["output_sqnr_db"], r["name"]) for r in qops if r["precision"] == "int8"
                         and r["output_sqnr_db"] is not None))[:5],
    }
