"""Smoke test of the benchmark harness's own parts (no peers, no models): the FMA peak microbenchmark and the report.

    python3 -m pytest -q tests/bench       # about 10 s; needs a C compiler and matplotlib

The report is fed one result built from a real fma_peak run and latencies chosen here as inputs; the test checks
the arithmetic the report states (efficiency, speed-up, RSS budget) against its own definitions, the verdicts at
both sides of each target, and that the measured block replaces only what lies between the markers.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402


@pytest.fixture(scope="module")
def peak(tmp_path_factory) -> dict:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("fma") / "fma_peak"
    subprocess.run([cc, "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-pthread", str(ROOT / "bench/fma_peak.c"),
                    "-o", str(exe)], check=True)
    out = {}
    for t in (1, 2):
        r = subprocess.run([str(exe), "--threads", str(t), "--seconds", "0.02"], capture_output=True, text=True,
                           check=True)
        out[f"t{t}"] = json.loads(r.stdout)
    return out


def test_fma_peak_reports_positive_consistent_numbers(peak):
    for t, d in peak.items():
        assert d["threads"] == int(t[1:])
        isas = {k: v for k, v in d.items() if isinstance(v, dict)}
        assert isas, "no instruction set measured"
        for v in isas.values():
            assert v["gflops_per_core"] > 0
            # CPU time <= wall-clock time, so the per-CPU-second rate is at least the wall-clock one (5% slack for
            # clock granularity on very short repeats).
            assert v["gflops_per_core"] >= 0.95 * v["gflops_per_core_wall"]
        assert d["best_per_core"] == max(v["gflops_per_core"] for v in isas.values())


def test_fma_peak_rejects_bad_arguments(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "fma_peak"
    subprocess.run([cc, "-std=c11", "-O2", "-pthread", str(ROOT / "bench/fma_peak.c"), "-o", str(exe)], check=True)
    for args in (["--threads", "0"], ["--threads", "65"], ["--bogus"]):
        assert subprocess.run([str(exe), *args], capture_output=True).returncode == 2


def result(peak: dict, threads: int, carve_ms: float, peer_ms: float, rss_mib: float) -> dict:
    def system(ms: float, rss_kb: int) -> dict:
        return {"init_ms": 100.0, "detections": 300, "top_rows": [], "max_box_diff_vs_first_px": 0.0,
                "e2e_ms": [ms] * 3, "net_ms": [ms * 0.9] * 3, "e2e_median": ms, "e2e_p90": ms * 1.1,
                "net_median": ms * 0.9, "net_p90": ms, "maxrss_kb": rss_kb, "baseline_rss_kb": 1024,
                "artifact_bytes": 1 << 20, "runtime_lib_bytes": 1 << 21, "runtime_libs": []}
    return {"model": "yolo26n", "threads": threads, "runs": 3, "warmup": 1, "imgsz": 640, "flops": 5_480_000_000,
            "weight_bytes": 9 << 20, "arena_bytes": 14 << 20, "load_before": [1.0, 1.0, 1.0],
            "load_during_mean": 1.0, "load_after": [1.0, 1.0, 1.0], "fma_peak": peak,
            "systems": {"carve": system(carve_ms, int(rss_mib * 1024)), "onnxruntime": system(peer_ms, 600_000)}}


def test_targets_follow_their_definitions(peak):
    fast = result(peak, 2, carve_ms=10.0, peer_ms=16.0, rss_mib=30.0)   # 1.6x, RSS under 9 + 14 + 16 MiB
    slow = result(peak, 2, carve_ms=10.0, peer_ms=14.0, rss_mib=60.0)   # 1.4x, RSS over it, also net of the baseline
    mixed = result(peak, 2, carve_ms=10.0, peer_ms=14.0, rss_mib=39.5)  # over for the process, under net of 1 MiB
    lines = report.targets([fast])
    assert "**1.60x**" in lines[0] and lines[0].endswith("| met |")
    eff = report.efficiency(fast["flops"], 9.0, 2, peak["t2"]["best_per_core"])
    assert abs(eff - fast["flops"] / (9e-3 * 2 * peak["t2"]["best_per_core"] * 1e9)) < 1e-12
    assert f"{100 * eff:.1f}%" in lines[1]
    assert lines[-1].endswith("| met |")
    lines = report.targets([slow])
    assert "**1.40x**" in lines[0] and lines[0].endswith("| not met |")
    assert lines[-1].endswith("| not met |")
    assert report.targets([mixed])[-1].endswith("| not met for the whole process; met for carve's own growth |")


@pytest.fixture(scope="module")
def int8_peak(tmp_path_factory) -> dict:
    """bench/int8_peak.c on 1 and 2 threads, as bench.py runs it ({} entries where the CPU has no VNNI / AMX)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("int8") / "int8_peak"
    subprocess.run([cc, "-std=c11", "-O3", "-Wall", "-Wextra", "-Werror", "-pthread", str(ROOT / "bench/int8_peak.c"),
                    "-o", str(exe)], check=True)
    out = {}
    for t in (1, 2):
        r = subprocess.run([str(exe), "--threads", str(t), "--seconds", "0.02"], capture_output=True, text=True)
        if r.returncode == 0:
            out[f"t{t}"] = json.loads(r.stdout)
    return out


