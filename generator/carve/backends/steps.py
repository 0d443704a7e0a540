"""Step classes: what one layer function of a generated package does, one class per kind of step.

``lowering.lower`` turns each IR op into a list of steps (a dispatch table from op kind to a small function,
``lowering.CPU_LOWERINGS`` / ``cuda.CUDA_LOWERINGS``); the templates render each step with the Jinja macro it
names (``macro``, in ``templates/common/steps.c.j2``), so that Python holds the logic and the templates the
layout. A step class owns:

* its fields (offsets into the arena as C expressions over the storage constants ``S_*``, weight offsets as
  ``WeightRef``, which render as their ``W_*`` / ``B_*`` constants, shapes, strides, activation);
* ``function``: the runtime function it calls (every one returns ``carve_status``: the macro wraps the call in
  ``TRY(...)``);
* ``families``: the runtime kernel families it needs; ``runtime_files`` maps them through ``RUNTIME_FAMILIES``
  to runtime headers, and ``emit_c.runtime_closure`` adds the sources those headers pull in;
* ``macro``: the name of its macro.

A backend chooses the classes (``CBackend.step_classes``: e.g. ``XnnOp`` or ``PtOp`` for a descriptor op,
``CuAttention`` instead of ``Attention``) and may add lowering functions of its own; nothing rewrites steps
after the lowering.

For tests and older callers a step also reads like the dict it replaced: ``step["kind"]``, ``step.get("x")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

# ---- Runtime families -> files ------------------------------------------------------------------
#
# The one table from a kernel family to the runtime file that declares it (one source per family: docs/
# architecture.md, "The C runtime"). Headers are named: emit_c.runtime_closure adds each header's .c and whatever
# they include.
RUNTIME_FAMILIES = {
    "rt": "carve_rt.h",               # status, views, thread pool glue: every package
    "epilogue": "carve_epilogue.h",        # SiLU / residual epilogue
    "stem": "carve_stem.h",            # carve_conv3x3s2_small_cin
    "dwconv": "carve_dwconv.h",          # carve_dwconv3x3
    "winograd": "carve_winograd.h",        # carve_conv3x3s1_winograd
    "attention": "carve_attention.h",       # carve_attention
    "layout": "carve_layout.h",          # upsample, NCHW <-> NHWC
    "post": "carve_post.h",           # end-to-end post-processing, softmax, top-k of probabilities
    "nms": "carve_nms.h",             # one-to-many decode + non-maximum suppression (--head nms)
    "pre": "carve_pre.h",             # letterbox, classify pre-processing, box mapping
    "mask": "carve_mask.h",           # segmentation masks
    "weights": "carve_weights.h",     # weights file checks, f16 widening
    "model": "carve_model.h",         # the CPU packages' lifecycle: create, create_with, destroy, runs, collect
    "model_mask": "carve_model_mask.c",  # carve_model's masks (over carve_mask.c): CPU segmentation packages
    "io": "carve_io.h",               # the demo's image / tensor files
    "xnn": "carve_xnn.h",             # XNNPACK operators
    "portable": "carve_portable.h",   # carve_pt_run
    "q8": "carve_q8.h",               # carve_q8_run(_pool): the int8 kernels (--precision int8)
    "q8_pool": "carve_q8_pool.h",     # carve_q8_run_pool's AVX-512 variants (xnnpack int8 packages)
    "q8conv": "carve_q8conv.h",       # the dense int8 convolution on AMX / AVX-512 VNNI / AVX2 / NEON (xnnpack int8)
    "cuda": "carve_cuda.h",           # the device runtime's contract (host side)
    "cuda_ops": "carve_cuda_ops.cu",  # device convolutions, pooling, attention, context, f16 widening
    "cuda_topk": "carve_cuda_topk.cu",  # device top-k and end-to-end post-processing
    "cuda_pre": "carve_cuda_pre.cu",  # device letterbox / classify pre-processing
    "cuda_nms": "carve_cuda_nms.h",   # device one-to-many decode + NMS (--head nms)
    "cuda_f16": "carve_cuda_f16.h",   # half-precision kernels and casts (--precision fp16: backends/cuda_f16.py)
}


def selected_kernels(layers) -> list:
    """The kernels with instruction-set variants that these layers' steps (and their epilogues) call, sorted: the
    context's kernel table, filled once at create (Step.kernel)."""
    out = set()
    for lay in layers:
        for st in lay["steps"]:
            for part in (st, getattr(st, "epilogue", None)):
                if part is not None and part.kernel:
                    out.add(part.kernel)
    return sorted(out)


