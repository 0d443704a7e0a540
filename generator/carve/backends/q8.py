"""The int8 ops of a quantized graph (--precision int8, generator/carve/quant/) on the CPU backends.

Each op of a quantized graph that reads or writes int8 tensors becomes one descriptor of the package's int8 table
(``k_q8_ops``, runtime/carve_q8.h) and one step of the backend's int8 step class (``Lowering.cls("q8")``) that runs
it: ``Q8Op`` (``carve_q8_run``, the calling thread: the portable backend) or ``Q8PoolOp`` (``carve_q8_run_pool``,
the thread pool: the xnnpack backend), the same bytes either way. ``qconv2d``
(CONV, its record packed by ``q8_pack.conv_record``), ``qadd`` (ADD), ``quantize`` / ``dequantize`` at the
boundaries with float ops, and the int8 forms of ``maxpool2d`` (MAXPOOL), ``upsample_nearest`` (UPSAMPLE2X) and the
concat inputs the memory plan copies (COPY). Float ops keep the backend's own lowering (``dtype_dispatch``).

Offsets in the int8 table are bytes: the arena's storage constants ``S_*`` and the blob's ``W_*`` count 4-byte
words (planner.py sizes int8 storages in words; WeightBlob stores int8 / int32 arrays as bytes in whole words), so
an int8 view at channel k of storage S is ``4 * S + k``.
"""

from __future__ import annotations

import numpy as np

from . import q8_pack
from .lowering import Lowering, c_float, square_conv_rule
from .steps import Q8Op


def is_i8(lw: Lowering, t: str) -> bool:
    return lw.graph.tensors[t].dtype == "i8"


def byte_off(lw: Lowering, t: str, extra: int = 0) -> str:
    """The arena offset of a tensor in bytes, as a C expression over its storage constant (Lowering.byte_off)."""
    return lw.byte_off(t, extra)


def blob_bytes(ref) -> str:
    """A blob offset (a WeightRef, in words) in bytes."""
    return f"4 * {ref}"


def table_entry(lw: Lowering, kind: str, name: str, **fields) -> int:
    """Appends a descriptor of kind CARVE_Q8_<kind> to the package's int8 table (k_q8_ops): its index."""
    table = lw.tables.setdefault("q8_ops", [])
    table.append(dict(kind="CARVE_Q8_" + kind, name=name, fields=fields))
    return len(table) - 1


def _desc(lw: Lowering, op, kind: str, what: str | None = None, name: str | None = None, **fields) -> Q8Op:
    """A step of the backend's int8 step class (role "q8": Q8Op, carve_q8_run; the xnnpack backend's Q8PoolOp,
    carve_q8_run_pool) running a new descriptor of the int8 table."""
    return lw.cls("q8")(**lw.head(op), index=table_entry(lw, kind, name or op.name, **fields), what=what)


def zero(lw: Lowering, t: str) -> int:
    return int(lw.graph.tensors[t].quant.zero_point)


def scale(lw: Lowering, t: str) -> str:
    """A QParams scale as a C float literal that reads back as the same float32."""
    return c_float(lw.graph.tensors[t].quant.scale)


def _blob(lw: Lowering, op, what: str, data: np.ndarray, suffix: str):
    """Appends bytes (a uint8 array) or an int8 table to the blob under W_<op><suffix>."""
    return lw.blob.add(data, "W_" + op.name + suffix, op.params.get(what, op.name))


def conv_fields(lw: Lowering, op, record: bytes) -> dict:
    """The CONV descriptor's fields of a qconv2d whose weight record (its kernel's layout) is ``record``; the record
    and the SiLU table are appended to the blob (64-byte aligned, as every blob tensor)."""
    x, y = op.inputs[0], op.outputs[0]
    h, w, _ = lw.shape(x)
    a = op.attrs
    wref = _blob(lw, op, "weight", np.frombuffer(record, np.uint8), "")
    act = a.get("act", "none")
    lut = _blob(lw, op, "lut", np.asarray(lw.graph.weights[op.params["lut"]], np.int8), "_LUT") if act == "silu" else None
    k = a["kernel"][0]
    return dict(kh=k, kw=k, stride=a["stride"], pad=a["pad"], groups=a["groups"], cin=a["cin"], cout=a["cout"],
                h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y), in_off=byte_off(lw, x),
                out_off=byte_off(lw, y), weight_off=blob_bytes(wref), lut_off=blob_bytes(lut) if lut is not None else 0,
                act="CARVE_ACT_SILU" if act == "silu" else "CARVE_ACT_NONE", in_zero=zero(lw, x),
                out_zero=int(a["pre_zero"]))


