"""The int8 ops of a quantized graph (--precision int8) on the xnnpack backend.

What runs where (docs/backends/xnnpack.md, "int8 packages"): every int8 op on carve's own kernels, bit for bit
generator/carve/quant/arith.py, on the package's thread pool, so that an xnnpack int8 package computes the same
bytes as the portable one:

* a dense ``qconv2d`` (groups 1): carve_q8conv (AMX / AVX-512 VNNI / AVX-VNNI / AVX2 / NEON with or without the
  dot product / portable, chosen once at create; the SiLU table applied before the store), a ``Q8Conv`` step;
* everything else (depthwise and grouped ``qconv2d``, ``qadd``, ``quantize``, ``dequantize``, the int8 max pool,
  upsample and concat copies): carve_q8's kinds with ``carve_q8_run_pool`` (``Q8PoolOp``, the backend's step class
  of role "q8"), lowered by backends/q8.py as for the portable backend.

XNNPACK's own int8 operators (qc8 convolution, qs8 add, qs8 -> f32 convert) were the first lowering here; they
requantize in float32, within one unit of arith but not bit for bit, which let the two packages' detections differ
(docs/backends/xnnpack.md says what was measured).
"""

from __future__ import annotations

from . import q8, q8conv_pack
from .lowering import Lowering
from .steps import Q8Conv


def lower_q8conv(lw: Lowering, op) -> list:
    """A dense qconv2d on carve's own int8 convolution (carve_q8conv: AMX / AVX-512 VNNI / AVX-VNNI / AVX2 / NEON /
    portable, chosen at create; the SiLU table applied before the store), bit for bit arith.qconv2d."""
    a, g, p = op.attrs, lw.graph.weights, op.params
    record = q8conv_pack.conv_record(g[p["weight"]], g[p["bias"]], g[p["mul"]], g[p["shift"]])
    index = q8.table_entry(lw, "CONV", op.name, **q8.conv_fields(lw, op, record))
    return [Q8Conv(**lw.head(op), index=index, kh=a["kernel"][0], kw=a["kernel"][1], cin=a["cin"])]


def lower_qconv(lw: Lowering, op) -> list:
    """Dense: carve_q8conv (lower_q8conv). Depthwise and grouped: carve_q8's CONV on the pool (q8.lower_qconv with
    the backend's Q8PoolOp)."""
    if q8conv_pack.takes(op.attrs):
        return lower_q8conv(lw, op)
    return q8.lower_qconv(lw, op)


# The xnnpack backend's own lowering of an int8 op kind (q8.with_q8 takes it over Q8_LOWERINGS).
XNN_Q8_LOWERINGS = {"qconv2d": lower_qconv}
