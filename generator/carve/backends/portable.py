"""The portable backend: plain C11 and libm, single-threaded, no XNNPACK.

The same IR, memory plan, lowering (``lowering.lower``) and generated API as the
xnnpack backend; every compute op runs through ``carve_pt_run`` of
``runtime/carve_portable.c`` (direct convolutions in register blocks, no
im2col), and the SiLU / residual epilogues, upsampling, attention and the
end-to-end post-processing are the shared runtime kernels built with
``CARVE_RT_NO_THREADS``. Weight layouts: see ``runtime/carve_portable.h``.
"""

from __future__ import annotations

import numpy as np

from .emit_c import runtime_define
from .lowering import CPU_LOWERINGS, CPU_RULES, CBackend, Layouts, concat_lowering, cpu_copy
from .q8 import Q8_RULES, with_q8
from .steps import PtOp

# Output channels of one register block, read from runtime/carve_portable.h (the generated code also
# _Static_asserts that the weights were laid out for it).
OC = runtime_define("CARVE_PT_OC")


def is_depthwise(attrs: dict) -> bool:
    """The kernel carve_portable.c runs as depthwise: one input and one output channel per group."""
    return attrs["groups"] == attrs["cin"] == attrs["cout"]


def _blocks(w: np.ndarray) -> np.ndarray:
    """(..., cout) -> (cout_pad / OC, ..., OC): output channels zero-padded to a multiple of OC, each block
    of OC channels made one contiguous panel."""
    cout = w.shape[-1]
    pad = (-cout) % OC
    if pad:
        w = np.concatenate([w, np.zeros(w.shape[:-1] + (pad,), dtype=w.dtype)], axis=-1)
    w = w.reshape(w.shape[:-1] + (w.shape[-1] // OC, OC))
    return np.moveaxis(w, -2, 0)


def conv_layout(w: np.ndarray, attrs: dict) -> np.ndarray:
    """PyTorch (cout, cin/g, kh, kw) -> depthwise (kh, kw, c), else (g, cout_pad/OC, kh, kw, cin/g, OC)."""
    if is_depthwise(attrs):
        return np.transpose(w[:, 0], (1, 2, 0))
    g = attrs["groups"]
    cout, cin_g, kh, kw = w.shape
    w = np.transpose(w.reshape(g, cout // g, cin_g, kh, kw), (0, 3, 4, 2, 1))  # (g, kh, kw, cin/g, cout/g)
    return np.moveaxis(_blocks(w), 0, 1)  # (g, blocks, kh, kw, cin/g, OC)


def deconv_layout(w: np.ndarray, attrs: dict) -> np.ndarray:
    """PyTorch (cin, cout, kh, kw) -> (cout_pad/OC, kh, kw, cin, OC)."""
    return _blocks(np.transpose(w, (2, 3, 0, 1)))


LAYOUTS = Layouts(conv=conv_layout, deconv=deconv_layout, linear=lambda w, a: np.transpose(w))


class PortableBackend(CBackend):
    name = "portable"
    description = "CPU, any C11 compiler: plain C + libm, single-threaded, no XNNPACK"
    lowerable = dict(CPU_RULES, **Q8_RULES)       # and the int8 ops of --precision int8 (q8.py)
    lowerings = with_q8(CPU_LOWERINGS, concat_lowering, cpu_copy)
    lowers_int8 = True   # Backend.lowers_int8 of the quantization pass (branch quant): tests/int8/ builds int8 packages
    prefix = "CARVE_PT_"
    layouts = LAYOUTS
    step_classes = {"op": PtOp}
    families = ("portable", "model")   # carve_pt_run; the lifecycle of runtime/carve_model.c
    template_vars = dict(pool="NULL", desc_type="carve_pt_desc", ops_what="compute ops (carve_pt_run)",
                         op_prefix=prefix, oc=OC, multithreaded=False, has_xnn_heap=False)
    cc_defines = ("CARVE_RT_NO_THREADS",)   # the README's plain cc command (as its CMakeLists.txt)


BACKEND = PortableBackend()