def family_files(families) -> tuple:
    """The runtime files of these families (RUNTIME_FAMILIES), sorted, without repeats."""
    return tuple(sorted({RUNTIME_FAMILIES[f] for f in families}))


# ---- Weight offsets ---------------------------------------------------------------------------------


class WeightRef(int):
    """A tensor's offset in floats into the weight blob: an int for arithmetic and tests, rendered in the
    generated C as its named constant (``W_MODEL_2_CV1_CONV``; ``#define``d in the plan section)."""

    macro: str
    tensor: str
    shape: str

    def __new__(cls, offset: int, macro: str, tensor: str, shape: str = ""):
        self = super().__new__(cls, offset)
        self.macro, self.tensor, self.shape = macro, tensor, shape
        return self

    def __str__(self) -> str:
        return self.macro

    def __format__(self, spec: str) -> str:
        return self.macro if not spec else format(int(self), spec)

    __repr__ = __str__


# ---- Base ----------------------------------------------------------------------------------------------


class _Fields:
    """Dict-style reads (``s["kind"]``, ``s.get("slices")``) of a dataclass's attributes."""

    def __getitem__(self, key):
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key, default=None):
        return getattr(self, key, default)


@dataclass(kw_only=True)
class Epilogue(_Fields):
    """SiLU and / or a residual added in place after a convolution: carve_epilogue."""

    y_off: str
    y_stride: int
    r_off: str | None
    r_stride: int
    pixels: int
    channels: int
    act: str
    macro: ClassVar[str] = "epilogue"
    function: ClassVar[str] = "carve_epilogue"
    kernel: ClassVar[str | None] = "epilogue"
    families: ClassVar[tuple] = ("epilogue",)


@dataclass(kw_only=True)
class Step(_Fields):
    """What every step has: the op it comes from and its cost; subclasses add their fields."""

    name: str
    source: str
    flops: int
    shapes: str
    # The concurrent lane it runs in (backends/cuda_lanes.py: its own stream, scratch and cuBLAS workspace); -1:
    # the context's stream, in program order (every step of the CPU backends).
    lane: int = -1
    kind: ClassVar[str] = ""
    macro: ClassVar[str] = ""
    function: ClassVar[str | None] = None
    # A kernel with instruction-set variants: carve_<kernel>_select(isa) picks one at create into the context's
    # kernel table (m->k.<kernel>), which the macro calls; None: the macro calls `function` itself.
    kernel: ClassVar[str | None] = None
    families: ClassVar[tuple] = ()

    @property
    def runtime_files(self) -> tuple:
        """The runtime files this step calls into (headers; emit_c.runtime_closure adds their sources)."""
        fams = list(self.families)
        epi = getattr(self, "epilogue", None)
        if epi is not None:
            fams += epi.families
        return family_files(fams)

    @property
    def computes(self) -> bool:
        """False for steps that emit no code (views)."""
        return True


@dataclass(kw_only=True)
class View(Step):
    """A concat whose inputs were written in place, or a split: a comment, no code."""

    what: str
    kind: ClassVar[str] = "view"
    macro: ClassVar[str] = "view"

    @property
    def computes(self) -> bool:
        return False


# ---- CPU steps -------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Slice(_Fields):
    index: int
    c0: int
    c1: int


@dataclass(kw_only=True)
class DescriptorOp(Step):
    """A compute op of the backend's descriptor table k_ops[index] (conv, deconv, max pool, add, global average
    pool, fully connected, softmax, channel copy), with an optional epilogue after it. ``slices``: the
    descriptors of one conv split by output channels (xnnpack), else None."""

    index: int
    epilogue: Epilogue | None = None
    slices: list | None = None
    what: str | None = None
    kind: ClassVar[str] = "op"


@dataclass(kw_only=True)
class XnnOp(DescriptorOp):
    """An XNNPACK operator created at create: carve_xnn_run."""

    macro: ClassVar[str] = "xnn_op"
    function: ClassVar[str] = "carve_xnn_run"
    families: ClassVar[tuple] = ("xnn",)


@dataclass(kw_only=True)
class PtOp(DescriptorOp):
    """A portable C kernel: carve_pt_run of the descriptor."""

    macro: ClassVar[str] = "pt_op"
    function: ClassVar[str] = "carve_pt_run"
    families: ClassVar[tuple] = ("portable",)


