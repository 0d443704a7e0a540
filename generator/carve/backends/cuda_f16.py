"""--precision fp16 for the cuda backend: half-precision weights and activations, float32 accumulation.

What changes against the fp32 package (docs/backends/cuda.md#fp16), all from this module:

* the network's activations are IEEE binary16 in the arena (the same plan and offsets, counted in halves: the
  arena's activation part is half the fp32 one), every convolution / attention GEMM a ``cublasGemmEx`` with
  half operands and ``CUBLAS_COMPUTE_32F``, every element-wise kernel computing in float32 and rounding once
  to half when it stores (``runtime/carve_cuda_f16.cu``: C++ overloads of ``carve_cuda.h``'s functions, so the
  generated calls read as in the fp32 package);
* the weights are stored as halves (``--weights-dtype f16``: the checkpoint's float16 tensors, about half the
  bytes), rebuilt at create into the fp32 package's folded float32 weights on the host, then rounded to half
  (one rounding after the BatchNorm fold) and uploaded; the device holds halves;
* float32 stays at the edges: the input (the letterbox / run_tensor's upload) is written in float32 to a
  staging area and cast to half; the end-to-end (or NMS) post-processing reads the head's half maps where the
  network wrote them (``carve_cu_level_h``: each value widened to float32 as it is read, the float32 path's
  results bit for bit, without float32 copies or casts) and writes its rows in float32 to the staging area,
  which follows the halves in the arena (``F16Layout``); a classify package's softmax reads the half logits and
  writes its probabilities there in float32 (``CuSoftmaxF16``), a segment package's prototypes are widened into
  it after the head (``CuProtosF16``), so that every output the API hands out is float32 as in the fp32 package.

Every task and head runs in half: the segment head's transposed convolution and the classify head's pooling,
linear layer and softmax have their half kernels as the rest (carve_cuda_f16.h).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .cuda import CudaBackend
from .steps import CuE2E, CuNMS, CuSoftmax, CuStep


@dataclass(kw_only=True)
class CuE2EF16(CuE2E):
    """carve_cu_e2e_postprocess_task (or _batch) on the half head maps (its carve_cu_level_h overload), the rows
    in float32 in the staging area."""

    macro: ClassVar[str] = "cu_e2e_f16"


@dataclass(kw_only=True)
class CuNMSF16(CuNMS):
    """carve_cu_nms_postprocess (or _batch) on the half head maps (its carve_cu_level_h overload), the rows in
    float32 in the staging area."""

    macro: ClassVar[str] = "cu_nms_f16"


@dataclass(kw_only=True)
class CuSoftmaxF16(CuSoftmax):
    """carve_cu_softmax on the half logits (its __half overload), the classify package's probabilities in float32
    in the staging area."""

    macro: ClassVar[str] = "cu_softmax_f16"
    families: ClassVar[tuple] = ("cuda", "cuda_ops", "cuda_f16")


@dataclass(kw_only=True)
class CuProtosF16(CuStep):
    """carve_cu_f16_to_f32 (the blob's widening, exact): a segment package's prototypes (``n`` halves at ``x_off``,
    dense) widened into the staging area after the head, where the fetch reads them as float32."""

    n: int
    x_off: str
    kind: ClassVar[str] = "cast"
    macro: ClassVar[str] = "cu_protos_f16"
    function: ClassVar[str] = "carve_cu_f16_to_f32"
    families: ClassVar[tuple] = ("cuda", "cuda_ops")


@dataclass
class F16Layout:
    """The arena of an fp16 package: the plan's activations as halves (``half_bytes``, a multiple of 256), then
    the float32 staging area of ``f32_floats`` per image: the float32 input (INPUT floats) at 0, cast to half
    before the network runs; at the end of the run the head's rows (or a classify package's probabilities) at
    ``rows_off`` = 0 too, and a segment package's prototypes after them at ``protos_off``."""

    half_bytes: int
    f32_floats: int
    rows_off: int = 0
    protos_off: int = 0

    @property
    def arena_bytes(self) -> int:
        return -(-(self.half_bytes + self.f32_floats * 4) // 256) * 256


def _align16(v: int) -> int:
    return -(-v // 16) * 16  # floats: 64-byte aligned views


class CudaF16Backend(CudaBackend):
    """The cuda backend lowering a graph at --precision fp16 (CudaBackend.emit hands fp16 graphs to it)."""

    step_classes = dict(CudaBackend.step_classes, e2e=CuE2EF16, nms=CuNMSF16, softmax=CuSoftmaxF16)
    families = CudaBackend.families + ("cuda_f16",)
    template_vars = dict(CudaBackend.template_vars, f16=True)

    def lower(self, graph, plan) -> dict:
        program = super().lower(graph, plan)
        head = program["e2e"] or program["nms"]
        rows = head.k * head.row if head else graph.meta["nc"]  # the rows, or a classify package's probabilities
        protos = 0
        if "output1" in graph.outputs:  # segment: the prototypes, widened after the head (the rows' layer)
            t = graph.outputs["output1"]
            h, w, c = graph.tensors[t].shape
            protos = h * w * c
            proto = next(op for op in graph.ops if t in op.outputs)
            cast = CuProtosF16(name=f"{t}_f32", source=f"{proto.name}'s prototypes widened for the host", flops=0,
                               shapes=f"({h},{w},{c}) half -> float32", n=protos,
                               x_off=program["outputs"]["output1"]["off"])
            layer = next(lay for lay in program["layers"] if any(st is head for st in lay["steps"]))
            layer["steps"].append(cast)
            if layer.get("parts"):  # the head's lanes (cuda_lanes.assign): after their join, on the run's stream
                layer["parts"][-1]["steps"].append(cast)
        in_h, in_w = graph.meta.get("input_hw") or (graph.meta["imgsz"], graph.meta["imgsz"])
        layout = F16Layout(half_bytes=-(-plan.arena_bytes // 2 // 256) * 256,
                           f32_floats=max(_align16(rows) + protos, _align16(in_h * in_w * 3)),
                           protos_off=_align16(rows) if protos else 0)
        program["f16"] = layout
        program["arena_bytes"] = layout.arena_bytes
        return program

    def emit(self, graph, plan, options) -> dict:
        return super().emit(graph, plan, dict(options, weights_dtype="f16"))


BACKEND = CudaF16Backend()
