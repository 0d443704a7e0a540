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
  which follows the halves in the arena (``F16Layout``).

Refused: the ops of the segment and classify heads (deconv2d, global_avgpool, linear, softmax), whose fp16
kernels do not exist yet; those tasks generate fp32 cuda packages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import CarveError
from .cuda import CudaBackend
from .steps import CuE2E, CuNMS

# ops whose half-precision kernels runtime/carve_cuda_f16.cu does not have (their tasks stay fp32)
NOT_IN_F16 = {"deconv2d": "segment's prototype upsampling", "global_avgpool": "the classify head",
              "linear": "the classify head", "softmax": "the classify head"}
F16_BYTES = 2


def check(graph) -> None:
    """Refuse a graph with an op the fp16 runtime cannot run, naming them (before any file is written)."""
    bad = [op for op in graph.ops if op.kind in NOT_IN_F16]
    if bad:
        shown = ", ".join(f"{op.name} ({op.kind}: {NOT_IN_F16[op.kind]})" for op in bad[:4])
        raise CarveError(f"--precision fp16: the cuda backend's half-precision kernels cover the detect, pose and "
                         f"obb models; {graph.name} ({graph.meta['task']}) has {len(bad)} op(s) without one: {shown}",
                         hint="generate this model with --precision fp32 (the default); no files were written")


@dataclass(kw_only=True)
class CuE2EF16(CuE2E):
    """carve_cu_e2e_postprocess_task (or _batch) on the half head maps (its carve_cu_level_h overload), the rows
    in float32 in the staging area."""

    macro: ClassVar[str] = "cu_e2e_f16"


@dataclass(kw_only=True)
class CuNMSF16(CuNMS):
    """carve_cu_nms_postprocess on the half head maps (its carve_cu_level_h overload), the rows in float32 in the
    staging area."""

    macro: ClassVar[str] = "cu_nms_f16"


@dataclass
class F16Layout:
    """The arena of an fp16 package: the plan's activations as halves (``half_bytes``, a multiple of 256), then
    the float32 staging area of ``f32_floats`` per image: the float32 input (INPUT floats) at 0, cast to half
    before the network runs, and the head's rows, written at the end of the run, at ``rows_off`` = 0 too."""

    half_bytes: int
    f32_floats: int
    rows_off: int = 0

    @property
    def arena_bytes(self) -> int:
        return -(-(self.half_bytes + self.f32_floats * 4) // 256) * 256


def _align16(v: int) -> int:
    return -(-v // 16) * 16  # floats: 64-byte aligned views


class CudaF16Backend(CudaBackend):
    """The cuda backend lowering a graph at --precision fp16 (CudaBackend.emit hands fp16 graphs to it)."""

    step_classes = dict(CudaBackend.step_classes, e2e=CuE2EF16, nms=CuNMSF16)
    families = CudaBackend.families + ("cuda_f16",)
    template_vars = dict(CudaBackend.template_vars, f16=True)

    def lower(self, graph, plan) -> dict:
        program = super().lower(graph, plan)
        head = program["e2e"] or program["nms"]
        in_h, in_w = graph.meta.get("input_hw") or (graph.meta["imgsz"], graph.meta["imgsz"])
        layout = F16Layout(half_bytes=-(-plan.arena_bytes // 2 // 256) * 256,
                           f32_floats=max(_align16(head.k * head.row), _align16(in_h * in_w * 3)))
        program["f16"] = layout
        program["arena_bytes"] = layout.arena_bytes
        return program

    def emit(self, graph, plan, options) -> dict:
        check(graph)
        return super().emit(graph, plan, dict(options, weights_dtype="f16"))


BACKEND = CudaF16Backend()
