"""The cuda backend: CUDA C++ + cuBLAS, one device arena, the forward replayed as a CUDA Graph.

Every IR op becomes one call of the device runtime declared in ``runtime/carve_cuda.h`` (the
contract with ``runtime/carve_cuda_*.cu``): convolutions through cuBLAS with one fused epilogue,
depthwise / pooling / upsample / copy / add / softmax kernels, attention through batched GEMMs
and the whole end-to-end post-processing (top-k, gather, task decoding) on the device. The plan,
the storage constants and the OHWI weight blob are the xnnpack backend's (``lowering.py``).

The same generated ``.cu`` builds with nvcc for a GPU, and on the host, as C++ with the emulation
header of ``tests/cuda/cuda_emu.h`` (``-DCARVE_CUDA_EMULATION_HEADER=...``), which is how CI
checks it against the xnnpack package without a GPU.
"""

from __future__ import annotations

from ..errors import CarveError
from ..ir import Graph
from ..planner import Plan
from . import Backend
from .emit_c import RUNTIME, CPackage
from .lowering import always, e2e_rule, lower, upsample_x2_rule
from .xnnpack import LAYOUTS  # OHWI conv / deconv weights, (out, in) fully connected: the same blob layout

CU_ACT = {"silu": "CARVE_CU_ACT_SILU", "none": "CARVE_CU_ACT_NONE"}
EPILOGUE_ACT = {"CARVE_ACT_SILU": "CARVE_CU_ACT_SILU", "CARVE_ACT_NONE": "CARVE_CU_ACT_NONE"}


# ---- Refusal rules: what runtime/carve_cuda.h can do ---------------------------------------------


def _act_reason(op):
    act = op.attrs.get("act", "none")
    return None if act in CU_ACT else f"activation '{act}' (the epilogue has SiLU and none)"


def _conv_rule(op, graph):
    a = op.attrs
    why = []
    if a["kernel"][0] != a["kernel"][1]:
        why.append(f"non-square kernel {a['kernel'][0]}x{a['kernel'][1]}")
    g = a["groups"]
    if g != 1 and not (g == a["cin"] == a["cout"]):
        why.append(f"grouped conv with groups {g} of {a['cin']}->{a['cout']} (only groups 1 and depthwise)")
    if _act_reason(op):
        why.append(_act_reason(op))
    return "; ".join(why) or None


def _deconv_rule(op, graph):
    a = op.attrs
    k, s = a["kernel"], a["stride"]
    why = []
    if not (k[0] == k[1] == s and a.get("pad", 0) == 0):
        why.append(f"transposed conv {k[0]}x{k[1]}/{s} pad {a.get('pad', 0)} (only kernel = stride, pad 0)")
    if a.get("groups", 1) != 1:
        why.append(f"grouped transposed conv (groups {a['groups']})")
    if _act_reason(op):
        why.append(_act_reason(op))
    return "; ".join(why) or None


def _softmax_rule(op, graph):
    h, w, c = graph.tensors[op.inputs[0]].shape
    return None if h == w == 1 else f"softmax over a ({h},{w},{c}) tensor (only over the channels of one pixel)"