def test_int8_peak_reports_positive_consistent_numbers(int8_peak):
    if not int8_peak:
        pytest.skip("no AVX-512 VNNI, AVX-VNNI or AMX on this CPU")
    for t, d in int8_peak.items():
        assert d["threads"] == int(t[1:])
        kinds = {k: v for k, v in d.items() if isinstance(v, dict)}
        assert kinds and set(kinds) <= {"avx512vnni", "avxvnni", "amx"}
        for v in kinds.values():
            assert v["gops_per_core"] > 0 and v["gops_per_core"] >= 0.95 * v["gops_per_core_wall"]


def int8_result(peak: dict, int8_peak: dict, carve: float, carve_int8: float, peers: dict) -> dict:
    """A 2-thread yolo26n result with carve fp32 and int8 and the given peers ({system: e2e median ms})."""
    r = result(peak, 2, carve_ms=carve, peer_ms=100.0, rss_mib=30.0)
    base = r["systems"]["onnxruntime"]
    r["systems"] = {"carve": r["systems"]["carve"]}
    for name, ms in {"carve-int8": carve_int8, **peers}.items():
        r["systems"][name] = dict(base, e2e_median=ms, e2e_p90=ms * 1.1, net_median=ms * 0.9, net_p90=ms,
                                  precision="fp32")
    r["systems"]["carve-int8"]["precision"] = "int8"
    for name in ("openvino-int8", "onnxruntime-int8", "onnxruntime-int8-u8"):
        if name in r["systems"]:
            r["systems"][name]["precision"] = "int8 + bf16" if name.startswith("openvino") else "int8"
    if "openvino-default" in r["systems"]:
        r["systems"]["openvino-default"]["precision"] = "bf16 (default)"
    r["int8_peak"] = int8_peak
    return r