@dataclass(kw_only=True)
class Q8Op(Step):
    """An int8 op (--precision int8): carve_q8_run of the package's int8 descriptor table k_q8_ops[index]
    (runtime/carve_q8.h), on the calling thread."""

    index: int
    what: str | None = None
    kind: ClassVar[str] = "q8"
    macro: ClassVar[str] = "q8_op"
    function: ClassVar[str] = "carve_q8_run"
    families: ClassVar[tuple] = ("q8",)


@dataclass(kw_only=True)
class Q8PoolOp(Q8Op):
    """An int8 op of the xnnpack backend: carve_q8_run_pool of k_q8_ops[index] on the package's thread pool
    (runtime/carve_q8.h), through its instruction-set variant chosen once at create (m->k.q8_pool =
    carve_q8_pool_select(isa), runtime/carve_q8_pool.h): the same bytes as carve_q8_run's on any number of
    threads."""

    macro: ClassVar[str] = "q8_pool_op"
    function: ClassVar[str] = "carve_q8_pool"
    kernel: ClassVar[str | None] = "q8_pool"
    families: ClassVar[tuple] = ("q8", "q8_pool")


@dataclass(kw_only=True)
class Q8Conv(Step):
    """A dense (groups 1) int8 convolution run by carve's own kernel, carve_q8conv (AMX, AVX-512 VNNI, AVX-VNNI,
    AVX2, NEON (with or without the dot product) or portable C, chosen once at create), on the thread pool with the
    package's task scratch slots: the descriptor k_q8_ops[index] (its record in backends/q8conv_pack.py's layout),
    bit for bit arith.qconv2d."""

    index: int
    kh: int
    kw: int
    cin: int
    kind: ClassVar[str] = "q8conv"
    macro: ClassVar[str] = "q8_conv"
    function: ClassVar[str] = "carve_q8conv"
    kernel: ClassVar[str | None] = "q8conv"
    families: ClassVar[tuple] = ("q8conv",)


@dataclass(kw_only=True)
class RuntimeConv(Step):
    """A convolution run by a carve runtime kernel with the bias and activation in registers (no descriptor);
    weights in the kernel's own layout (the backend's runtime_conv_layout)."""

    x_off: str
    x_stride: int
    h: int
    w: int
    cin: int
    cout: int
    weight_off: WeightRef
    bias_off: WeightRef
    y_off: str
    y_stride: int
    act: str
    residual: dict | None = None       # the residual the kernel adds before the store (r_off, r_stride)
    epilogue: Epilogue | None = None   # a residual added after the kernel (kernels without a fused one)
    fuses_residual: ClassVar[bool] = False  # the kernel adds a residual before the store itself


@dataclass(kw_only=True)
class StemConv(RuntimeConv):
    """3x3 stride 2 on few input channels (every YOLO26's model.0): carve_conv3x3s2_small_cin."""

    kind: ClassVar[str] = "conv3x3s2"
    macro: ClassVar[str] = "stem_conv"
    function: ClassVar[str] = "carve_conv3x3s2_small_cin"
    kernel: ClassVar[str | None] = "conv3x3s2_small_cin"
    families: ClassVar[tuple] = ("stem",)


@dataclass(kw_only=True)
class WinogradConv(RuntimeConv):
    """3x3 stride 1, Winograd F(2x2, 3x3), bias, activation and residual before the store:
    carve_conv3x3s1_winograd."""

    kind: ClassVar[str] = "conv3x3s1_wino"
    macro: ClassVar[str] = "winograd_conv"
    function: ClassVar[str] = "carve_conv3x3s1_winograd"
    kernel: ClassVar[str | None] = "conv3x3s1_winograd"
    families: ClassVar[tuple] = ("winograd",)
    fuses_residual: ClassVar[bool] = True


@dataclass(kw_only=True)
class DwConv(RuntimeConv):
    """Depthwise 3x3 stride 1: carve_dwconv3x3."""

    kind: ClassVar[str] = "dwconv3x3"
    macro: ClassVar[str] = "dw_conv"
    function: ClassVar[str] = "carve_dwconv3x3"
    kernel: ClassVar[str | None] = "dwconv3x3"
    families: ClassVar[tuple] = ("dwconv",)


# The runtime convolutions by step kind (what a backend's runtime_conv(attrs) returns).
RUNTIME_CONVS = {cls.kind: cls for cls in (StemConv, WinogradConv, DwConv)}


@dataclass(kw_only=True)
class Upsample(Step):
    """Nearest-neighbour x2: carve_upsample_nearest2x."""

    x_off: str
    x_stride: int
    h: int
    w: int
    c: int
    y_off: str
    y_stride: int
    kind: ClassVar[str] = "upsample"
    macro: ClassVar[str] = "upsample"
    function: ClassVar[str] = "carve_upsample_nearest2x"
    families: ClassVar[tuple] = ("layout",)


