"""Renders build/bench/results/*.json (bench/bench.py) into docs/performance.md and docs/perf.png."""
from __future__ import annotations

import os
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


def wall_peak_for(r: dict) -> float:
    """The FMA loop's rate per wall-clock second under the load of the run: the peak a process got then."""
    return r["fma_peak"][f"t{r['threads']}"]["best_per_core_wall"]


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
    effw = efficiency(r["flops"], c["net_median"], 2, wall_peak_for(r))
    lines.append(f"| efficiency ≥ 60% of the FMA peak (2 threads) | {100 * eff2:.1f}% of the network "
                 f"({100 * eff2e:.1f}% counting pre/post), peak {peak:.1f} GFLOP/s per core; against the peak the "
                 f"FMA loop got under the same load ({wall_peak_for(r):.1f} GFLOP/s): {100 * effw:.0f}% | "
                 f"{'met' if eff2 >= 0.6 else 'not met'} |")
    r1 = next((x for x in results if x["model"] == "yolo26n" and x["threads"] == 1), None)
    if r1 is not None and "carve" in r1["systems"]:
        eff1 = efficiency(r1["flops"], r1["systems"]["carve"]["net_median"], 1, peak_for(r1))
        effw1 = efficiency(r1["flops"], r1["systems"]["carve"]["net_median"], 1, wall_peak_for(r1))
        lines.append(f"| single-thread efficiency (reported beside it) | {100 * eff1:.1f}% of the network, "
                     f"peak {peak_for(r1):.1f} GFLOP/s; against the loaded peak ({wall_peak_for(r1):.1f} GFLOP/s): "
                     f"{100 * effw1:.0f}% | (no target) |")
    lines.append(f"| init < 150 ms | {c['init_ms']:.1f} ms | {'met' if c['init_ms'] < 150 else 'not met'} |")
    budget = r["weight_bytes"] + r["arena_bytes"] + 16 * MIB
    rss = c["maxrss_kb"] * 1024
    own = rss - c["baseline_rss_kb"] * 1024
    verdict = "met" if rss <= budget else ("not met for the whole process; met for carve's own growth" if own <= budget
                                           else "not met")
    lines.append(f"| peak RSS ≤ weights + arena + 16 MiB = {budget / MIB:.1f} MiB | whole process {rss / MIB:.1f} MiB; "
                 f"growth over the runner's peak before create (decoded PNG, stb's decoder buffers: "
                 f"{c['baseline_rss_kb'] / 1024:.1f} MiB) {own / MIB:.1f} MiB | {verdict} |")
    return lines


def table(r: dict) -> list[str]:
    peak = peak_for(r)
    out = [
        f"**{r['model']}, {r['imgsz']}x{r['imgsz']}, {r['threads']} thread{'s' if r['threads'] > 1 else ''}** "
        f"({r['flops'] / 1e9:.2f} GFLOPs per inference; {r['runs']} runs after {r['warmup']} warm-up, interleaved; "
        f"load average {r['load_before'][0]:.2f} before, {r['load_during_mean']:.2f} mean during, "
        f"{r['load_after'][0]:.2f} after)",
        "",
        "| system | e2e median ms | e2e p90 ms | network median ms | network p90 ms | efficiency (vs loaded peak) | init ms | "
        "peak RSS MiB (over baseline) | model file MiB | runtime libs MiB | detections | top-5 box Δ px |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in sorted(r["systems"].items(), key=lambda kv: kv[1]["e2e_median"]):
        eff = efficiency(r["flops"], s["net_median"], r["threads"], peak)
        effw = efficiency(r["flops"], s["net_median"], r["threads"], wall_peak_for(r))
        diff = s["max_box_diff_vs_first_px"]
        out.append(
            f"| {SYSTEM_NAMES[name]} | {s['e2e_median']:.1f} | {s['e2e_p90']:.1f} | {s['net_median']:.1f} | "
            f"{s['net_p90']:.1f} | {100 * eff:.1f}% ({100 * effw:.0f}%) | {s['init_ms']:.0f} | {s['maxrss_kb'] / 1024:.0f} "
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
    loads = [r["load_during_mean"] for r in results]
    cores = os.cpu_count() or 0
    ax.set_title(f"YOLO26, pre-processing + network + post-processing, {cores}-core machine, load average "
                 f"{min(loads):.1f} to {max(loads):.1f} during the runs (lower is better)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


BEGIN = "<!-- bench:begin (written by bench/report.py from build/bench/results/*.json; edit outside) -->"
END = "<!-- bench:end -->"


def measured_block(results: list[dict], machine: dict) -> list[str]:
    """The measured part of docs/performance.md: machine, targets, one table per model and thread count."""
    peak = results[0]["fma_peak"]
    peaks = "; ".join(
        f"{k[1:]} thread{'s' if k != 't1' else ''}: " + ", ".join(
            f"{isa} {v['gflops_per_core']:.1f} ({v['gflops_per_core_wall']:.1f} wall-clock)"
            for isa, v in d.items() if isinstance(v, dict))
        for k, d in peak.items())
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores ({', '.join(machine['isa'])}), Linux "
        f"{machine['kernel']}, Python {machine['python']}.",
        "",
        f"FMA peak per core in GFLOP/s (bench/fma_peak.c, best of 5; per CPU-second the thread was given, in "
        f"brackets per wall-clock second under the load of that moment; every invocation measures its own, this is "
        f"the one of the first table): {peaks}.",
        "",
        "![end-to-end latency per system](perf.png)",
        "",
        "### Targets (yolo26n, 640, 2 threads, the same run)",
        "",
        "| target | measured | |",
        "|---|---|---|",
        *targets(results),
        "",
    ]
    for r in results:
        lines += table(r)
    return lines


def write_report(results: list[dict], machine: dict, docs: Path) -> None:
    order = {"yolo26n": 0, "yolo26s": 1, "yolo26n-seg": 2}
    results = sorted(results, key=lambda r: (order.get(r["model"], 9), r["model"], r["threads"]))
    chart(results, docs / "perf.png")
    block = "\n".join([BEGIN, "", *measured_block(results, machine), END])
    path = docs / "performance.md"
    text = path.read_text() if path.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        raise SystemExit(f"bench/report.py: {path}: the markers {BEGIN!r} and {END!r} are missing")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(head + block + tail)