def test_int8_targets_follow_their_definitions(peak, int8_peak):
    peers = {"openvino-default": 25.0, "openvino-int8": 20.0, "onnxruntime-int8": 22.0, "onnxruntime": 12.0}
    good = report.int8_targets([int8_result(peak, int8_peak, carve=30.0, carve_int8=14.0, peers=peers)])
    assert len(good) == 2
    assert "**0.47x**" in good[0] and good[0].endswith("| met |"), good[0]   # 14 / 30 <= 0.5
    # the fastest of the three named peers (ONNX Runtime fp32, faster still, is not one of them): 20 / 14
    assert "fastest: OpenVINO int8 (NNCF PTQ; float parts bf16), 20.0 ms" in good[1] and "**1.43x**" in good[1]
    assert good[1].endswith("| met |"), good[1]
    bad = report.int8_targets([int8_result(peak, int8_peak, carve=30.0, carve_int8=16.0, peers=peers)])
    assert "**0.53x**" in bad[0] and bad[0].endswith("| NOT met |")
    assert "**1.25x**" in bad[1] and bad[1].endswith("| NOT met |")
    edge = report.int8_targets([int8_result(peak, int8_peak, carve=30.0, carve_int8=15.0, peers={"openvino-int8": 19.5})])
    assert edge[0].endswith("| met |") and edge[1].endswith("| met (incomplete) |")  # exactly 0.5x and 1.3x
    assert "not measured: openvino-default, onnxruntime-int8 / onnxruntime-int8-u8" in edge[1]
    u8 = report.int8_targets([int8_result(peak, int8_peak, carve=30.0, carve_int8=14.0,
                                          peers=dict(peers, **{"onnxruntime-int8-u8": 17.5}))])
    assert "fastest: ONNX Runtime int8 (static QDQ, uint8 activations), 17.5 ms" in u8[1]  # either ORT int8 counts
    assert "**1.25x**" in u8[1] and u8[1].endswith("| NOT met |")
    lone = int8_result(peak, int8_peak, carve=30.0, carve_int8=15.0, peers={})
    assert "not measured" in report.int8_targets([lone])[1]
    fp32_only = result(peak, 2, carve_ms=10.0, peer_ms=16.0, rss_mib=30.0)
    assert report.int8_targets([fp32_only])[0].startswith("| carve int8 targets | not measured")
    # the fp32 target still compares carve with the fp32 peers only (ONNX Runtime fp32 here, not the int8 rows)
    assert "fastest: ONNX Runtime (CPU EP), 12.0 ms" in report.targets(
        [int8_result(peak, int8_peak, carve=30.0, carve_int8=14.0, peers=peers)])[0]


def test_int8_rows_report_gops_and_the_int8_peaks(peak, int8_peak):
    r = int8_result(peak, int8_peak, carve=30.0, carve_int8=14.0, peers={"openvino-default": 25.0})
    rows = {line.split(" | ")[0]: line for line in report.table(r) if line.startswith("| ")}
    q = rows["| carve int8 (xnnpack package, --precision int8)"]
    cells = [c.strip() for c in q.strip("|").split("|")]
    assert cells[1] == "int8" and cells[6] == f"{r['flops'] / (14.0 * 0.9e-3) / 1e9:.0f}"  # FLOPs / network time
    vnni = report.int8_peak_for(r, "avx512vnni")
    if vnni is not None:
        assert f"{100 * r['flops'] / (14.0 * 0.9e-3) / 1e9 / (2 * vnni):.0f}% AVX-512 VNNI" in cells[7]
    assert cells[-1] == "-"  # no agreement check for int8 rows
    assert "| OpenVINO (CPU, default precision: bf16) | bf16 (default) |" in rows["| OpenVINO (CPU, default precision: bf16)"]
    lines = report.peak_lines(r)
    best = peak["t2"]["avx512"]["gflops_per_core"] if "avx512" in peak["t2"] else peak["t2"]["avx2"]["gflops_per_core"]
    assert f"{best:.1f} per core, {2 * best:.1f} for 2 threads" in lines[0]
    if vnni is not None:
        assert f"AVX-512 VNNI {vnni:.0f} per core, {2 * vnni:.0f} for 2 threads" in lines[1]


