"""Renders build/bench/results/*.json (bench/bench.py) into docs/performance.md and docs/perf.png."""
from __future__ import annotations

from pathlib import Path

SYSTEM_NAMES = {
    "carve": "carve (xnnpack package)",
    "onnxruntime": "ONNX Runtime (CPU EP)",
    "openvino": "OpenVINO (CPU, f32)",
    "executorch": "ExecuTorch (XNNPACK delegate)",
    "pytorch": "PyTorch eager",
}
MIB = 1024 * 1024


def efficiency(flops: int, ms: float, threads: int, peak_per_core: float) -> float:
    """Model FLOPs / (latency x threads x FMA peak per core), peak in GFLOP/s."""
    return flops / (ms * 1e-3 * threads * peak_per_core * 1e9)


def peak_for(r: dict) -> float:
    return r["fma_peak"][f"t{r['threads']}"]["best_per_core"]


def targets(results: list[dict]) -> list[str]:
    r = next((x for x in results if x["model"] == "yolo26n" and x["threads"] == 2), None)
    if r is None or "carve" not in r["systems"]:
        return ["(no yolo26n 2-thread result with carve: run `make bench`)"]
    s = r["systems"]
    c = s["carve"]
    peers = {k: v for k, v in s.items() if k != "carve"}
    lines = []
    if peers:
        best = min(peers, key=lambda k: peers[k]["e2e_median"])
        ratio = peers[best]["e2e_median"] / c["e2e_median"]
        lines.append(f"| carve ≥ 1.5x faster end to end than the fastest peer | fastest peer: {SYSTEM_NAMES[best]}, "
                     f"{peers[best]['e2e_median']:.1f} ms; carve {c['e2e_median']:.1f} ms: **{ratio:.2f}x** | "
                     f"{'met' if ratio >= 1.5 else 'not met'} |")
    peak = peak_for(r)
    eff2 = efficiency(r["flops"], c["net_median"], 2, peak)
    eff2e = efficiency(r["flops"], c["e2e_median"], 2, peak)
    lines.append(f"| efficiency ≥ 60% of the FMA peak (2 threads) | {100 * eff2:.1f}% of the network "
                 f"({100 * eff2e:.1f}% counting pre/post), peak {peak:.1f} GFLOP/s per core | "
                 f"{'met' if eff2 >= 0.6 else 'not met'} |")
    r1 = next((x for x in results if x["model"] == "yolo26n" and x["threads"] == 1), None)
    if r1 is not None and "carve" in r1["systems"]:
        eff1 = efficiency(r1["flops"], r1["systems"]["carve"]["net_median"], 1, peak_for(r1))
        lines.append(f"| single-thread efficiency (reported beside it) | {100 * eff1:.1f}% of the network, "
                     f"peak {peak_for(r1):.1f} GFLOP/s | (no target) |")
    lines.append(f"| init < 150 ms | {c['init_ms']:.1f} ms | {'met' if c['init_ms'] < 150 else 'not met'} |")
    budget = r["weight_bytes"] + r["arena_bytes"] + 16 * MIB
    rss = c["maxrss_kb"] * 1024
    lines.append(f"| peak RSS ≤ weights + arena + 16 MiB = {budget / MIB:.1f} MiB | {rss / MIB:.1f} MiB "
                 f"(process baseline before create: {c['baseline_rss_kb'] / 1024:.1f} MiB, with the decoded image) | "
                 f"{'met' if rss <= budget else 'not met'} |")
    return lines