@dataclass(kw_only=True)
class Attention(Step):
    """Multi-head self-attention of the PSA blocks on one packed qkv tensor: carve_attention."""

    qkv_off: str
    qkv_stride: int
    n: int
    heads: int
    key_dim: int
    head_dim: int
    scale: float
    o_off: str
    o_stride: int
    v_off: str
    v_stride: int
    kind: ClassVar[str] = "attention"
    macro: ClassVar[str] = "attention"
    function: ClassVar[str] = "carve_attention"
    kernel: ClassVar[str | None] = "attention"
    families: ClassVar[tuple] = ("attention",)


@dataclass(kw_only=True)
class Level(_Fields):
    """One detection level of the end-to-end head: box, class and extra (mask / keypoint / angle) maps."""

    box_off: str
    box_stride: int
    cls_off: str
    cls_stride: int
    extra_off: str | None
    extra_stride: int
    h: int
    w: int
    stride: int


@dataclass(kw_only=True)
class E2E(Step):
    """The NMS-free end-to-end post-processing (top-k over levels, task decoding) into the rows:
    carve_e2e_postprocess_task."""

    levels: list = field(default_factory=list)
    nc: int
    k: int
    row: int
    extra: int
    task: str
    rows_off: str
    kind: ClassVar[str] = "e2e"
    macro: ClassVar[str] = "e2e"
    function: ClassVar[str] = "carve_e2e_postprocess_task"
    families: ClassVar[tuple] = ("post",)


@dataclass(kw_only=True)
class NMS(Step):
    """The one-to-many head's post-processing (decode, confidence filter at the run's conf, non-maximum
    suppression, task decoding) into the rows: carve_nms_postprocess. iou and agnostic are the package's."""

    levels: list = field(default_factory=list)
    nc: int
    k: int
    row: int
    extra: int
    task: str
    rows_off: str
    iou: float
    agnostic: bool
    kind: ClassVar[str] = "nms"
    macro: ClassVar[str] = "nms"
    function: ClassVar[str] = "carve_nms_postprocess"
    families: ClassVar[tuple] = ("nms",)


# ---- CUDA steps (runtime/carve_cuda.h) ------------------------------------------------------------------


@dataclass(kw_only=True)
class CuStep(Step):
    families: ClassVar[tuple] = ("cuda", "cuda_ops")


@dataclass(kw_only=True)
class CuConv(CuStep):
    """cuBLAS / depthwise convolution of the k_conv[index] descriptor, bias, activation and residual fused."""

    index: int
    x_off: str
    w_off: WeightRef
    b_off: WeightRef
    r_off: str | None
    y_off: str
    path: str
    kind: ClassVar[str] = "conv"
    macro: ClassVar[str] = "cu_conv"
    function: ClassVar[str] = "carve_cu_conv2d"


@dataclass(kw_only=True)
class CuConvPair(CuConv):
    """A depthwise convolution (k_conv[index], its output at mid_off) and the 1x1 convolution after it
    (k_conv[pw_index], residual and output of the pair) as one carve_cu_conv2d_dwpw call."""

    mid_off: str
    pw_index: int
    pw_w_off: WeightRef
    pw_b_off: WeightRef
    kind: ClassVar[str] = "conv_pair"
    macro: ClassVar[str] = "cu_conv_pair"
    function: ClassVar[str] = "carve_cu_conv2d_dwpw"


@dataclass(kw_only=True)
class CuDeconv(CuStep):
    h: int
    w: int
    cin: int
    cout: int
    k: int
    x_off: str
    x_stride: int
    w_off: WeightRef
    b_off: WeightRef
    act: str
    y_off: str
    y_stride: int
    kind: ClassVar[str] = "deconv"
    macro: ClassVar[str] = "cu_deconv"
    function: ClassVar[str] = "carve_cu_deconv2d"


@dataclass(kw_only=True)
class CuMaxpool(CuStep):
    h: int
    w: int
    c: int
    k: int
    stride: int
    pad: int
    x_off: str
    x_stride: int
    y_off: str
    y_stride: int
    kind: ClassVar[str] = "maxpool"
    macro: ClassVar[str] = "cu_maxpool"
    function: ClassVar[str] = "carve_cu_maxpool2d"


