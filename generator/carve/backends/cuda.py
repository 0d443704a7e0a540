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
from ..ir import Graph, op_flops
from ..planner import Plan
from .emit_c import CPackage, runtime_define
from .lowering import CPU_LOWERINGS, CBackend, Lowering, always, check_add, concat_lowering, e2e_rule, lower, \
    lower_attention, nms_rule, upsample_x2_rule
from . import cuda_lanes, cuda_tactics
from .steps import CUDA_STEP_CLASSES, CuAdd, CuAttentionPe, CuConv, CuConvPair, CuCopy, CuDeconv, CuGap, CuLinear, \
    CuMaxpool, CuMaxpoolChain
from .xnnpack import LAYOUTS  # OHWI conv / deconv weights, (out, in) fully connected: the same blob layout

MAX_IMAGE = 4096                 # <NAME>_MAX_IMAGE_W / _H: the default options.max_image_width / height
# the cuBLAS workspace create_with takes: the larger of NVIDIA's sizes (carve_cuda.h), enough on every GPU
BLAS_WORKSPACE_BYTES = runtime_define("CARVE_CU_BLAS_WORKSPACE_BYTES_SM90")

CU_ACT = {"silu": "CARVE_CU_ACT_SILU", "none": "CARVE_CU_ACT_NONE"}


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


# ---- Lowering: IR op kind -> carve_cu_* steps (steps.Cu*) ---------------------------------------------------


def dwpw_partner(graph: Graph, op):
    """The 1x1 convolution run with depthwise ``op`` as one call (carve_cu_conv2d_dwpw: one launch where the tactic
    fuses them): the next op of the graph, a 1x1 stride-1 groups-1 conv2d of op's output, which nothing else reads
    and which is neither a graph output nor a layer's (the layer callback reads those; fused, it is never
    written). YOLO26's class branches: DWConv -> 1x1 Conv, twice per level. None otherwise (op has no residual)."""
    a = op.attrs
    if op.kind != "conv2d" or len(op.inputs) != 1 or a["groups"] == 1 or not a["groups"] == a["cin"] == a["cout"]:
        return None
    i = graph.ops.index(op)
    nxt = graph.ops[i + 1] if i + 1 < len(graph.ops) else None
    t = op.outputs[0]
    if nxt is None or nxt.kind != "conv2d" or nxt.inputs[0] != t:
        return None
    b = nxt.attrs
    if tuple(b["kernel"]) != (1, 1) or b["stride"] != 1 or b["pad"] != 0 or b["groups"] != 1:
        return None
    readers = sum(t in o.inputs for o in graph.ops)
    if readers != 1 or t in graph.outputs.values() or any(layer.output == t for layer in graph.layers):
        return None
    return nxt


def attention_pe_partner(graph: Graph, op):
    """The PSA block's pe convolution run with attention ``op`` as one call (carve_cu_attention_pe: one launch where
    the attention runs fused): the next op of the graph, a depthwise k x k (k odd) stride-1 conv2d with padding
    k // 2 of op's v whose residual is op's o, neither of them read by anything else nor a graph's or a layer's
    output (fused, they are never written). None otherwise."""
    if op.kind != "attention":
        return None
    i = graph.ops.index(op)
    nxt = graph.ops[i + 1] if i + 1 < len(graph.ops) else None
    o, v = op.outputs
    if nxt is None or nxt.kind != "conv2d" or tuple(nxt.inputs) != (v, o):
        return None
    b = nxt.attrs
    k = tuple(b["kernel"])
    if k[0] != k[1] or k[0] % 2 != 1 or b["stride"] != 1 or b["pad"] != k[0] // 2 or \
            not b["groups"] == b["cin"] == b["cout"] == op.attrs["heads"] * op.attrs["head_dim"]:
        return None
    for t in (o, v):
        if sum(t in x.inputs for x in graph.ops) != 1 or t in graph.outputs.values() or \
                any(layer.output == t for layer in graph.layers):
            return None
    return nxt