def table(r: dict) -> list[str]:
    peak = peak_for(r)
    out = [
        f"**{r['model']}, {r['imgsz']}x{r['imgsz']}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}** "
        f"({r['flops'] / 1e9:.2f} GFLOPs per inference; {r['runs']} runs after {r['warmup']} warm-up, interleaved; "
        f"load average {r['load_before'][0]:.2f} before, {r['load_during_mean']:.2f} mean during, "
        f"{r['load_after'][0]:.2f} after)",
        "",
        "| system | e2e median ms | e2e p90 ms | network median ms | network p90 ms | efficiency | init ms | "
        "peak RSS MiB (over baseline) | model file MiB | runtime libs MiB | detections | top-5 box Δ px |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in sorted(r["systems"].items(), key=lambda kv: kv[1]["e2e_median"]):
        eff = efficiency(r["flops"], s["net_median"], r["threads"], peak)
        diff = s["max_box_diff_vs_first_px"]
        out.append(
            f"| {SYSTEM_NAMES[name]} | {s['e2e_median']:.1f} | {s['e2e_p90']:.1f} | {s['net_median']:.1f} | "
            f"{s['net_p90']:.1f} | {100 * eff:.1f}% | {s['init_ms']:.0f} | {s['maxrss_kb'] / 1024:.0f} "
            f"({(s['maxrss_kb'] - s['baseline_rss_kb']) / 1024:.0f}) | {s['artifact_bytes'] / MIB:.1f} | "
            f"{s['runtime_lib_bytes'] / MIB:.1f} | {s['detections']} | "
            f"{'-' if diff is None else f'{diff:.3f}'} |")
    return out + [""]


def chart(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [f"{r['model']}\n{r['threads']} thread{'s' if r['threads'] > 1 else ''}" for r in results]
    systems = [s for s in SYSTEM_NAMES if any(s in r["systems"] for r in results)]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(11, 5))
    for i, s in enumerate(systems):
        xs = [g + (i - (len(systems) - 1) / 2) * width for g in range(len(results))]
        med = [r["systems"][s]["e2e_median"] if s in r["systems"] else 0 for r in results]
        p90 = [r["systems"][s]["e2e_p90"] - r["systems"][s]["e2e_median"] if s in r["systems"] else 0 for r in results]
        ax.bar(xs, med, width, yerr=[[0] * len(p90), p90], capsize=2, label=SYSTEM_NAMES[s])
    ax.set_xticks(range(len(results)), groups)
    ax.set_ylabel("end-to-end latency, ms (median; whisker: p90)")
    ax.set_title("YOLO26 on this CPU: pre-processing + network + post-processing (lower is better)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(results: list[dict], machine: dict, docs: Path) -> None:
    order = {"yolo26n": 0, "yolo26s": 1, "yolo26n-seg": 2}
    results = sorted(results, key=lambda r: (order.get(r["model"], 9), r["model"], r["threads"]))
    chart(results, docs / "perf.png")
    peak = results[0]["fma_peak"]
    lines = [
        "# Performance: carve against ONNX Runtime, OpenVINO, ExecuTorch and PyTorch on the CPU",
        "",
        "<!-- The tables and docs/perf.png are written by bench/report.py from build/bench/results/*.json "
        "(make bench); the text around them is in bench/report.py too. -->",
        "",
        "```sh",
        "make bench                                                        # about 40 min on a loaded 2-core machine",
        "build/bench-venv/bin/python bench/bench.py --models yolo26n --threads 2 --runs 30   # one configuration",
        "build/bench-venv/bin/python bench/bench.py --report               # re-render this page from the results",
        "```",
        "",
        f"Machine: {machine['cpu']}, {machine['cores']} cores ({', '.join(machine['isa'])}), Linux "
        f"{machine['kernel']}, Python {machine['python']}. FMA peak per core (bench/fma_peak.c, best of 5): "
        + ", ".join(f"{k[1:]} thread{'s' if k != 't1' else ''}: " + ", ".join(
            f"{isa} {v['gflops_per_core']:.1f}" for isa, v in d.items() if isinstance(v, dict)) + " GFLOP/s"
            for k, d in peak.items()) + ".",
        "",
        "**The machine is shared**: 2 cores, with other engineers compiling and testing and a training job during "
        "the run. The load average of each configuration is printed with its table. The systems run interleaved "
        "(one inference each, in rotating order, round after round), so the load falls on all of them alike and "
        "the ratios between systems mean more than the absolute times. The FMA peak is measured under the same "
        "load (best of 5 repeats), so it and the efficiencies are approximate.",
        "",
        "![end-to-end latency per system](perf.png)",
        "",
        "## Targets (yolo26n, 640, 2 threads, the same run)",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *targets(results),
        "",
        "## Results",
        "",
    ]
    for r in results:
        lines += table(r)
    lines += [
        "## What is measured",
        "",
        "* **Same weights, same image, same threads.** One random-weight checkpoint per model "
        "(`tools/oracle.py make-checkpoint`, realistic BatchNorm statistics) feeds both carve and every exporter. "
        "The image is Ultralytics' `bus.jpg` (810x1080), decoded once by OpenCV and stored as PNG, so that carve "
        "(stb_image) and the peers (OpenCV) get the same pixels. Image decoding is not timed.",
        "* **End to end** (e2e) is pre-processing + network + post-processing, for every system: Ultralytics' "
        "`LetterBox(640, auto=False)` (peers, in Python with OpenCV) or carve's bit-exact C letterbox; the network "
        "with YOLO26's end-to-end head (decode and top-300) inside; then the rows above conf 0.25 with boxes mapped "
        "back to the image (`ops.scale_boxes` for peers, `carve_scale_boxes_xyxy` in carve). For yolo26n-seg the "
        "timed run ends at the rows and prototypes: masks are not rasterised (random weights put ~300 detections "
        "above 0.25, and rasterising them would time the mask upsampler rather than the network).",
        "* **Network only** is the inference call alone: `InferenceSession.run`, `InferRequest.infer`, "
        "`Method.execute`, `model(x)` under `torch.inference_mode`; for carve the sum of its per-layer times of "
        "that run (`<model>_layer_ms`, the same numbers `<model>_demo --profile` prints).",
        "* **Efficiency** = model FLOPs (carve's count, a multiply-add = 2; `<NAME>_FLOPS`) / (network median x "
        "threads x FMA peak per core at that thread count).",
        "* **Init** is the time to create a ready-to-run model in a fresh process: `<model>_create` (XNNPACK "
        "packs the weights), `InferenceSession(...)`, `compile_model` + `create_infer_request`, "
        "`load_program` + `load_method`, Ultralytics' checkpoint load + `fuse()`.",
        "* **Peak RSS** is `getrusage(RUSAGE_SELF).ru_maxrss` of each system's process after all its runs; in "
        "brackets the growth over the process's own peak before the model was created (for the Python peers "
        "that baseline is the interpreter with numpy, OpenCV, torch and Ultralytics, which the shared pre/post "
        "code imports).",
        "* **Sizes**: the model file(s) each system loads (carve: the whole runner executable, weights linked in), "
        "and the shared libraries that do the inference (carve: libXNNPACK, libpthreadpool, libcpuinfo; ONNX Runtime: "
        "its capi .so; OpenVINO: core + CPU plugin + IR frontend; ExecuTorch: the pybindings .so; PyTorch: "
        "libtorch_cpu + libc10).",
        "* **Agreement**: the last column is the largest coordinate difference of the top-5 rows against carve's, "
        "checking that every system ran the same model on the same pixels.",
        "",
        "### The peers",
        "",
        "| system | version source | artifact | threads |",
        "|---|---|---|---|",
        "| ONNX Runtime | `bench/requirements.txt` | Ultralytics' ONNX export (`nms=False` keeps the end-to-end head, "
        "`simplify=False`) | `intra_op_num_threads`, sequential, all graph optimisations |",
        "| OpenVINO | `bench/requirements.txt` | Ultralytics' OpenVINO IR export (fp32) | `INFERENCE_NUM_THREADS`, "
        "`PERFORMANCE_HINT=LATENCY`, `INFERENCE_PRECISION_HINT=f32` (it would pick bf16 on this CPU otherwise) |",
        "| ExecuTorch | `bench/requirements.txt` (1.0, built for the installed torch 2.9) | the fused Ultralytics module, "
        "end-to-end head on, `torch.export` + `to_edge_transform_and_lower(XnnpackPartitioner)` (bench/export.py; "
        "Ultralytics' own ExecuTorch export drops the end-to-end branch) | `_unsafe_reset_threadpool(N)` |",
        "| PyTorch eager | the test environment's torch | the checkpoint, `fuse()`d, end-to-end head | "
        "`torch.set_num_threads(N)`, 1 inter-op thread |",
        "",
        "torch.compile is not included: compiling YOLO26 with inductor takes minutes on this machine.",
        "",
        "## Where carve's time goes",
        "",
        "`<model>_demo IMAGE --profile` prints the per-layer table (layer, op, ms, share, GFLOP/s) of the last "
        "run. See [the optimisation notes](#optimisation-notes).",
        "",
    ]
    notes = docs / "performance-notes.md"
    if notes.exists():
        lines += ["## Optimisation notes", "", notes.read_text().strip(), ""]
    (docs / "performance.md").write_text("\n".join(lines))