@dataclass(kw_only=True)
class CuMaxpoolChain(CuStep):
    """n chained k x k max pools, stride 1, pad k / 2 (SPPF's), in one call: output j (1 .. n) at y_off + (j - 1)
    y_step, each with pixel stride y_stride; the chain's later pools lower to views."""

    h: int
    w: int
    c: int
    k: int
    n: int
    x_off: str
    x_stride: int
    y_off: str
    y_stride: int
    y_step: int
    kind: ClassVar[str] = "maxpool_chain"
    macro: ClassVar[str] = "cu_maxpool_chain"
    function: ClassVar[str] = "carve_cu_maxpool2d_chain"


@dataclass(kw_only=True)
class CuCopy(CuStep):
    pixels: int
    c: int
    x_off: str
    x_stride: int
    y_off: str
    y_stride: int
    what: str
    kind: ClassVar[str] = "copy"
    macro: ClassVar[str] = "cu_copy"
    function: ClassVar[str] = "carve_cu_copy"


@dataclass(kw_only=True)
class CuAdd(CuStep):
    pixels: int
    c: int
    a_off: str
    a_stride: int
    b_off: str
    b_stride: int
    y_off: str
    y_stride: int
    kind: ClassVar[str] = "add"
    macro: ClassVar[str] = "cu_add"
    function: ClassVar[str] = "carve_cu_add"


@dataclass(kw_only=True)
class CuGap(CuStep):
    h: int
    w: int
    c: int
    x_off: str
    x_stride: int
    y_off: str
    kind: ClassVar[str] = "gap"
    macro: ClassVar[str] = "cu_gap"
    function: ClassVar[str] = "carve_cu_global_avgpool"


@dataclass(kw_only=True)
class CuLinear(CuStep):
    cin: int
    cout: int
    x_off: str
    w_off: WeightRef
    b_off: WeightRef
    y_off: str
    kind: ClassVar[str] = "linear"
    macro: ClassVar[str] = "cu_linear"
    function: ClassVar[str] = "carve_cu_linear"


@dataclass(kw_only=True)
class CuSoftmax(CuStep):
    n: int
    x_off: str
    y_off: str
    kind: ClassVar[str] = "softmax"
    macro: ClassVar[str] = "cu_softmax"
    function: ClassVar[str] = "carve_cu_softmax"


@dataclass(kw_only=True)
class CuUpsample(Upsample):
    macro: ClassVar[str] = "cu_upsample"
    function: ClassVar[str] = "carve_cu_upsample2x"
    families: ClassVar[tuple] = ("cuda", "cuda_ops")


@dataclass(kw_only=True)
class CuAttention(Attention):
    macro: ClassVar[str] = "cu_attention"
    function: ClassVar[str] = "carve_cu_attention"
    kernel: ClassVar[str | None] = None
    families: ClassVar[tuple] = ("cuda", "cuda_ops")


@dataclass(kw_only=True)
class CuAttentionPe(CuAttention):
    """An attention and the pe convolution after it (k_conv[index]: depthwise over V, its residual the attention's
    output; weights w_off / b_off, output y_off) as one carve_cu_attention_pe call; o and v written only when the
    attention takes the GEMM path."""

    index: int
    w_off: WeightRef
    b_off: WeightRef
    y_off: str
    kind: ClassVar[str] = "attention_pe"
    macro: ClassVar[str] = "cu_attention_pe"
    function: ClassVar[str] = "carve_cu_attention_pe"


@dataclass(kw_only=True)
class CuE2E(E2E):
    macro: ClassVar[str] = "cu_e2e"
    function: ClassVar[str] = "carve_cu_e2e_postprocess_task"
    families: ClassVar[tuple] = ("cuda", "cuda_topk")


@dataclass(kw_only=True)
class CuNMS(NMS):
    """carve_cu_nms_postprocess (or _batch for --batch N): the run's conf and each image's row count in the device
    scratch's reserved tail."""

    macro: ClassVar[str] = "cu_nms"
    function: ClassVar[str] = "carve_cu_nms_postprocess"
    families: ClassVar[tuple] = ("cuda", "cuda_nms", "cuda_topk")  # the order is carve_cu_topk's


# The step classes of the CPU backends' shared lowerings, by role; a backend overrides roles
# (CBackend.step_classes).
CPU_STEP_CLASSES = {"upsample": Upsample, "attention": Attention, "e2e": E2E, "nms": NMS, "view": View, "q8": Q8Op}
CUDA_STEP_CLASSES = {"upsample": CuUpsample, "attention": CuAttention, "e2e": CuE2E, "nms": CuNMS, "view": View,
                     "softmax": CuSoftmax}
