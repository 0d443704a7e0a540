"""The xnnpack backend: C11 + XNNPACK's operator API (Debian's libxnnpack-dev).

Convolutions, max pooling and channel copies are XNNPACK operators, created
and set up once at create on fixed arena addresses; SiLU / residual
epilogues, nearest upsampling, attention and the end-to-end post-processing
are carve runtime kernels on the same thread pool. The lowering is
``lowering.lower``, shared with the other C backends; ``xnn_heap`` adds the
size of the caller's XNNPACK heap for ``<name>_create_with``.
"""

from __future__ import annotations

import numpy as np

from . import xnn_heap
from .lowering import CPU_RULES, CBackend, Layouts

# XNNPACK wants conv and deconv weights as (out, kh, kw, in / groups): PyTorch has conv (out, in/g, kh, kw),
# deconv (in, out, kh, kw); fully connected as PyTorch's (out, in).
LAYOUTS = Layouts(conv=lambda w, a: np.transpose(w, (0, 2, 3, 1)),
                  deconv=lambda w, a: np.transpose(w, (1, 2, 3, 0)),
                  linear=lambda w, a: w)


class XnnpackBackend(CBackend):
    name = "xnnpack"
    description = "CPU: C11 + XNNPACK operators + pthreadpool"
    lowerable = CPU_RULES
    prefix = "CARVE_XNN_"
    layouts = LAYOUTS
    template_vars = dict(pool="m->pool", desc_type="carve_xnn_desc", ops_what="XNNPACK operators",
                         op_prefix=prefix, multithreaded=True)
    runtime = ("carve_rt.h", "carve_rt.c", "carve_ops.h", "carve_ops.c", "carve_pre.h", "carve_pre_math.h",
               "carve_pre.c", "carve_post.h", "carve_post.c",
               "carve_xnn.h", "carve_xnn.c", "carve_io.h", "carve_io.c")
    cc_libs = ("XNNPACK", "pthreadpool", "pthread")   # the README's plain cc command links these

    def lower(self, graph, plan) -> dict:
        program = super().lower(graph, plan)
        heap = xnn_heap.heap_bytes(program["ops"], self.prefix)
        program["xnn_heap_bytes"] = heap["bytes"]
        program["xnn_heap_bytes_x86_64"] = heap["x86_64"]
        program["xnn_heap_profile"] = heap["profile"]
        program["context_bytes"] += 64  # the context's carve_xnn_heap
        return program


BACKEND = XnnpackBackend()