class CudaBackend(Backend):
    name = "cuda"
    description = "NVIDIA GPU: CUDA C++ + cuBLAS, CUDA Graph replay"
    lowerable = {
        "conv2d": _conv_rule,
        "deconv2d": _deconv_rule,
        "maxpool2d": always,
        "upsample_nearest": upsample_x2_rule,
        "concat": always,
        "slice": always,
        "add": always,
        "attention": always,
        "e2e_detect": e2e_rule,
        "global_avgpool": always,
        "linear": always,
        "softmax": _softmax_rule,
    }
    # --weights-format file and --weights-dtype f16 are not rendered by templates/cuda yet (issue 7)
    weights_formats = ("blob", "c-array")
    weights_dtypes = ("f32",)
    templates = (("model.h.j2", "{name}.h"), ("model.cu.j2", "{name}.cu"), ("demo.cu.j2", "{name}_demo.cu"),
                 ("CMakeLists.txt.j2", "CMakeLists.txt"), ("README.md.j2", "README.md"))
    # host-side pieces of the CPU runtime the package uses (letterbox geometry, box mapping, top-k of the
    # probabilities, NCHW -> NHWC, masks, the demo's file I/O), compiled with CARVE_RT_NO_THREADS
    _runtime = ("carve_rt.h", "carve_rt.c", "carve_ops.h", "carve_ops.c", "carve_pre.h", "carve_pre_math.h",
                "carve_pre.c", "carve_post.h", "carve_post.c", "carve_io.h", "carve_io.c", "carve_cuda.h")

    def runtime_files(self, graph: Graph) -> tuple:
        """The runtime sources a package of this graph uses: the host pieces and every carve_cuda_* file."""
        masks = ("carve_mask.h", "carve_mask.c") if "output1" in graph.outputs else ()
        device = tuple(sorted(p.name for p in RUNTIME.glob("carve_cuda_*") if p.suffix in (".cu", ".cuh", ".h")))
        return self._runtime + masks + device

    def lower(self, graph: Graph, plan: Plan) -> dict:
        """The program the templates render: the shared lowering, each compute op turned into its carve_cu_* call."""
        program = lower(graph, plan, self.name, "CARVE_CU_", LAYOUTS)
        ops = program["ops"]
        convs: list = []   # carve_cu_conv descriptors, in run order
        for lay in program["layers"]:
            lay["steps"] = [self._step(st, ops, convs) for st in lay["steps"]]
        program["convs"] = convs
        program["deconvs"] = [st for lay in program["layers"] for st in lay["steps"] if st["kind"] == "deconv"]
        # The host copies the API hands out are dense: the network input, the rows / probabilities and the
        # prototypes must be contiguous storages of their own (the planner's rule for graph inputs and outputs).
        for t in [graph.input, *graph.outputs.values()]:
            v = plan.views[t]
            if v.offset != 0 or v.stride != graph.tensors[t].shape[2]:  # pragma: no cover - planner invariant
                raise CarveError(f"{t}: backend 'cuda' needs the network input and outputs contiguous",
                                 hint="no files were written")
        # the host buffer the layer callback copies one layer's output into: the largest strided span
        program["layer_span_floats"] = max(
            program["rows_k"] * program["row_len"] if lay["is_rows"]
            else (lay["out_h"] * lay["out_w"] - 1) * lay["out_stride"] + lay["out_c"] for lay in program["layers"])
        return program

    @staticmethod
    def _step(st: dict, ops: list, convs: list) -> dict:
        """One step of the shared lowering as a carve_cu_* call (views, upsample, attention, e2e stay as they are)."""
        if st["kind"] != "op":
            return st
        d = ops[st["index"]]
        f, kind = d["fields"], d["kind"].replace("CARVE_CU_", "")
        head = {k: st[k] for k in ("name", "source", "flops", "shapes")}
        epi = st["epilogue"]
        if kind == "CONV":
            act = EPILOGUE_ACT[epi["act"]] if epi else "CARVE_CU_ACT_NONE"
            residual = epi["r_off"] if epi and epi["r_off"] is not None else None
            convs.append(dict(name=d["name"], kh=f["kh"], kw=f["kw"], stride=f["stride"], pad=f["pad"],
                              groups=f["groups"], cin=f["cin"], cout=f["cout"], h=f["h"], w=f["w"],
                              in_stride=f["in_stride"], out_stride=f["out_stride"],
                              res_stride=epi["r_stride"] if residual else 0, act=act))
            one_by_one = f["kh"] == 1 and f["stride"] == 1 and f["pad"] == 0 and f["groups"] == 1
            return dict(head, kind="conv", index=len(convs) - 1, x_off=f["in_off"], w_off=f["weight_off"],
                        b_off=f["bias_off"], r_off=residual, y_off=f["out_off"],
                        path="one GEMM on the NHWC view" if one_by_one else
                        "depthwise kernel" if f["groups"] > 1 else "im2col + GEMM")
        if kind == "DECONV":
            if epi is not None and epi["r_off"] is not None:  # pragma: no cover - fuse_residual fuses into convs only
                raise AssertionError(f"{d['name']}: residual on a transposed conv")
            return dict(head, kind="deconv", h=f["h"], w=f["w"], cin=f["cin"], cout=f["cout"], k=f["kh"],
                        x_off=f["in_off"], x_stride=f["in_stride"], w_off=f["weight_off"], b_off=f["bias_off"],
                        act=EPILOGUE_ACT[epi["act"]] if epi else "CARVE_CU_ACT_NONE", y_off=f["out_off"],
                        y_stride=f["out_stride"])
        if epi is not None:  # pragma: no cover - the frontend gives epilogues to (de)convs only
            raise AssertionError(f"{d['name']}: epilogue on a {kind}")
        if kind == "MAXPOOL":
            return dict(head, kind="maxpool", h=f["h"], w=f["w"], c=f["cin"], k=f["kh"], stride=f["stride"],
                        pad=f["pad"], x_off=f["in_off"], x_stride=f["in_stride"], y_off=f["out_off"],
                        y_stride=f["out_stride"])
        if kind == "COPY":
            return dict(head, kind="copy", pixels=f["h"] * f["w"], c=f["cin"], x_off=f["in_off"],
                        x_stride=f["in_stride"], y_off=f["out_off"], y_stride=f["out_stride"], what=st["what"])
        if kind == "ADD":
            return dict(head, kind="add", pixels=f["h"] * f["w"], c=f["cin"], a_off=f["in_off"], a_stride=f["in_stride"],
                        b_off=f["in2_off"], b_stride=f["in_stride"], y_off=f["out_off"], y_stride=f["out_stride"])
        if kind == "GAP":
            return dict(head, kind="gap", h=f["h"], w=f["w"], c=f["cin"], x_off=f["in_off"], x_stride=f["in_stride"],
                        y_off=f["out_off"])
        if kind == "FC":
            return dict(head, kind="linear", cin=f["cin"], cout=f["cout"], x_off=f["in_off"], w_off=f["weight_off"],
                        b_off=f["bias_off"], y_off=f["out_off"])
        if kind == "SOFTMAX":
            return dict(head, kind="softmax", n=f["cin"], x_off=f["in_off"], y_off=f["out_off"])
        raise AssertionError(kind)  # pragma: no cover

    def emit(self, graph: Graph, plan: Plan, options) -> dict:
        program = self.lower(graph, plan)
        return CPackage(self, graph, plan, program, options).files()


BACKEND = CudaBackend()
