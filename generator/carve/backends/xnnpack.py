"""The xnnpack backend: C11 + XNNPACK's operator API (Debian's libxnnpack-dev).

Convolutions, max pooling and channel copies are XNNPACK operators, created
and set up once at create on fixed arena addresses; SiLU / residual
epilogues, nearest upsampling, attention and the end-to-end post-processing
are carve runtime kernels on the same thread pool.
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph
from ..planner import Plan
from . import Backend
from .emit_c import CPackage
from .lowering import Layouts, always, deconv_rule, e2e_rule, lower, square_conv_rule, upsample_x2_rule


class XnnpackBackend(Backend):
    name = "xnnpack"
    description = "CPU: C11 + XNNPACK operators + pthreadpool"
    lowerable = {
        "conv2d": square_conv_rule,
        "maxpool2d": always,
        "upsample_nearest": upsample_x2_rule,
        "concat": always,
        "slice": always,
        "attention": always,
        "e2e_detect": e2e_rule,
        "add": always,  # XNNPACK add_nd on contiguous tensors; lower() checks the plan
        "deconv2d": deconv_rule,
        "global_avgpool": always,
        "linear": always,
        "softmax": always,
    }
    template_vars = dict(pool="m->pool", desc_type="carve_xnn_desc", ops_what="XNNPACK operators", op_prefix="CARVE_XNN_")
    _runtime = ("carve_rt.h", "carve_rt.c", "carve_ops.h", "carve_ops.c", "carve_pre.h", "carve_pre.c",
                "carve_post.h", "carve_post.c", "carve_xnn.h", "carve_xnn.c", "carve_io.h", "carve_io.c")

    def runtime_files(self, graph: Graph) -> tuple:
        """The runtime sources a package of this graph uses (copied into it)."""
        masks = ("carve_mask.h", "carve_mask.c") if "output1" in graph.outputs else ()
        return self._runtime + masks

    def lower(self, graph: Graph, plan: Plan) -> dict:
        """The program the templates render: weight blob, XNNPACK operator table and per-layer steps."""
        return lower(graph, plan, self.name, "CARVE_XNN_", LAYOUTS)

    def emit(self, graph: Graph, plan: Plan, options) -> dict:
        program = self.lower(graph, plan)
        return CPackage(self, graph, plan, program, options).files()


# XNNPACK wants conv and deconv weights as (out, kh, kw, in / groups): PyTorch has conv (out, in/g, kh, kw),
# deconv (in, out, kh, kw); fully connected as PyTorch's (out, in).
LAYOUTS = Layouts(conv=lambda w, a: np.transpose(w, (0, 2, 3, 1)),
                  deconv=lambda w, a: np.transpose(w, (1, 2, 3, 0)),
                  linear=lambda w, a: w)


BACKEND = XnnpackBackend()
