#!/usr/bin/env python3
"""Driver of the security tests around a generated package (tests/security/tests.cmake runs it;
docs/security.md explains each step).

The package is the shipped demo model (manifests/yolo26n-shapes.yaml, assets/yolo26n-shapes.pt:
real trained weights, no torch needed) generated at --imgsz 64 so that one run takes milliseconds.

  run_security.py setup   --work W     generate W/pkg, build W/san (clang or gcc, ASan + UBSan, plus
                                       the libFuzzer target with clang) and W/plain (no sanitizers)
  run_security.py setup-int8 --work W --int8-work CW
                                       the int8 demo model (carve generate --precision int8, portable,
                                       imgsz 64: tests/int8/int8pkg.py's package, cached in CW/int8),
                                       built as W/san-int8 and W/plain-int8 with the same harnesses;
                                       the demo, fuzz, valgrind
                                       and replay steps take --variant int8 to use them
  run_security.py setup-tasks --work W yolo26n-seg and yolo26n-cls at 64 (random weights made with
                                       Ultralytics), built with ASan + UBSan and task_api_test in
                                       W/san-seg, W/san-cls
  run_security.py fuzz-task --work W --task seg|cls [--seconds S]
                                       libFuzzer on the per-task functions (masks; classify scratch,
                                       k, sizes) of the setup-tasks packages
  run_security.py demo    --work W     the ASan+UBSan demo on a sample image (text, --json, --threads 2)
  run_security.py valgrind --work W    valgrind memcheck of the plain demo: no error, no definite leak
  run_security.py fuzz    --work W [--seconds S] [--corpus DIR]
                                       libFuzzer on the entry points, seeded with hand-made inputs
                                       (sizes 0, 1x1, 1x10000, odd strides, NULLs, NaN tensors, bad
                                       thread counts)
  run_security.py replay  --work W     the entry-point regression inputs (regression/entry-*/input*), once each

Every step exits non-zero on a failure and prints why.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"
WEIGHTS = REPO / "assets" / "yolo26n-shapes.pt"
IMAGE = REPO / "assets" / "shapes-3.png"
IMGSZ = 64
NAME = "yolo26n_shapes"
REGRESSION = HERE / "regression"


def run(cmd, **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], **kw)


def must(cmd, **kw) -> subprocess.CompletedProcess:
    r = run(cmd, **kw)
    if r.returncode != 0:
        sys.exit(f"run_security: failed with status {r.returncode}: {' '.join(map(str, cmd))}")
    return r


def have_libfuzzer(cc: str) -> bool:
    """clang with the libFuzzer runtime (Debian: the clang package ships it)."""
    if not shutil.which(cc):
        return False
    probe = subprocess.run([cc, "-fsanitize=fuzzer", "-x", "c", "-", "-o", os.devnull],
                           input=b"#include <stdint.h>\n#include <stddef.h>\n"
                                 b"int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { (void)d; (void)n; return 0; }\n",
                           capture_output=True)
    return probe.returncode == 0


def configure(work: Path, build: str, sanitize: bool, fuzz: bool, cc: str, pkg: str = "pkg", target=None) -> None:
    env = dict(os.environ, CC=cc)
    must(["cmake", "-S", HERE / "harness", "-B", work / build, f"-DCARVE_PKG={work / pkg}",
          "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DCARVE_SANITIZE={'ON' if sanitize else 'OFF'}",
          f"-DCARVE_FUZZ={'ON' if fuzz else 'OFF'}"], env=env, stdout=subprocess.DEVNULL)
    must(["cmake", "--build", work / build, "-j", os.environ.get("CARVE_JOBS", "2"),
          *(["--target", target] if target else [])])


def cmd_setup_int8(a) -> None:
    """The int8 portable package of the demo model at IMGSZ (int8pkg.package, generated on first use) built with the
    harnesses: W/san-int8 (ASan + UBSan, libFuzzer's fuzz_entry with clang) and W/plain-int8 (noalloc_test)."""
    sys.path.insert(0, str(REPO / "tests" / "int8"))
    import int8pkg
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    pkg = int8pkg.package(a.int8_work, "portable", IMGSZ)
    fuzz = have_libfuzzer("clang")
    (work / "fuzz-int8-enabled").write_text("1\n" if fuzz else "0\n")
    configure(work, "san-int8", sanitize=True, fuzz=fuzz, cc="clang" if fuzz else "cc", pkg=pkg)
    configure(work, "plain-int8", sanitize=False, fuzz=False, cc="cc", pkg=pkg)


def build_dir(a, kind: str) -> Path:
    """W/<kind> of the fp32 package, W/<kind>-int8 of the int8 one (--variant int8)."""
    return a.work / (kind + ("-int8" if a.variant == "int8" else ""))


def cmd_setup(a) -> None:
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    must([REPO / "carve", "generate", MANIFEST, "--backend", "xnnpack", "--weights", WEIGHTS,
          "--imgsz", IMGSZ, "--out", work / "pkg", "--force"])
    fuzz = have_libfuzzer("clang")
    (work / "fuzz-enabled").write_text("1\n" if fuzz else "0\n")
    configure(work, "san", sanitize=True, fuzz=fuzz, cc="clang" if fuzz else "cc")
    configure(work, "plain", sanitize=False, fuzz=False, cc="cc")
    if not fuzz:
        print("run_security: clang with libFuzzer not found: fuzz_entry not built (apt-get install clang)")


TASKS = {"seg": "yolo26n-seg", "cls": "yolo26n-cls"}


def cmd_setup_tasks(a) -> None:
    """Segment and classify packages at imgsz 64 (random-weight checkpoints built with Ultralytics by
    make_family_checkpoints.py, kept in the work folder), each built with ASan + UBSan and task_api_test."""
    work = a.work
    work.mkdir(parents=True, exist_ok=True)
    cc = "clang" if shutil.which("clang") else "cc"
    fuzz = have_libfuzzer("clang")
    (work / "fuzz-tasks-enabled").write_text("1\n" if fuzz else "0\n")
    must([sys.executable, HERE / "make_family_checkpoints.py", "--out", work, *TASKS.values()])
    for short, model in TASKS.items():
        pt = work / f"{model}.pt"
        must([REPO / "carve", "generate", REPO / "manifests" / f"{model}.yaml", "--backend", "xnnpack",
              "--weights", pt, "--imgsz", IMGSZ, "--out", work / f"pkg-{short}", "--force"])
        configure(work, f"san-{short}", sanitize=True, fuzz=fuzz, cc="clang" if fuzz else cc, pkg=f"pkg-{short}",
                  target="task_api_test")
        if fuzz:
            must(["cmake", "--build", work / f"san-{short}", "-j", os.environ.get("CARVE_JOBS", "2"),
                  "--target", "fuzz_task"])


def cmd_demo(a) -> None:
    exe = build_dir(a, "san") / "pkg" / f"{NAME}_demo"
    out = a.work / f"demo-annotated-{a.variant}.png"
    must([exe, IMAGE, "--out", out, "--threads", "2", "--runs", "2"])
    r = must([exe, IMAGE, "--json"], capture_output=True, text=True)
    result = json.loads(r.stdout)
    print(f"run_security: ASan+UBSan demo: {len(result['detections'])} detection(s) on {IMAGE.name}")
    if not out.is_file() or out.stat().st_size == 0:
        sys.exit("run_security: the demo wrote no annotated image")
    # Bad command lines are refused with a status, not a crash.
    for argv in ([], ["--threads", "-1", IMAGE], ["--input", a.work / "missing.npy"], [a.work / "missing.png"],
                 ["--conf", "nan", IMAGE], [HERE / "run_security.py"]):
        r = run([exe, *argv], capture_output=True, text=True)
        if r.returncode == 0 or r.returncode >= 128 or "Sanitizer" in r.stderr or "runtime error" in r.stderr:
            sys.exit(f"run_security: demo {argv}: status {r.returncode}\n{r.stderr}")


def cmd_valgrind(a) -> None:
    exe = build_dir(a, "plain") / "pkg" / f"{NAME}_demo"
    for argv in ([IMAGE, "--json", "--threads", "2"],):
        must(["valgrind", "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
              "--show-leak-kinds=definite,indirect", "-q", exe, *argv], stdout=subprocess.DEVNULL)
    print("run_security: valgrind memcheck: no errors, no definite or indirect leaks")


def _seed(flags: int, *fields: bytes, tail: bytes = b"") -> bytes:
    return bytes([flags]) + b"".join(fields) + tail


def seeds() -> dict:
    """Hand-made inputs for fuzz_entry (layout in harness/fuzz_entry.c)."""
    u16 = lambda v: struct.pack(">H", v + 2)  # noqa: E731  (the harness subtracts 2)
    f32 = lambda v: struct.unpack(">I", struct.pack("<f", v))[0].to_bytes(4, "big")  # noqa: E731
    px = bytes(range(256)) * 4
    image = lambda w, h, pad=0, conf=0.25, maxd=10, nulls=0, flags=0: _seed(  # noqa: E731
        flags, u16(w), u16(h), bytes([pad]), f32(conf), bytes([maxd, nulls]), tail=px)
    out = {
        "image-64x64": image(64, 64),
        "image-0x8": image(0, 8),
        "image-8x0": image(8, 0),
        "image-1x1": image(1, 1),
        "image-1x10000": _seed(0x40, u16(1), u16(1), struct.pack(">H", 5000), bytes([0]), f32(0.1), b"\x0a\x00", tail=px),
        "image-10000x1": _seed(0x40, u16(9), u16(1), struct.pack(">H", 5000), bytes([0]), f32(0.1), b"\x0a\x00", tail=px),
        "image-odd-stride": image(33, 17, pad=7),
        "image-short-stride": image(33, 17, pad=1, flags=0x20),
        "image-null-model": image(8, 8, nulls=1),
        "image-null-rgb": image(8, 8, nulls=2),
        "image-null-dets": image(8, 8, nulls=4),
        "image-null-count": image(8, 8, nulls=8),
        "image-nan-conf": image(64, 48, conf=float("nan")),
        "image-2-threads": image(100, 50, flags=0x80),
        "tensor-nan": _seed(2, f32(0.0), tail=struct.pack("<4f", float("nan"), 1.0, float("inf"), -float("inf"))),
        "tensor-huge": _seed(0x82, f32(-1.0), tail=struct.pack("<2f", 3.4e38, -3.4e38)),
        "create-minus-1": _seed(3, struct.pack(">i", -1)),
        "create-1025": _seed(3, struct.pack(">i", 1025)),
        "create-int-min": _seed(3, struct.pack(">i", -2**31)),
        "create-0": _seed(3, struct.pack(">i", 0)),
        "create-2": _seed(3, struct.pack(">i", 2)),
    }
    return out


def fuzz_exe(a) -> Path | None:
    flag = a.work / ("fuzz-int8-enabled" if a.variant == "int8" else "fuzz-enabled")
    if flag.read_text().strip() != "1":
        return None
    return build_dir(a, "san") / "fuzz_entry"


def regression_inputs() -> list:
    """Inputs of the C entry-point target (regression/entry-*/input*; ckpt-* and manifest-* are the
    generator's, replayed by tests/generator/test_security_regressions.py)."""
    return sorted(p for p in REGRESSION.glob("entry-*/input*") if p.is_file())


def cmd_replay(a) -> None:
    exe = fuzz_exe(a)
    inputs = regression_inputs()
    if exe is None:
        sys.exit("run_security: fuzz_entry was not built (clang with libFuzzer missing)")
    if not inputs:
        sys.exit(f"run_security: no regression inputs under {REGRESSION}")
    must([exe, *inputs])
    print(f"run_security: {len(inputs)} regression input(s) replayed without a finding")


def cmd_fuzz(a) -> None:
    exe = fuzz_exe(a)
    if exe is None:
        sys.exit("run_security: fuzz_entry was not built (clang with libFuzzer missing)")
    corpus = a.corpus or a.work / ("corpus-entry" + ("-int8" if a.variant == "int8" else ""))
    corpus.mkdir(parents=True, exist_ok=True)
    for name, data in seeds().items():
        (corpus / f"seed-{name}").write_bytes(data)
    findings = a.work / ("findings" + ("-int8" if a.variant == "int8" else ""))
    findings.mkdir(exist_ok=True)
    r = run([exe, f"-max_total_time={a.seconds}", "-max_len=8192", "-timeout=30", "-rss_limit_mb=4096",
             f"-seed={a.seed}", "-print_final_stats=1", f"-artifact_prefix={findings}/", corpus])
    if r.returncode != 0:
        sys.exit(f"run_security: libFuzzer found a failure (status {r.returncode}); the input is in {findings}: "
                 f"add it as {REGRESSION}/entry-<name>/input with a README saying what it guards")
    print(f"run_security: fuzz_entry ({a.variant} package) ran {a.seconds} s without a finding")


def cmd_fuzz_task(a) -> None:
    flag = a.work / "fuzz-tasks-enabled"
    if not flag.is_file() or flag.read_text().strip() != "1":
        sys.exit("run_security: fuzz_task was not built (run setup-tasks; needs clang with libFuzzer)")
    exe = a.work / f"san-{a.task}" / "fuzz_task"
    corpus = a.corpus or a.work / f"corpus-{a.task}"
    corpus.mkdir(parents=True, exist_ok=True)
    px = bytes(range(256)) * 2
    seeds = {  # layout in harness/fuzz_task.c
        "seg": {"64x64": b"\x00\x3f\x00\x3f\x00\x00" + b"\x00\x00" * 8 + px,
                "1x10000": b"\x00\x00\x00\x00\x01\x13\x88\x00" + b"\x01\x03\xff\xff\xff\xff" + px,
                "nan-box": b"\x00\x20\x00\x10\x00\x07\x00\x02" + b"\x7f\xc0\x00\x00" * 4 + px},
        "cls": {"64x48": b"\x00\x00\x3f\x00\x2f\x00\x00\x05" + px,
                "short-scratch": b"\x08\x00\x3f\x00\x2f\x00\x00\x05\x03" + px,
                "misaligned": b"\x10\x00\x10\x00\x10\x00\x03\x01" + px,
                "zero-width": b"\x01\x00\x10\x00\x10\x00\x00\x00\x00\x02" + px,
                "10000x1": b"\x00\x00\x00\x00\x00\x02\x13\x88\x00\x05" + px},
    }[a.task]
    for name, data in seeds.items():
        (corpus / f"seed-{name}").write_bytes(data)
    findings = a.work / f"findings-{a.task}"
    findings.mkdir(exist_ok=True)
    r = run([exe, f"-max_total_time={a.seconds}", "-max_len=4096", "-timeout=30", "-rss_limit_mb=4096",
             f"-seed={a.seed}", "-print_final_stats=1", f"-artifact_prefix={findings}/", corpus])
    if r.returncode != 0:
        sys.exit(f"run_security: libFuzzer found a failure in the {a.task} functions (status {r.returncode}); the input "
                 f"is in {findings}: add it as {REGRESSION}/{a.task}-<name>/input with a README")
    print(f"run_security: fuzz_task ({a.task}) ran {a.seconds} s without a finding")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("setup", "setup-int8", "setup-tasks", "demo", "valgrind", "fuzz", "fuzz-task", "replay"):
        s = sub.add_parser(name)
        s.add_argument("--work", type=Path, required=True, help="work folder (shared by the steps)")
        if name == "setup-int8":
            s.add_argument("--int8-work", type=Path, required=True,
                           help="the build's work folder (CARVE_WORK), where int8pkg caches the package")
        if name in ("demo", "valgrind", "fuzz", "replay"):
            s.add_argument("--variant", choices=("fp32", "int8"), default="fp32",
                           help="the package: the fp32 one of setup (default) or the int8 one of setup-int8")
        if name == "fuzz-task":
            s.add_argument("--task", choices=sorted(TASKS), required=True)
        if name in ("fuzz", "fuzz-task"):
            s.add_argument("--seconds", type=int, default=20)
            s.add_argument("--seed", type=int, default=1)
            s.add_argument("--corpus", type=Path, help="corpus folder (default WORK/corpus-entry; kept and grown)")
    a = p.parse_args()
    a.work = a.work.resolve()
    globals()[f"cmd_{a.cmd.replace('-', '_')}"](a)


if __name__ == "__main__":
    main()