def test_report_replaces_only_the_marked_block(peak, tmp_path):
    docs = tmp_path
    (docs / "performance.md").write_text(f"# Title\n\nprose before\n\n{report.BEGIN}\nold\n{report.END}\n\nprose after\n")
    rs = [result(peak, 1, 20.0, 25.0, 35.0), result(peak, 2, 12.0, 15.0, 35.0)]
    machine = {"cpu": "test cpu", "cores": 2, "isa": ["avx2"], "kernel": "k", "python": "3"}
    report.write_report(rs, machine, docs)
    text = (docs / "performance.md").read_text()
    assert text.startswith("# Title\n\nprose before\n\n") and text.endswith("\n\nprose after\n")
    assert "old" not in text and text.count(report.BEGIN) == 1 and text.count(report.END) == 1
    assert "yolo26n, 640x640, 1 thread**" in text and "yolo26n, 640x640, 2 threads**" in text
    assert (docs / "perf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (docs / "performance.md").write_text("# no markers\n")
    with pytest.raises(SystemExit):
        report.write_report(rs, machine, docs)


# A runner started by a process whose own peak RSS is large (bench.py has torch loaded and has run the exports) must
# report its own peak, not its parent's: on Linux ru_maxrss carries the parent's peak across fork + exec.
PEAK_RSS_PROBE = r"""
#include <stdio.h>
#include <sys/resource.h>
#include "peak_rss.h"
int main(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("%ld %ld\n", peak_rss_kb(), ru.ru_maxrss);
  return 0;
}
"""


@pytest.fixture
def big_parent():
    """About 256 MiB resident in this (the parent) process while the test runs."""
    block = bytearray(256 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    yield block
    del block


def test_runners_report_their_own_peak_rss(tmp_path, big_parent):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src, exe = tmp_path / "probe.c", tmp_path / "probe"
    src.write_text(PEAK_RSS_PROBE)
    subprocess.run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'bench'}", str(src), "-o",
                    str(exe)], check=True)
    own_kb, rusage_kb = map(int, subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split())
    assert 0 < own_kb < 64 << 10, f"carve_runner's peak RSS reads {own_kb} KiB for a tiny C program"
    # The probe shows what the runners used to read: ru_maxrss includes this parent's 256 MiB.
    assert rusage_kb > 200 << 10, f"ru_maxrss {rusage_kb} KiB: the parent's peak was not inherited here"
    # peer.py's reader, in a fresh interpreter started by this big process (peer.py imports nothing heavy at the top).
    py = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import peer; "
                         "print(peer.rss_kb())", str(ROOT / "bench")], capture_output=True, text=True, check=True)
    assert 0 < int(py.stdout) < 128 << 10, f"peer.py's peak RSS reads {py.stdout.strip()} KiB for a bare interpreter"


def test_op_profile_times_every_runtime_call_of_the_layer_functions():
    import op_profile

    src = """static double now_ms(void) {
  return 0.0;
}
static carve_status layer_02_c3k2(m* m) {
  // model.2.cv1: Conv 1x1/1 32->32 SiLU  (160,160,32) -> (160,160,32)
  TRY(carve_xnn_run(m->xnn[1], m->pool));
  carve_epilogue(A(m, S_X), 48, NULL, 0, 25600, 32, CARVE_ACT_SILU, m->pool);
  // model.7: Conv 3x3/2 128->256 SiLU  (40,40,128) -> (20,20,256)
  TRY(carve_xnn_run(m->xnn[14], m->pool));  // output channels 0..127
  TRY(carve_conv3x3s1_winograd(A(m, S_Y), 96, 80, 80, 32,
                               m->scratch, m->pool));  // two lines
  return CARVE_OK;
}
carve_status run(m* m) {
  TRY(carve_xnn_run(m->xnn[9], m->pool));
  return CARVE_OK;
}
"""
    text, labels = op_profile.instrument(src)
    assert len(labels) == 4  # the call in run() is outside a layer function
    assert text.count("now_ms() - t_") == 4 and "carve_op_ms[3] += now_ms() - t_;" in text
    assert "m->scratch, m->pool));  // two lines\n    carve_op_ms[3]" in text
    assert '"carve_xnn_run\\tmodel.7: Conv 3x3/2 128->256 SiLU  (40,40,128) -> (20,20,256) [slice 0..127]"' in text
    labels = [label.split("\t", 1) for label in labels]
    assert [call for call, _ in labels] == ["carve_xnn_run", "carve_epilogue", "carve_xnn_run", "carve_conv3x3s1_winograd"]
    assert op_profile.mflops(labels[0][1]) == 2 * 32 * 32 * 160 * 160 / 1e6
    assert op_profile.mflops(labels[2][1]) == 2 * 9 * 128 * 128 * 20 * 20 / 1e6  # half of the output channels
    assert op_profile.kind_of("carve_xnn_run", labels[2][1]) == "XNNPACK 3x3 stride-2 convolution"
    assert op_profile.kind_of("carve_xnn_run", labels[0][1]) == "XNNPACK 1x1 convolution"