def pair_reads(graph: Graph) -> dict:
    """The inputs the multi-op calls read until their last op, which the memory plan keeps alive to there (planner
    5., ``CudaBackend.reads``): a depthwise + 1x1 pair's depthwise input (the fused kernel reads it while it writes
    the 1x1's output), an attention + pe's qkv (the fused kernel reads V's neighbours while it writes the pe's
    output)."""
    reads = {}
    for i, op in enumerate(graph.ops):
        if dwpw_partner(graph, op) is not None or attention_pe_partner(graph, op) is not None:
            reads[op.inputs[0]] = i + 1
    return reads


def _planned_partner(lw: Lowering, op):
    """``dwpw_partner`` or ``attention_pe_partner`` where the plan keeps op's input alive until the partner (so that
    the partner's output never shares its memory: planned with ``pair_reads``); None otherwise (two steps)."""
    pw = dwpw_partner(lw.graph, op) or attention_pe_partner(lw.graph, op)
    if pw is None or lw.plan.storages[lw.views[op.inputs[0]].storage].last < lw.graph.ops.index(pw):
        return None
    return pw


def _cu_attention(lw: Lowering, op) -> list:
    """An attention: with its pe partner (``_planned_partner``) one CuAttentionPe step (the partner a comment),
    else the shared lowering (CuAttention)."""
    pe = _planned_partner(lw, op)
    if pe is None:
        return lower_attention(lw, op)
    att, pe_step = lower_attention(lw, op)[0], _cu_conv_step(lw, pe)
    head = dict(lw.head(op), source=f"{op.source}, then {pe.name}: {pe.source}", flops=att.flops + pe_step.flops,
                shapes=f"{lw.head(op)['shapes'].split(' -> ')[0]} -> {lw.head(pe)['shapes'].split(' -> ')[-1]}")
    return [CuAttentionPe(**head, qkv_off=att.qkv_off, qkv_stride=att.qkv_stride, n=att.n, heads=att.heads,
                          key_dim=att.key_dim, head_dim=att.head_dim, scale=att.scale, o_off=att.o_off,
                          o_stride=att.o_stride, v_off=att.v_off, v_stride=att.v_stride, index=pe_step.index,
                          w_off=pe_step.w_off, b_off=pe_step.b_off, y_off=pe_step.y_off)]


def _cu_conv(lw: Lowering, op) -> list:
    """A conv2d / deconv2d's steps: a depthwise conv and its 1x1 partner (``_planned_partner``) as one CuConvPair
    (the partner a comment), others one step each (``_cu_conv_step``)."""
    if op.kind == "conv2d":
        i = lw.graph.ops.index(op)
        if i > 0 and _planned_partner(lw, lw.graph.ops[i - 1]) is op:
            prev = lw.graph.ops[i - 1]
            call = "carve_cu_attention_pe" if prev.kind == "attention" else "carve_cu_conv2d_dwpw"
            return [lw.cls("view")(**lw.head(op), what=f"run with {prev.name} ({call})")]
        pw = _planned_partner(lw, op)
        if pw is not None:
            dw_step, pw_step = _cu_conv_step(lw, op), _cu_conv_step(lw, pw)
            lw.tables["convs"][dw_step.index]["pw"] = pw_step.index
            head = dict(lw.head(op), source=f"{op.source}, then {pw.name}: {pw.source}",
                        flops=dw_step.flops + pw_step.flops,
                        shapes=f"{lw.head(op)['shapes']} -> {lw.head(pw)['shapes'].split(' -> ')[-1]}")
            return [CuConvPair(**head, index=dw_step.index, x_off=dw_step.x_off, w_off=dw_step.w_off,
                               b_off=dw_step.b_off, mid_off=dw_step.y_off, pw_index=pw_step.index,
                               pw_w_off=pw_step.w_off, pw_b_off=pw_step.b_off, r_off=pw_step.r_off,
                               y_off=pw_step.y_off,
                               path="depthwise + 1x1: one fused launch or two, by tactic")]
    return [_cu_conv_step(lw, op)]