def lower_qconv(lw: Lowering, op, what: str | None = None) -> list:
    """carve_q8's CONV: its record in q8_pack's layout."""
    g, p = lw.graph.weights, op.params
    record = q8_pack.conv_record(g[p["weight"]], g[p["bias"]], g[p["mul"]], g[p["shift"]], op.attrs["groups"])
    return [_desc(lw, op, "CONV", what, **conv_fields(lw, op, record))]


def lower_qadd(lw: Lowering, op, what: str | None = None) -> list:
    xa, xb = op.inputs
    y = op.outputs[0]
    h, w, c = lw.shape(y)
    a = op.attrs
    return [_desc(lw, op, "ADD", what, cin=c, h=h, w=w, in_stride=lw.stride(xa), in2_stride=lw.stride(xb),
                  out_stride=lw.stride(y), in_off=byte_off(lw, xa), in2_off=byte_off(lw, xb), out_off=byte_off(lw, y),
                  in_zero=zero(lw, xa), in2_zero=zero(lw, xb), out_zero=zero(lw, y),
                  mul_a=int(a["mul_a"]), mul_b=int(a["mul_b"]), shift=int(a["shift"]))]


def lower_quantize(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    return [_desc(lw, op, "QUANTIZE", cin=c, h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y),
                  in_off=byte_off(lw, x), out_off=byte_off(lw, y), out_zero=zero(lw, y), scale=scale(lw, y))]


def lower_dequantize(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    return [_desc(lw, op, "DEQUANTIZE", cin=c, h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y),
                  in_off=byte_off(lw, x), out_off=byte_off(lw, y), in_zero=zero(lw, x), scale=scale(lw, x))]


def lower_q8_maxpool(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    a = op.attrs
    return [_desc(lw, op, "MAXPOOL", kh=a["kernel"], kw=a["kernel"], stride=a["stride"], pad=a["pad"], cin=c, h=h,
                  w=w, in_stride=lw.stride(x), out_stride=lw.stride(y), in_off=byte_off(lw, x),
                  out_off=byte_off(lw, y))]


def lower_q8_upsample(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    return [_desc(lw, op, "UPSAMPLE2X", cin=c, h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y),
                  in_off=byte_off(lw, x), out_off=byte_off(lw, y))]


def q8_copy(lw: Lowering, op, t: str, slot: int) -> Q8Op:
    """An int8 concat input the planner could not write in place: a COPY into its channel slot."""
    th, tw, ct = lw.shape(t)
    y = op.outputs[0]
    return _desc(lw, op, "COPY", what=f"copy {t} into its slot", name=f"{op.name} <- {t}", cin=ct, h=th, w=tw,
                 in_stride=lw.stride(t), out_stride=lw.stride(y), in_off=byte_off(lw, t),
                 out_off=byte_off(lw, y, slot))


def dtype_dispatch(f32_lowering, i8_lowering):
    """The lowering of an op kind that runs on float32 or int8 tensors (its output's dtype decides)."""
    def lower_op(lw: Lowering, op) -> list:
        return (i8_lowering if is_i8(lw, op.outputs[0]) else f32_lowering)(lw, op)
    return lower_op


def concat_dispatch(f32_copy):
    """concat's copy step by the dtype of the concatenation (int8: q8_copy)."""
    def copy(lw: Lowering, op, t: str, slot: int):
        return (q8_copy if is_i8(lw, op.outputs[0]) else f32_copy)(lw, op, t, slot)
    return copy


def always(op, graph):
    return None


# The rules of the int8 op kinds (a CPU backend's lowerable table adds them).
Q8_RULES = {"qconv2d": square_conv_rule, "qadd": always, "quantize": always, "dequantize": always}

# The int8 op kinds' lowerings (maxpool2d / upsample_nearest / concat dispatch on dtype: with_q8 below).
Q8_LOWERINGS = {"qconv2d": lower_qconv, "qadd": lower_qadd, "quantize": lower_quantize,
                "dequantize": lower_dequantize}


def with_q8(lowerings: dict, concat_lowering, f32_copy, own: dict | None = None) -> dict:
    """A CPU backend's lowerings extended with the int8 ops (``own``: the backend's lowerings of some int8 op kinds,
    over Q8_LOWERINGS'), and its maxpool / upsample / concat dispatching on the tensors' dtype."""
    out = {**lowerings, **Q8_LOWERINGS, **(own or {})}
    out["maxpool2d"] = dtype_dispatch(lowerings["maxpool2d"], lower_q8_maxpool)
    out["upsample_nearest"] = dtype_dispatch(lowerings["upsample_nearest"], lower_q8_upsample)
    out["concat"] = concat_lowering(concat_dispatch(f32_copy))
    return out
