"""The cuda backend's tactic slots: which convolutions the runtime times on the device, and which share a timing.

A groups-1 convolution has two paths on the GPU (runtime/carve_cuda.h, "Tactics"): cuBLAS (im2col, GEMM and an
epilogue kernel: 2-3 launches) and carve's fused implicit-GEMM kernel (one launch). Which is faster depends on the
shape and on the GPU, so a package measures them at create, per convolution, as TensorRT times its tactics: each
k_conv descriptor names a slot of the context's tactic table (``carve_cu_conv.slot``), and the first call of a slot
while the package tunes times the cuBLAS path and the fused kernel's tiles and stores the fastest.

Convolutions of the same shape (every carve_cu_conv field: sizes, strides, activation, batch) share a slot, timed
once: yolo26n's 93 groups-1 convolutions with two paths (of 102 descriptors) are 71 slots. Depthwise convolutions and
the few-input-channel ones of the direct kernel (the stem) have one path and no slot (0), but for a depthwise
convolution run with the 1x1 after it (``pw``: the index of that one, carve_cu_conv2d_dwpw): its slot is the pair's,
shared by pairs of the same two shapes, and holds whether the pair runs as two launches or fused with a tile.
"""

from __future__ import annotations

SHAPE_FIELDS = ("kh", "kw", "stride", "pad", "groups", "cin", "cout", "h", "w", "in_stride", "out_stride",
                "res_stride", "act")


def assign(convs: list, direct) -> int:
    """Sets ``slot`` on each k_conv descriptor dict (1-based, shared by equal shapes; 0: none) and returns the
    number of slots. ``direct(conv)``: whether the conv runs as the direct kernel (cuda.py's _conv_direct)."""
    slots: dict = {}
    for c in convs:
        if "pw" in c:  # a depthwise conv with its 1x1 partner (carve_cu_conv2d_dwpw): the pair's slot
            key = ("pair",) + tuple(c[f] for f in SHAPE_FIELDS) + tuple(convs[c["pw"]][f] for f in SHAPE_FIELDS)
        elif c["groups"] != 1 or direct(c):
            c["slot"] = 0
            continue
        else:
            key = tuple(c[f] for f in SHAPE_FIELDS)
        c["slot"] = slots.setdefault(key, len(slots) + 1)
    return len(slots)