def _cu_conv_step(lw: Lowering, op):
    """conv2d: one k_conv descriptor (shapes, strides, activation) and a carve_cu_conv2d call with its offsets;
    deconv2d: carve_cu_deconv2d. Weights OHWI (the xnnpack backend's LAYOUTS), bias and SiLU / residual fused."""
    x, y = op.inputs[0], op.outputs[0]
    h, w, _ = lw.shape(x)
    a = op.attrs
    residual = op.inputs[1] if len(op.inputs) > 1 else None
    act = CU_ACT[a.get("act", "none")]
    if op.kind == "deconv2d":
        if residual is not None:  # pragma: no cover - fuse_residual fuses into convs only
            raise AssertionError(f"{op.name}: residual on a transposed conv")
        return CuDeconv(**lw.head(op), h=h, w=w, cin=a["cin"], cout=a["cout"], k=a["kernel"][0], x_off=lw.off(x),
                        x_stride=lw.stride(x), w_off=lw.weight(op, "weight", lambda t: LAYOUTS.deconv(t, a)),
                        b_off=lw.weight(op, "bias"), act=act, y_off=lw.off(y),
                        y_stride=lw.stride(y))
    k = a["kernel"][0]
    convs = lw.tables.setdefault("convs", [])
    convs.append(dict(name=op.name, kh=k, kw=k, stride=a["stride"], pad=a["pad"], groups=a["groups"], cin=a["cin"],
                      cout=a["cout"], h=h, w=w, in_stride=lw.stride(x), out_stride=lw.stride(y),
                      res_stride=lw.stride(residual) if residual else 0, act=act))
    one_by_one = k == 1 and a["stride"] == 1 and a["pad"] == 0 and a["groups"] == 1
    direct = _conv_direct(convs[-1])  # the stem (carve_cuda_direct.h)
    return CuConv(**lw.head(op), index=len(convs) - 1, x_off=lw.off(x),
                  w_off=lw.weight(op, "weight", lambda t: LAYOUTS.conv(t, a)),
                  b_off=lw.weight(op, "bias"),
                  r_off=lw.off(residual) if residual else None, y_off=lw.off(y),
                  path="direct kernel (few input channels)" if direct else
                  "one GEMM on the NHWC view" if one_by_one else
                  "depthwise kernel" if a["groups"] > 1 else "im2col + GEMM")


def _same_size_pool(op) -> bool:
    """A max pool that keeps the size: stride 1, an odd window k, padding k // 2 (SPPF's)."""
    a = op.attrs
    return op.kind == "maxpool2d" and a["stride"] == 1 and a["kernel"] % 2 == 1 and a["pad"] == a["kernel"] // 2


def pool_chain(graph: Graph, op) -> list:
    """The pools chained with ``op`` in run order (SPPF: y_j = pool(y_{j-1}), three in a row): each op after the
    first the next op of the graph, a same-size pool (``_same_size_pool``) of the one before's output with its
    window. [op] when op chains with nothing."""
    ops = graph.ops
    i = ops.index(op)

    def chained(a, b) -> bool:
        return (_same_size_pool(a) and _same_size_pool(b) and a.attrs["kernel"] == b.attrs["kernel"]
                and b.inputs[0] == a.outputs[0])

    lo = i
    while lo > 0 and chained(ops[lo - 1], ops[lo]):
        lo -= 1
    hi = i
    while hi + 1 < len(ops) and chained(ops[hi], ops[hi + 1]):
        hi += 1
    return ops[lo:hi + 1]


def _chain_step(lw: Lowering, chain: list) -> int | None:
    """The distance in channels between the chain's consecutive outputs when one call can write them all: every
    output a view of one storage (alive from the chain's first op: nothing else can share its memory meanwhile) with
    one pixel stride, evenly spaced by at least a tensor's channels, and the input's channels apart from them.
    None otherwise (the pools run one by one)."""
    x, outs = chain[0].inputs[0], [op.outputs[0] for op in chain]
    c = lw.shape(x)[2]
    views = [lw.views[t] for t in outs]
    if len({(v.storage, v.stride) for v in views}) != 1:
        return None
    step = views[1].offset - views[0].offset
    if step < c or any(b.offset - a.offset != step for a, b in zip(views, views[1:])):
        return None
    xv = lw.views[x]
    if xv.storage == views[0].storage and not (xv.stride == views[0].stride and (
            xv.offset + c <= views[0].offset or xv.offset >= views[-1].offset + c)):
        return None
    return step