# ---- bench/threads.py (issue 17): the table, the targets' verdicts and the docs markers ----------------------------

def threads_result(t2_idle: float, t8_over: float, busy1: float, busy2: float, before2: float) -> dict:
    def sysv(ms: float, used: int) -> dict:
        return {"median": ms, "p90": ms * 1.1, "threads_used": used, "e2e_ms": [ms], "detections": 3}

    cells = [
        {"scenario": "a", "threads": 1, "load_mean": 0.5, "systems": {"carve": sysv(60, 1), "carve-before": sysv(60, 1)}},
        {"scenario": "a", "threads": 2, "load_mean": 0.5,
         "systems": {"carve": sysv(t2_idle, 2), "carve-before": sysv(before2, 2), "openvino": sysv(35, 2)}},
        {"scenario": "b", "threads": 8, "load_mean": 0.5,
         "systems": {"carve": sysv(t2_idle, 2), "carve-over": sysv(t8_over, 8)}},
        {"scenario": "c", "threads": 1, "load_mean": 1.5, "systems": {"carve": sysv(busy1, 1)}},
        {"scenario": "c", "threads": 2, "load_mean": 1.5, "systems": {"carve": sysv(busy2, 2)}},
    ]
    return {"model": "yolo26n", "imgsz": 640, "runs": 3, "warmup": 1, "machine": {"cpu": "test CPU"}, "cpus": 2,
            "load_before": 0.1, "systems": ["carve", "carve-over", "carve-before", "openvino"], "cells": cells}


def test_threads_targets_and_table():
    import threads  # bench/threads.py

    good = threads.targets(threads_result(t2_idle=35, t8_over=41, busy1=60, busy2=65, before2=36))
    assert not [t for t in good if "NOT met" in t], good
    assert any(t.startswith("b. carve-over, 8 threads idle: 41.0 ms = 1.17x") for t in good)
    assert any("c. beside a busy process: carve 2 threads / 1 thread median 1.08x (met" in t for t in good)
    bad = threads.targets(threads_result(t2_idle=35, t8_over=43, busy1=60, busy2=67, before2=33))
    assert [t[:20] for t in bad if "NOT met" in t] == ["a. idle, 2 thread(s)", "b. carve-over, 8 thr",
                                                        "c. beside a busy pro"], bad
    table = threads.render(threads_result(t2_idle=35, t8_over=41, busy1=60, busy2=65, before2=36))
    row = [line for line in table.splitlines() if line.startswith("| b.")][0]
    assert "| 8 | 0.5 | 35.0 / 38.5 (2 run) | 41.0 / 45.1 |" in row, row


def test_threads_docs_markers(tmp_path, monkeypatch):
    import threads

    doc = tmp_path / "performance.md"
    doc.write_text(f"before\n{threads.BEGIN}\nold table\n{threads.END}\nafter\n")
    monkeypatch.setattr(threads, "DOC", doc)
    threads.write_docs("new table\n")
    assert doc.read_text() == f"before\n{threads.BEGIN}\nnew table\n{threads.END}\nafter\n"


def test_box_agreement_matches_rows_by_box_not_rank():
    import bench  # bench/bench.py

    ref = [[10, 10, 50, 50, 0.9, 0], [100, 100, 150, 160, 0.8, 1], [200, 20, 260, 90, 0.7, 0]]
    swapped = [[100.5, 100, 150, 160, 0.81, 1], [10, 10.25, 50, 50, 0.80, 0], [200, 20, 260, 89, 0.6, 0]]
    assert bench.box_agreement(ref, swapped) == 1.0  # ranks 1 and 2 swapped: each still finds its own box
    missing = [swapped[0], swapped[2]]               # the class-0 box at (10, 10) is gone: its closest is the other
    assert bench.box_agreement(ref, missing) == 210.0  # x2: 50 against 260
    assert bench.box_agreement(ref, [r[:5] + [2] for r in ref]) == float("inf")  # no row of classes 0 and 1
    assert bench.box_agreement([], swapped) is None
    assert report.targets([])[0].startswith("| carve fp32 targets | not measured")


