#!/usr/bin/env python3
"""PyTorch's side of tools/gpu_carry/bench.sh: the Ultralytics model (end-to-end head) on the GPU, one JSON line
per (precision, mode, batch) on stdout.

    torch_bench.py --weights yolo26n.pt --imgsz 640 --batches 1,32 --runs 100 [--device cuda] [--dry-run]

The model is Ultralytics' own: load_checkpoint, ``end2end = True`` set before ``fuse()`` (fuse() otherwise drops
the one-to-one head), eval, on the device. Precisions: fp32 with TF32 convolutions and matmuls (cuDNN's default
for convolutions; torch.backends.cuda.matmul.allow_tf32 also on), fp16 (model.half()), fp16 channels-last. Modes:
eager, and a CUDA Graph of the whole forward (torch.cuda.graph, captured after warm-up on a side stream, input
already on the GPU). Timing as carve's bench_main: the median wall-clock time of --runs calls, each followed by
torch.cuda.synchronize(), and the throughput of --runs calls back to back with one synchronisation at the end.
Input: random values in [0, 1) (the network's cost does not depend on them; the top-k of the head sees spread
scores). --dry-run: CPU, eager fp32 only, 2 runs (checks the script without a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("YOLO_OFFLINE", "1")  # no update / download checks: the GPU machine has no network


def load(weights: str, torch):
    from ultralytics.nn.tasks import load_checkpoint

    model, _ = load_checkpoint(weights, device=torch.device("cpu"))
    if hasattr(model, "end2end") and getattr(model.model[-1], "one2one_cv2", None) is not None:
        model.end2end = True  # before fuse(), which otherwise drops the one-to-one head
    model = model.float().fuse(verbose=False).eval()
    for p in model.parameters():
        p.requires_grad = False
    return model


def timed(fn, runs: int, sync) -> tuple:
    """(median ms of `runs` synchronised calls, ms per call of `runs` calls back to back)."""
    t = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        t.append((time.perf_counter() - t0) * 1e3)
    t.sort()
    t0 = time.perf_counter()
    for _ in range(runs):
        fn()
    sync()
    return t[len(t) // 2], (time.perf_counter() - t0) * 1e3 / runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", default="fp32-tf32,fp16,fp16-channels-last",
                    help="comma-separated subset of fp32-tf32, fp16, fp16-channels-last (default: all three)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, eager fp32, 2 runs: checks the script")
    args = ap.parse_args()
    import torch

    dev = torch.device("cpu" if args.dry_run else args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("torch_bench: no CUDA device", file=sys.stderr)
        return 2
    runs = 2 if args.dry_run else args.runs
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    base = load(args.weights, torch)
    known = {"fp32-tf32": (torch.float32, False), "fp16": (torch.float16, False),
             "fp16-channels-last": (torch.float16, True)}
    names = ["fp32-tf32"] if args.dry_run else [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in known]
    if unknown:
        print(f"torch_bench: --variants: unknown {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    variants = [(name, *known[name]) for name in names]
    modes = ["eager"] if args.dry_run else ["eager", "graph"]
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"}
    for name, dtype, channels_last in variants:
        model = load(args.weights, torch) if dtype != torch.float32 else base
        model = model.to(dev).to(dtype)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        if channels_last:
            model = model.to(memory_format=fmt)
        for batch in [int(b) for b in args.batches.split(",") if b]:
            g = torch.Generator().manual_seed(0)
            x = torch.rand(batch, 3, args.imgsz, args.imgsz, generator=g).to(dev, dtype).contiguous(memory_format=fmt)
            for mode in modes:
                row = {"system": f"pytorch {mode} {name}", "batch": batch, **info}
                try:
                    with torch.inference_mode():
                        if mode == "eager":
                            for _ in range(3 if args.dry_run else 10):
                                model(x)
                            sync()
                            ms, per = timed(lambda: model(x), runs, sync)
                        else:
                            s = torch.cuda.Stream()
                            s.wait_stream(torch.cuda.current_stream())
                            with torch.cuda.stream(s):
                                for _ in range(5):
                                    model(x)
                            torch.cuda.current_stream().wait_stream(s)
                            graph = torch.cuda.CUDAGraph()
                            with torch.cuda.graph(graph):
                                model(x)
                            graph.replay()
                            sync()
                            ms, per = timed(graph.replay, runs, sync)
                    row.update(ms=round(ms, 4), throughput_ips=round(batch * 1e3 / per, 1))
                except Exception as e:  # report and go on: one failing mode must not lose the others
                    row.update(error=f"{type(e).__name__}: {e}"[:300])
                print(json.dumps(row), flush=True)
        if dev.type == "cuda":
            del model
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