def _cu_maxpool(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    a = op.attrs
    chain = pool_chain(lw.graph, op)
    step = _chain_step(lw, chain) if len(chain) > 1 else None
    if step is not None and op is not chain[0]:
        return [lw.cls("view")(**lw.head(op), what=f"computed by {chain[0].name}'s chain of {len(chain)} pools")]
    if step is not None:
        head = dict(lw.head(op), source=f"{op.source}, {len(chain)} chained (each pooling the one before)",
                    flops=sum(op_flops(lw.graph, o) for o in chain),
                    shapes=f"({h},{w},{c}) -> {len(chain)} x ({h},{w},{c})")
        return [CuMaxpoolChain(**head, h=h, w=w, c=c, k=a["kernel"], n=len(chain), x_off=lw.off(x),
                               x_stride=lw.stride(x), y_off=lw.off(y), y_stride=lw.stride(y), y_step=step)]
    return [CuMaxpool(**lw.head(op), h=h, w=w, c=c, k=a["kernel"], stride=a["stride"], pad=a["pad"], x_off=lw.off(x),
                      x_stride=lw.stride(x), y_off=lw.off(y), y_stride=lw.stride(y))]


def _cu_add(lw: Lowering, op) -> list:
    check_add(lw, op)
    x, x2, y = op.inputs[0], op.inputs[1], op.outputs[0]
    h, w, c = lw.shape(x)
    return [CuAdd(**lw.head(op), pixels=h * w, c=c, a_off=lw.off(x), a_stride=c, b_off=lw.off(x2), b_stride=c,
                  y_off=lw.off(y), y_stride=c)]


def _dense(lw: Lowering, *tensors) -> None:
    """The classify head's (1, 1, c) vectors are dense views (stride c): a batch's image b at b c, what the pool,
    linear and softmax kernels index."""
    for t in tensors:
        if lw.stride(t) != lw.shape(t)[2]:  # pragma: no cover - planner invariant (no concat slot in the head)
            raise AssertionError(f"{t}: the classify head's vectors must be dense views")


def _cu_gap(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    h, w, c = lw.shape(x)
    _dense(lw, y)
    return [CuGap(**lw.head(op), h=h, w=w, c=c, x_off=lw.off(x), x_stride=lw.stride(x), y_off=lw.off(y))]


def _cu_linear(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    _dense(lw, x, y)
    return [CuLinear(**lw.head(op), cin=op.attrs["cin"], cout=op.attrs["cout"], x_off=lw.off(x),
                     w_off=lw.weight(op, "weight", lambda t: LAYOUTS.linear(t, op.attrs)),
                     b_off=lw.weight(op, "bias"), y_off=lw.off(y))]


def _cu_softmax(lw: Lowering, op) -> list:
    x, y = op.inputs[0], op.outputs[0]
    _dense(lw, x, y)
    return [lw.cls("softmax")(**lw.head(op), n=lw.shape(x)[2], x_off=lw.off(x), y_off=lw.off(y))]


def _cu_copy(lw: Lowering, op, t, slot: int):
    th, tw, ct = lw.shape(t)
    y = op.outputs[0]
    return CuCopy(**lw.head(op), pixels=th * tw, c=ct, x_off=lw.off(t), x_stride=lw.stride(t), y_off=lw.off(y, slot),
                  y_stride=lw.stride(y), what=f"copy {t} into its slot")


# The cuda backend's lowerings: its own compute ops; views, upsample, attention and e2e are the shared lowerings
# with the Cu* step classes (CUDA_STEP_CLASSES).
CUDA_LOWERINGS = dict(CPU_LOWERINGS, **{
    "conv2d": _cu_conv,
    "deconv2d": _cu_conv,
    "maxpool2d": _cu_maxpool,
    "add": _cu_add,
    "global_avgpool": _cu_gap,
    "linear": _cu_linear,
    "softmax": _cu_softmax,
    "attention": _cu_attention,
    "concat": concat_lowering(_cu_copy),
})


class CudaBackend(CBackend):
    name = "cuda"
    description = "NVIDIA GPU: CUDA C++ + cuBLAS, CUDA Graph replay"
    int8_refusal = ("the cuda backend computes in float32 only; int8 packages are for the CPU backends "
                    "(portable, xnnpack: docs/quantization.md)")
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
        "nms_detect": nms_rule,
        "global_avgpool": always,
        "linear": always,
        "softmax": _softmax_rule,
    }
    template_vars = {"max_image": MAX_IMAGE, "blas_workspace_bytes": BLAS_WORKSPACE_BYTES, "has_xnn_heap": False,
                     "pool": "NULL", "f16": False}
    # --precision fp16: half weights and activations, float32 accumulation (backends/cuda_f16.py)
    fp16_refusal = ""
    # every weight format and dtype of emit_c (the defaults of Backend): file and f16 are checked on the host
    # with runtime/carve_weights.c and uploaded once at create, f16 widened on the device
    templates = (("model.h.j2", "{name}.h"), ("model.cu.j2", "{name}.cu"), ("demo.cu.j2", "{name}_demo.cu"),
                 ("CMakeLists.txt.j2", "CMakeLists.txt"), ("README.md.j2", "README.md"))
    prefix = "CARVE_CU_"
    lowerings = CUDA_LOWERINGS
    step_classes = CUDA_STEP_CLASSES
    # the fixed C: the context, cuBLAS and f16 widening (carve_cuda_ops.cu), the device pre-processing
    # (carve_cuda_pre.cu); the host pieces of FIXED_FAMILIES are compiled with CARVE_RT_NO_THREADS
    families = ("cuda", "cuda_ops", "cuda_pre")

    def regions(self, graph: Graph) -> tuple:
        """The lanes: each layer's fork / join branches and the head's (backends/cuda_lanes.py)."""
        return cuda_lanes.regions(graph)

    def reads(self, graph: Graph) -> dict:
        """The depthwise + 1x1 pairs' and the attention + pe calls' inputs, read until their last op
        (``pair_reads``)."""
        return pair_reads(graph)

    def lower(self, graph: Graph, plan: Plan) -> dict:
        """The program the templates render: the carve_cu_* steps, the k_conv descriptors and the host sizes. The
        head runs in lanes only when the plan keeps their memory apart (planned with ``regions``)."""
        program = lower(graph, plan, self)
        program["convs"] = program.pop("convs", [])
        regions = plan.regions if plan.regions and plan.regions == self.regions(graph) else ()
        cuda_lanes.assign(program, graph, regions)
        program["deconvs"] = [st for lay in program["layers"] for st in lay["steps"] if isinstance(st, CuDeconv)]
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

    def emit(self, graph: Graph, plan: Plan, options) -> dict:
        if options.get("precision") == "fp16" and not self.template_vars.get("f16"):
            from .cuda_f16 import BACKEND as F16_BACKEND  # the fp16 variant of this backend
            return F16_BACKEND.emit(graph, plan, options)
        program = self.lower(graph, plan)
        program["batch"], program["batch_api"] = batch_options(graph.meta, program, options)
        program["tactic_slots"] = cuda_tactics.assign(program["convs"], lambda c: _conv_direct(c, program["batch"]))
        program["rows_per_image"] = rows_per_image(program, graph.meta["task"])
        in_h, in_w = graph.meta.get("input_hw") or (graph.meta["imgsz"], graph.meta["imgsz"])
        program["device_scratch_bytes"] = device_scratch_bytes(program, graph.meta["task"], graph.meta["nc"],
                                                               in_w, in_h, MAX_IMAGE, MAX_IMAGE)
        program["host_context_bytes"] = host_context_bytes(program, graph.meta["task"], graph.meta["nc"], in_w, in_h)
        if self.template_vars.get("f16"):  # the halves of one layer output, fetched before they are widened
            program["host_context_bytes"] += -(-program["layer_span_floats"] * 2 // 64) * 64
        return CPackage(self, graph, plan, program, options).files()


# the tasks whose outputs the batch API hands out: the rows (detect, segment, pose, obb, either head; segment's
# prototypes and masks per image too; --head nms: each image's row count), the probabilities (classify)
BATCH_TASKS = ("detect", "segment", "pose", "obb", "classify")


def batch_options(meta: dict, program: dict, options) -> tuple:
    """(batch, batch_api): --batch N (images per run; default 1) and whether the package has the batch /
    asynchronous API (run_images, enqueue_*: every task of BATCH_TASKS, with either head). A batch of more than one
    image is refused for any other task."""
    batch = int((options or {}).get("batch") or 1)
    api = meta["task"] in BATCH_TASKS
    if batch > 1 and not api:
        raise CarveError(f"--batch {batch}: the cuda backend batches {', '.join(BATCH_TASKS)} models; not "
                         f"{meta['task']} models",
                         hint="generate with --batch 1 (the default); no files were written")
    return batch, api


# ---- Sizes of the caller-owned buffers (<name>_create_with) -----------------------------------------
#
# Compile-time constants of the generated header. The device scratch is what the generated scratch_bytes()
# computes at run time from runtime/carve_cuda_*.cu's *_scratch_* functions, written out here for the default
# largest image (MAX_IMAGE x MAX_IMAGE, the header's <NAME>_MAX_IMAGE_W/H); the generated
# <name>_device_scratch_bytes() returns the run-time value and tests/cuda/cuda_options.py checks the two agree.

IM2COL_FLOATS = runtime_define("CARVE_CU_IM2COL_FLOATS")   # carve_cuda_ops.cu
DIRECT_MAX_CIN = runtime_define("CARVE_CU_DIRECT_MAX_CIN")  # carve_cuda_direct.h
DIRECT_MAX_K = runtime_define("CARVE_CU_DIRECT_MAX_K")
DIRECT_SLICE = runtime_define("CARVE_CU_DIRECT_SLICE")
TOPK_CHUNK = runtime_define("CARVE_CU_TOPK_CHUNK")         # carve_cuda_topk.cu
SORT_BLOCK = runtime_define("CARVE_CU_SORT_BLOCK")
NMS_MAX_NMS = runtime_define("CARVE_NMS_MAX_NMS")          # carve_nms.h
NMS_PARAM_BYTES = runtime_define("CARVE_CU_NMS_PARAM_BYTES")  # carve_cuda_nms.h


def _conv_out(n: int, k: int, stride: int, pad: int) -> int:
    return (n + 2 * pad - k) // stride + 1


def _conv_direct(c: dict, batch: int = 1) -> bool:
    """carve_cu_conv_direct (runtime/carve_cuda_direct.h): whether the conv runs as the direct kernel for few input
    channels (the stem): groups 1, cin <= DIRECT_MAX_CIN, kh kw cin <= DIRECT_MAX_K, and the kernel's index and grid
    limits."""
    if c["groups"] != 1 or c["cin"] > DIRECT_MAX_CIN or c["kh"] * c["kw"] * c["cin"] > DIRECT_MAX_K:
        return False
    if c["h"] >= 1 << 29 or c["w"] >= 1 << 29 or c["pad"] >= 1 << 28 or -(-c["cout"] // DIRECT_SLICE) > 65535:
        return False
    pixels = _conv_out(c["h"], c["kh"], c["stride"], c["pad"]) * _conv_out(c["w"], c["kw"], c["stride"], c["pad"])
    return pixels * max(batch, 1) <= 0x7FFFFFFF


def _conv_scratch_floats(c: dict, batch: int = 1) -> int:
    """carve_cu_conv2d_scratch_floats: an im2col chunk of whole output pixels of the batch (at most IM2COL_FLOATS
    per image; 0 for 1x1 GEMMs, depthwise and the direct kernel's few-input-channel convs)."""
    if c["groups"] != 1 or (c["kh"] == 1 and c["kw"] == 1 and c["stride"] == 1 and c["pad"] == 0):
        return 0
    if _conv_direct(c, batch):
        return 0
    k = c["kh"] * c["kw"] * c["cin"]
    pixels = _conv_out(c["h"], c["kh"], c["stride"], c["pad"]) * _conv_out(c["w"], c["kw"], c["stride"], c["pad"])
    return min(max(IM2COL_FLOATS * batch // k, 1), pixels * batch) * k


def _attention_scratch_floats(a: dict, batch: int = 1) -> int:
    """carve_cu_attention_scratch_floats: S of every (image, head) pair when the batch runs per head (fewer
    launches: 2 heads + 1 < 3 batch), else one image's heads."""
    per_head = 2 * a["heads"] + 1 < 3 * batch
    return (batch if per_head else 1) * a["heads"] * a["n"] * a["n"]


def _pow2_at_least(v: int) -> int:
    p = 1
    while p < v:
        p <<= 1
    return p


def _align8(v: int) -> int:
    return (v + 7) & ~7


def _topk_scratch_bytes(n: int, k: int) -> int:
    """carve_cu_topk_scratch_bytes: composites, state (16 bytes), histogram, chunk counts."""
    kk = min(k, n)
    return _pow2_at_least(max(kk, 1)) * 8 + 16 + 256 * 4 + 2 * (-(-n // TOPK_CHUNK)) * 4


def _e2e_scratch_bytes(anchors: int, nc: int, k: int, batch: int = 1) -> int:
    """carve_cu_e2e_batch_scratch_bytes: the top-k's scratch (one image at a time), then every image's scores
    and index lists."""
    kk = min(k, anchors)
    topk = _align8(max(_topk_scratch_bytes(anchors, kk), _topk_scratch_bytes(kk * nc, kk)))
    return (topk + _align8(batch * anchors * 4) + _align8(batch * kk * nc * 4) + 2 * _align8(batch * kk * 4))


def _topk_numbers_scratch_bytes(n: int, k: int, batch: int) -> int:
    """carve_cu_topk_numbers_scratch_bytes: nothing while a list's results fit shared memory, else each list's
    composites padded to a power of two."""
    kk = min(k, n)
    return 0 if kk <= SORT_BLOCK else batch * _pow2_at_least(kk) * 8


def _nms_scratch_bytes(anchors: int, max_det: int, batch: int = 1) -> int:
    """carve_cu_nms_batch_scratch_bytes: every image's scores, order, boxes, kept anchors and candidate count, then
    the candidates' top-k scratch."""
    kk = min(anchors, NMS_MAX_NMS)
    return (_align8(batch * anchors * 4) + _align8(batch * kk * 4) + _align8(batch * kk * 5 * 4)
            + _align8(batch * min(max_det, kk) * 4) + _align8(batch * 4)
            + _topk_numbers_scratch_bytes(anchors, kk, batch))


def rows_per_image(p: dict, task: str) -> int:
    """The generated NUM_ROWS: each image's room for rows, min(k, anchors), also at most CARVE_NMS_MAX_NMS with
    --head nms (carve_cu_nms_postprocess_batch's stride between images); 0 for classify."""
    if task == "classify":
        return 0
    rows = min(p["rows_k"], p["anchors"])
    return min(rows, NMS_MAX_NMS) if p.get("nms") else rows


def nms_param_bytes(batch: int) -> int:
    """The generated NMS_PARAM_BYTES: the scratch's tail with the run's conf and each image's row count, in
    multiples of CARVE_CU_NMS_PARAM_BYTES."""
    return -(-(4 + 4 * batch) // NMS_PARAM_BYTES) * NMS_PARAM_BYTES


def _pil_ksize(n_in: int, n_out: int) -> int:
    """carve_pre_pil_ksize: (double)(float)in / out, support at least 1, ceil(support) * 2 + 1."""
    import math
    import numpy as np
    scale = float(np.float32(n_in)) / n_out
    return math.ceil(max(scale, 1.0)) * 2 + 1


def _classify_scratch_bytes(w: int, h: int, out: int) -> int:
    """carve_pre_classify_scratch_bytes (carve_pre_math.h): torchvision's Resize(out) of w x h, Pillow kernels."""
    shorter, longer = min(w, h), max(w, h)
    new_long = int((out * longer) / shorter)
    new_w, new_h = (out, new_long) if w <= h else (new_long, out)
    ksize_x = _pil_ksize(w, new_w) if new_w != w else 0
    ksize_y = _pil_ksize(h, new_h) if new_h != h else 0
    rows = h * out * 3 if new_w != w else 0
    return out * (4 + ksize_x + ksize_y) * 4 + rows


def _deconv_scratch_bytes(d, batch: int = 1) -> int:
    """carve_cu_deconv2d_scratch_floats in bytes (a batch: its images' rows one after another, BATCH x h rows)."""
    return batch * d["h"] * d["w"] * d["k"] * d["k"] * d["cout"] * 4


def lanes_scratch_bytes(p: dict) -> int:
    """The generated lane_scratch_offset(LANES): the lanes' slices of the device scratch side by side
    (backends/cuda_lanes.py), lane k's its own calls' largest need rounded up to 256 bytes."""
    need = [0] * p.get("lanes", 0)
    for c, lane in zip(p["convs"], p.get("conv_lanes", [])):
        if lane >= 0:
            need[lane] = max(need[lane], _conv_scratch_floats(c, p.get("batch", 1)) * 4)
    for d in p.get("lane_deconvs", []):
        need[d.lane] = max(need[d.lane], _deconv_scratch_bytes(d, p.get("batch", 1)))
    for a in p.get("lane_attention", []):
        need[a.lane] = max(need[a.lane], _attention_scratch_floats(a, p.get("batch", 1)) * 4)
    return sum(-(-n // 256) * 256 for n in need)


def device_scratch_bytes(p: dict, task: str, nc: int, in_w: int, in_h: int, max_w: int, max_h: int) -> int:
    """The generated scratch_bytes(max_w, max_h): the largest scratch of any call of the forward and of the
    pre-processing, rounded up to 256 bytes."""
    need = [_conv_scratch_floats(c, p.get("batch", 1)) * 4 for c in p["convs"]]
    need += [_deconv_scratch_bytes(d, p.get("batch", 1)) for d in p["deconvs"]]
    need += [_attention_scratch_floats(a, p.get("batch", 1)) * 4 for a in p["attention"]]
    need.append(lanes_scratch_bytes(p))
    if task == "classify":
        need.append(_classify_scratch_bytes(max_w, max_h, in_w))
    elif p.get("nms"):
        need.append(_nms_scratch_bytes(p["anchors"], p["rows_k"], p.get("batch", 1)))
        need.append((in_w * 3 + in_h * 4) * 4)  # carve_cu_letterbox_scratch_bytes
        return -(-max(need) // 256) * 256 + nms_param_bytes(p.get("batch", 1))  # the tail: conf, the row counts
    else:
        need.append(_e2e_scratch_bytes(p["anchors"], nc, p["rows_k"], p.get("batch", 1)))
        need.append((in_w * 3 + in_h * 4) * 4)  # carve_cu_letterbox_scratch_bytes
    return -(-max(need) // 256) * 256


def host_context_bytes(p: dict, task: str, nc: int, in_w: int, in_h: int) -> int:
    """An upper bound of the generated context struct (the .cu static_asserts it): its fixed fields
    (< 1 KiB), an event and a double per layer boundary, and the host copies it holds (each rounded up to
    64 bytes): the run_tensor input, output0, the prototypes, one layer output for the callback; the lanes; the
    tactic table."""
    batch = p.get("batch", 1)
    floats = [in_h * in_w * 3, batch * (nc if task == "classify" else rows_per_image(p, task) * p["row_len"]),
              p["layer_span_floats"]]
    if "output1" in p["outputs"]:
        o = p["outputs"]["output1"]
        floats.append(batch * o["h"] * o["w"] * o["c"])
    arrays = sum(-(-f * 4 // 64) * 64 for f in floats) + 64 * batch  # + a letterbox record per image
    if p.get("nms"):
        arrays += -(-4 * batch // 64) * 64  # each image's row count
    # a context, a scratch pointer, a stream and an event per lane; fork, flags; an event per early fork
    lanes = 128 * p.get("lanes", 0) + 64 + 8 * len(p.get("marks", []))
    tactics = 9 * p.get("tactic_slots", 0)  # each shape's path and its two times
    return -(-(1024 + 16 * (len(p["layers"]) + 1) + arrays + lanes + tactics) // 64) * 64


BACKEND = CudaBackend()
