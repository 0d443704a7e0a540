#!/usr/bin/env python3
"""One peer system of the benchmark in its own process, behind a line protocol (the same as bench/carve_runner.c).

    python3 bench/peer.py --system {onnxruntime,openvino,executorch,pytorch} --artifact PATH --pt CKPT
                          --image bus.jpg --threads N --imgsz 640 [--ov-precision f32|default]

Decodes the image once (cv2.imread, not timed), creates the model (timed: init_ms), runs it once and prints
    {"init_ms": ..., "baseline_rss_kb": ..., "detections": N, "rows": [[x1, y1, x2, y2, score, cls], ...]}
(OpenVINO: with "inference_precision", what the CPU plugin runs the float parts in: f32, or its own choice, bf16 on
CPUs with AVX512-BF16 / AMX, under --ov-precision default)
then reads commands on stdin:
    run K   K timed runs; prints {"e2e_ms": [...], "net_ms": [...]}
    quit    prints {"maxrss_kb": ...} (peak resident set size of this process, VmHWM: see rss_kb) and exits

One run, as Ultralytics' predictor does it: LetterBox(640, auto=False) on the BGR image, BGR->RGB, HWC->CHW, /255
(pre-processing), the exported network with YOLO26's end-to-end head inside (decode + top-k: (1, 300, 6 + extra)
rows), then the rows above conf 0.25 with their boxes mapped back to the image by ops.scale_boxes (post-processing).
net_ms is the network call alone. Every system runs the same Python pre/post code.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def rss_kb() -> int:
    """This process's peak resident set size in KiB: VmHWM of /proc/self/status.

    Not getrusage(RUSAGE_SELF).ru_maxrss: on Linux execve() folds the peak of the address space it replaces into
    it, so a peer started by bench.py would report bench.py's own peak (torch loaded, exports done) if that was
    larger. VmHWM is the peak of the current address space only (bench/peak_rss.h does the same in C)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("bench/peer.py: /proc/self/status has no VmHWM line")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", required=True, choices=["onnxruntime", "openvino", "executorch", "pytorch"])
    ap.add_argument("--artifact", required=True, help=".onnx, OpenVINO .xml, ExecuTorch .pte or the .pt")
    ap.add_argument("--pt", required=True, help="the Ultralytics checkpoint (PyTorch peer)")
    ap.add_argument("--image", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--ov-precision", choices=["f32", "default"], default="f32",
                    help="OpenVINO: INFERENCE_PRECISION_HINT f32 (default), or the CPU plugin's own choice")
    a = ap.parse_args()
    n = str(a.threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = n

    import cv2
    import numpy as np
    import torch
    from ultralytics.data.augment import LetterBox

    torch.set_num_threads(a.threads)
    cv2.setNumThreads(1)
    img = cv2.imread(a.image)
    if img is None:
        sys.exit(f"bench/peer.py: {a.image}: cannot read the image")
    letterbox = LetterBox((a.imgsz, a.imgsz), auto=False, scaleup=True, center=True)
    baseline = rss_kb()

    t0 = time.perf_counter()
    info = {}
    if a.system == "openvino":
        net, compiled = openvino_network(a.artifact, a.threads, None if a.ov_precision == "default" else "f32")
        info["inference_precision"] = openvino_precision(compiled)
    else:
        net = make_network(a.system, a.artifact, a.pt, a.threads)
    init_ms = (time.perf_counter() - t0) * 1e3

    def run() -> tuple[np.ndarray, float]:
        x = to_tensor(img, letterbox)
        t = time.perf_counter()
        rows = net(x)[0]
        net_ms = (time.perf_counter() - t) * 1e3
        return to_image(rows, x.shape, img.shape, a.conf), net_ms

    rows, _ = run()
    print(json.dumps({"init_ms": init_ms, "baseline_rss_kb": baseline, "detections": len(rows),
                      "rows": [[round(float(v), 5) for v in r[:6]] for r in rows[:5]], **info}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[:1] == ["run"] and len(cmd) == 2:
            e2e, nets = [], []
            for _ in range(int(cmd[1])):
                t = time.perf_counter()
                _, net_ms = run()
                e2e.append((time.perf_counter() - t) * 1e3)
                nets.append(net_ms)
            print(json.dumps({"e2e_ms": e2e, "net_ms": nets}), flush=True)
        elif cmd[:1] == ["quit"]:
            break
        else:
            sys.exit(f"bench/peer.py: unknown command: {line.strip()}")
    print(json.dumps({"maxrss_kb": rss_kb()}), flush=True)


def to_tensor(img, letterbox):
    """Pre-processing, as Ultralytics' predictor: the letterboxed BGR image as a (1,3,H,W) float32 RGB array / 255."""
    import numpy as np

    x = letterbox(image=img)
    return np.ascontiguousarray(x[..., ::-1].transpose(2, 0, 1)[None], dtype=np.float32) / np.float32(255.0)


def to_image(rows, shape, image_shape, conf: float):
    """Post-processing: the rows (N, 6 + extra) of score > conf, boxes mapped from the network input of `shape`
    (1,3,H,W) back to the image's pixels (ops.scale_boxes: letterbox undone, clipped), as the predictor does."""
    import numpy as np
    import torch
    from ultralytics.utils import ops

    rows = rows[rows[:, 4] > conf]
    boxes = ops.scale_boxes(shape[2:], torch.from_numpy(np.ascontiguousarray(rows[:, :4])), image_shape)
    rows[:, :4] = boxes.numpy()
    return rows


def openvino_network(artifact, threads: int, precision: str | None = "f32"):
    """(run, compiled): an OpenVINO CPU model. precision "f32" like every other system (the CPU plugin would
    otherwise pick bf16 on AVX512-BF16/AMX CPUs); None: the plugin's default (compiled's INFERENCE_PRECISION_HINT
    says which it chose)."""
    import openvino as ov

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"}
    if precision is not None:
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = core.compile_model(core.read_model(str(artifact)), "CPU", config)
    request = compiled.create_infer_request()

    def run_ov(x):
        request.infer({0: x})
        return request.get_output_tensor(0).data
    return run_ov, compiled


def openvino_precision(compiled) -> str:
    """The precision a compiled OpenVINO model runs its float parts in ("f32", "bf16", "f16")."""
    chosen = compiled.get_property("INFERENCE_PRECISION_HINT")  # an ov.Type
    return chosen.to_string() if hasattr(chosen, "to_string") else str(chosen)


def make_network(system: str, artifact, pt, threads: int):
    """A function (1,3,H,W) float32 array -> (1, rows, 6 + extra) array, created for `threads` threads."""
    import torch

    if system == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(str(artifact), so, providers=["CPUExecutionProvider"])
        name = sess.get_inputs()[0].name
        return lambda x: sess.run(None, {name: x})[0]
    if system == "openvino":
        return openvino_network(artifact, threads)[0]
    if system == "executorch":
        from executorch.extension.pybindings import portable_lib
        from executorch.runtime import Runtime

        portable_lib._unsafe_reset_threadpool(threads)
        method = Runtime.get().load_program(str(artifact)).load_method("forward")
        return lambda x: method.execute([torch.from_numpy(x)])[0].numpy()
    if system == "pytorch":
        from ultralytics import YOLO
        from ultralytics.nn.modules import Detect

        torch.set_num_interop_threads(1)
        model = YOLO(str(pt)).model.float()
        model.end2end = True
        model = model.fuse().eval()
        for m in model.modules():
            if isinstance(m, Detect):
                m.export = True  # return the rows (and prototypes) only

        def run_torch(x):
            with torch.inference_mode():
                y = model(torch.from_numpy(x))
            return (y[0] if isinstance(y, (tuple, list)) else y).numpy()
        return run_torch
    raise ValueError(system)


if __name__ == "__main__":
    main()