def test_ncu_lines_sums_the_source_page_per_line(tmp_path):
    """tools/gpu_carry/ncu_lines.py on a source page in Nsight Compute's CSV layout (two files; a line in two rows):
    each line's instructions and samples summed, the busiest first; a SASS-only page (no line rows) is refused."""
    head = '"Line No","Source","Address","Warp Stall Sampling (All Samples)","Instructions Executed"'
    page = "\n".join([
        '"File Path","/x/runtime/carve_cuda_topk.cu"', head,
        '"10","a += b;","0x1","3","1,200"', '"11","c = d;","0x2","0","40"', '"10","a += b;","0x3","1","800"',
        '"File Path","/usr/include/crt/sm_70_rt.hpp"', head, '"5","match();","0x4","7","300"', ""])
    src = tmp_path / "source.csv"
    src.write_text(page)
    tool = ROOT / "tools/gpu_carry/ncu_lines.py"
    out = subprocess.run([sys.executable, str(tool), str(src)], capture_output=True, text=True, check=True).stdout
    rows = out.splitlines()
    assert rows[0].startswith("2340 warp instructions, 11 samples, 3 lines")
    assert rows[1].split()[:3] == ["2000", "4", "carve_cuda_topk.cu:10"]  # its two rows summed
    assert [r.split()[2] for r in rows[1:]] == ["carve_cuda_topk.cu:10", "sm_70_rt.hpp:5", "carve_cuda_topk.cu:11"]
    sass = tmp_path / "sass.csv"
    sass.write_text('"Address","Source","Instructions Executed"\n"0x1","LDC R1","32"\n')
    r = subprocess.run([sys.executable, str(tool), str(sass)], capture_output=True, text=True)
    assert r.returncode == 1 and "no source lines" in r.stderr


def test_rows_same_wants_scheduling_only_rows_bit_for_bit(tmp_path):
    """tools/gpu_carry/rows.py --same: the serial-head / late-head / no-PDL rows against their package's row, bit for
    bit (a race between lanes on the GPU shows there); one last-bit difference fails it, other rows are not paired."""
    import io
    import tarfile

    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.random((300, 6), dtype=np.float32)
    moved = base.copy()
    moved[7, 4] = np.nextafter(moved[7, 4], np.float32(2))

    def tar(path, rows: dict):
        with tarfile.open(path, "w") as t:
            for name, a in rows.items():
                data = a.astype("<f4").tobytes()
                info = tarfile.TarInfo(f"./{name}.f32")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))

    tool = ROOT / "tools/gpu_carry/rows.py"
    good, bad = tmp_path / "good.tar", tmp_path / "bad.tar"
    tar(good, {"carve_fp16-b1": base, "carve_fp16_late-head-b1": base.copy(), "carve_fp16_serial-head-b1": base,
               "carve_fp16_fused-b1": moved})  # fused: other kernels, not paired
    tar(bad, {"carve_fp16-b1": base, "carve_fp16_late-head-b1": moved, "carve_tf32-b1": base,
              "carve_tf32_no-PDL-b1": base})
    r = subprocess.run([sys.executable, str(tool), str(good), "--same"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.count("bit for bit the same") == 2 and "fused" not in r.stdout
    r = subprocess.run([sys.executable, str(tool), str(bad), "--same"], capture_output=True, text=True)
    assert r.returncode == 1 and "carve_fp16_late-head-b1 against carve_fp16-b1: DIFFERENT" in r.stdout
    assert "carve_tf32_no-PDL-b1 against carve_tf32-b1: bit for bit the same" in r.stdout
