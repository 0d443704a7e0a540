"""Ultralytics modules lowered to IR ops, one function per module class.

Each function mirrors the module's ``forward`` at inference (see
shared reference §2) and reads its parameters by state-dict path, checking
every tensor's shape against what the architecture implies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CarveError
from ..ir import GraphBuilder

if TYPE_CHECKING:
    from ..checkpoint import Checkpoint


@dataclass
class Ctx:
    """What module builders share: the graph under construction and the weights."""

    gb: GraphBuilder
    ckpt: "Checkpoint"
    default_eps: float
    layer: int = 0

    # -- parameters -------------------------------------------------------
    def param(self, key: str, shape: tuple) -> str:
        """Register checkpoint tensor ``key`` as a graph weight after checking its shape."""
        arr = self.ckpt.tensors.get(key)
        if arr is None:
            raise CarveError(f"{key}: tensor missing from the checkpoint (expected shape {_fmt(shape)})",
                             location=self.ckpt.path,
                             hint="was the checkpoint trained from the architecture and scale the manifest names?")
        if tuple(arr.shape) != tuple(shape):
            raise CarveError(f"{key}: expected {_fmt(shape)}, found {_fmt(arr.shape)}", location=self.ckpt.path,
                             hint="the checkpoint does not match the manifest's architecture/scale/classes")
        if arr.dtype.kind != "f":
            found = self.ckpt.dtypes.get(key, str(arr.dtype))
            raise CarveError(f"{key}: dtype {found} where a floating-point weight is expected "
                             "(supported: F16, BF16, F32, F64)", location=self.ckpt.path,
                             hint="quantized or integer checkpoints are not supported; export float weights")
        self.gb.weights[key] = np.ascontiguousarray(arr, dtype=np.float32)
        return key

    def module_type(self, path: str) -> str | None:
        info = self.ckpt.modules.get(path)
        return info.type.rsplit(".", 1)[-1] if info else None

    def activation(self, prefix: str, default: bool) -> str:
        """The activation of an Ultralytics Conv, decided by its pickled ``act`` object."""
        t = self.module_type(f"{prefix}.act")
        if t is None:
            return "silu" if default else "none"
        if t == "SiLU":
            return "silu"
        if t == "Identity":
            return "none"
        raise CarveError(f"{prefix}.act: activation {t} is not supported (supported: SiLU, Identity)",
                         location=self.ckpt.path)

    def bn_eps(self, prefix: str) -> float:
        info = self.ckpt.modules.get(f"{prefix}.bn")
        if info and "eps" in info.attrs:
            return checked_number(info.attrs["eps"], f"{prefix}.bn.eps", self.ckpt.path, 1e-12, 1.0, integer=False)
        return self.default_eps

    # -- primitive builders ----------------------------------------------
    def conv(self, prefix: str, x: str, c2: int, k: int = 1, s: int = 1, g: int = 1, act: bool = True,
             out: str | None = None) -> str:
        """Ultralytics Conv: conv2d(k, s, pad k//2, groups g, no bias) -> BN -> SiLU/Identity.

        ``out`` names the output tensor (default: the module path)."""
        cin = self.gb.shape(x)[2]
        if cin % g or c2 % g:
            raise CarveError(f"internal: {prefix}: groups {g} do not divide {cin}->{c2}")
        params = {
            "weight": self.param(f"{prefix}.conv.weight", (c2, cin // g, k, k)),
            "bn_gamma": self.param(f"{prefix}.bn.weight", (c2,)),
            "bn_beta": self.param(f"{prefix}.bn.bias", (c2,)),
            "bn_mean": self.param(f"{prefix}.bn.running_mean", (c2,)),
            "bn_var": self.param(f"{prefix}.bn.running_var", (c2,)),
        }
        a = self.activation(prefix, act)
        attrs = dict(kernel=(k, k), stride=s, pad=k // 2, groups=g, cin=cin, cout=c2, act=a, bn_eps=self.bn_eps(prefix))
        src = f"Conv {k}x{k}/{s}{' dw' if g == cin and g > 1 else ''} {cin}->{c2} {'SiLU' if a == 'silu' else 'linear'}"
        return self.gb.add("conv2d", prefix, [x], self.layer, attrs, params, src, outputs=[out] if out else None)[0]

    def conv2d(self, prefix: str, x: str, c2: int, k: int = 1) -> str:
        """Plain nn.Conv2d with bias, stride 1, pad k//2, no activation."""
        cin = self.gb.shape(x)[2]
        params = {"weight": self.param(f"{prefix}.weight", (c2, cin, k, k)),
                  "bias": self.param(f"{prefix}.bias", (c2,))}
        attrs = dict(kernel=(k, k), stride=1, pad=k // 2, groups=1, cin=cin, cout=c2, act="none")
        return self.gb.add("conv2d", prefix, [x], self.layer, attrs, params, f"Conv2d {k}x{k} {cin}->{c2} +bias")[0]

    def slice(self, name: str, x: str, start: int, count: int) -> str:
        return self.gb.add("slice", name, [x], self.layer, dict(start=start, count=count),
                           source=f"split [{start}:{start + count}]")[0]

    def concat(self, name: str, xs: list) -> str:
        return self.gb.add("concat", name, xs, self.layer, source="Concat")[0]

    def add(self, name: str, a: str, b: str) -> str:
        return self.gb.add("add", name, [a, b], self.layer, source="residual add")[0]


def checked_number(value, what: str, path: str, lo: float, hi: float, integer: bool = True):
    """A number read from the checkpoint's pickled attributes, refused by name when it is not a
    finite number in [lo, hi] (an integer when ``integer``): the pickle is untrusted, and a string,
    None, NaN or 10**12 there must not become a Python error, NaN weights or a huge allocation."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    if ok and integer and isinstance(value, float):
        ok = value.is_integer()
    if ok:
        ok = lo <= value <= hi  # False for NaN
    if not ok:
        kind = "an integer" if integer else "a number"
        raise CarveError(f"{what}: {value!r:.60} where {kind} in [{lo:g}, {hi:g}] is expected",
                         location=path, hint="the checkpoint's attributes are damaged or not from Ultralytics")
    return int(value) if integer else float(value)


def _fmt(shape) -> str:
    return "(" + ",".join(str(int(s)) for s in shape) + ")"


# ---------------------------------------------------------------------------
# Blocks (ultralytics/nn/modules/block.py)
# ---------------------------------------------------------------------------

def bottleneck(ctx: Ctx, p: str, x: str, c2: int, shortcut: bool = True, k=(3, 3), e: float = 0.5) -> str:
    """Bottleneck: cv2(cv1(x)) (+ x when shortcut and c1 == c2)."""
    c1 = ctx.gb.shape(x)[2]
    c_ = int(c2 * e)
    y = ctx.conv(f"{p}.cv1", x, c_, k[0])
    y = ctx.conv(f"{p}.cv2", y, c2, k[1])
    return ctx.add(f"{p}.add", x, y) if shortcut and c1 == c2 else y


def c3k(ctx: Ctx, p: str, x: str, c2: int, n: int = 2, shortcut: bool = True, e: float = 0.5, k: int = 3) -> str:
    """C3k: cv3(cat(m(cv1(x)), cv2(x))) with n Bottlenecks (e=1.0, k x k)."""
    c_ = int(c2 * e)
    a = ctx.conv(f"{p}.cv1", x, c_)
    b = ctx.conv(f"{p}.cv2", x, c_)
    for j in range(n):
        a = bottleneck(ctx, f"{p}.m.{j}", a, c_, shortcut, k=(k, k), e=1.0)
    return ctx.conv(f"{p}.cv3", ctx.concat(f"{p}.cat", [a, b]), c2)


def c3k2(ctx: Ctx, p: str, x: str, c2: int, n: int = 1, use_c3k: bool = False, e: float = 0.5,
         attn: bool = False) -> str:
    """C3k2 (C2f-style): cv2(cat(y0, y1, m0(y1), m1(m0(y1)), ...)) with y0, y1 = split(cv1(x))."""
    c = int(c2 * e)
    t = ctx.conv(f"{p}.cv1", x, 2 * c)
    ys = [ctx.slice(f"{p}.cv1[0:{c}]", t, 0, c), ctx.slice(f"{p}.cv1[{c}:{2 * c}]", t, c, c)]
    for j in range(n):
        q = f"{p}.m.{j}"
        if attn:
            y = bottleneck(ctx, f"{q}.0", ys[-1], c, True, e=0.5)
            y = psa_block(ctx, f"{q}.1", y, attn_ratio=0.5, num_heads=max(c // 64, 1))
        elif use_c3k:
            y = c3k(ctx, q, ys[-1], c, 2, True)
        else:
            y = bottleneck(ctx, q, ys[-1], c, True, e=0.5)
        ys.append(y)
    return ctx.conv(f"{p}.cv2", ctx.concat(f"{p}.cat", ys), c2)


def sppf(ctx: Ctx, p: str, x: str, c2: int, k: int = 5, n: int = 3, shortcut: bool = False) -> str:
    """SPPF: cv2(cat(y0, pool(y0), pool^2(y0), pool^3(y0))) (+ x), y0 = cv1(x) without activation."""
    c1 = ctx.gb.shape(x)[2]
    c_ = c1 // 2
    ys = [ctx.conv(f"{p}.cv1", x, c_, act=False)]
    for j in range(n):
        ys.append(ctx.gb.add("maxpool2d", f"{p}.m#{j}", [ys[-1]], ctx.layer, dict(kernel=k, stride=1, pad=k // 2),
                             source=f"MaxPool {k}x{k}/1")[0])
    y = ctx.conv(f"{p}.cv2", ctx.concat(f"{p}.cat", ys), c2)
    return ctx.add(f"{p}.add", y, x) if shortcut and c1 == c2 else y


def attention(ctx: Ctx, p: str, x: str, num_heads: int, attn_ratio: float = 0.5) -> str:
    """Attention: proj(attn(q, k, v) + pe(v)) with qkv = qkv(x) (BN, no activation)."""
    dim = ctx.gb.shape(x)[2]
    head_dim = dim // num_heads
    key_dim = int(head_dim * attn_ratio)
    qkv = ctx.conv(f"{p}.qkv", x, dim + 2 * key_dim * num_heads, act=False)
    o, v = ctx.gb.add("attention", f"{p}.attn", [qkv], ctx.layer,
                      dict(heads=num_heads, key_dim=key_dim, head_dim=head_dim, scale=float(key_dim ** -0.5)),
                      source=f"Attention heads={num_heads} key_dim={key_dim} head_dim={head_dim}",
                      outputs=[f"{p}.attn", f"{p}.v"])
    pe = ctx.conv(f"{p}.pe", v, dim, 3, g=dim, act=False)
    return ctx.conv(f"{p}.proj", ctx.add(f"{p}.add", o, pe), dim, act=False)


def psa_block(ctx: Ctx, p: str, x: str, attn_ratio: float, num_heads: int) -> str:
    """PSABlock: x = x + attn(x); x = x + ffn(x)."""
    c = ctx.gb.shape(x)[2]
    x = ctx.add(f"{p}.add1", x, attention(ctx, f"{p}.attn", x, num_heads, attn_ratio))
    f = ctx.conv(f"{p}.ffn.0", x, 2 * c)
    f = ctx.conv(f"{p}.ffn.1", f, c, act=False)
    return ctx.add(f"{p}.add2", x, f)


def c2psa(ctx: Ctx, p: str, x: str, c2: int, n: int = 1, e: float = 0.5) -> str:
    """C2PSA: cv2(cat(a, m(b))) with a, b = split(cv1(x))."""
    c1 = ctx.gb.shape(x)[2]
    if c1 != c2:
        raise CarveError(f"internal: {p}: C2PSA needs c1 == c2, got {c1}, {c2}")
    c = int(c1 * e)
    t = ctx.conv(f"{p}.cv1", x, 2 * c)
    a = ctx.slice(f"{p}.cv1[0:{c}]", t, 0, c)
    b = ctx.slice(f"{p}.cv1[{c}:{2 * c}]", t, c, c)
    for j in range(n):
        b = psa_block(ctx, f"{p}.m.{j}", b, attn_ratio=0.5, num_heads=c // 64)
    return ctx.conv(f"{p}.cv2", ctx.concat(f"{p}.cat", [a, b]), c1)


def upsample(ctx: Ctx, p: str, x: str, scale: int) -> str:
    info = ctx.ckpt.modules.get(p)
    if info is not None:
        mode = info.attrs.get("mode", "nearest")
        sf = info.attrs.get("scale_factor", scale)
        if isinstance(sf, (list, tuple)) and len(sf) == 2 and sf[0] == sf[1]:
            sf = sf[0]  # nn.Upsample keeps a per-axis pair when given one
        sf = checked_number(sf, f"{p}.scale_factor", ctx.ckpt.path, 1, 64, integer=False)
        if mode != "nearest" or float(sf) != float(int(float(sf))):
            raise CarveError(f"{p}: Upsample mode={mode} scale_factor={sf} is not supported (nearest, integer)",
                             location=ctx.ckpt.path)
        scale = int(float(sf))
    return ctx.gb.add("upsample_nearest", p, [x], ctx.layer, dict(scale=scale),
                      source=f"Upsample x{scale} nearest")[0]
