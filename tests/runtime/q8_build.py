#!/usr/bin/env python3
"""Builds of the int8 kernels (runtime/carve_q8.c) with every compiler here, and what they vectorise.

    q8_build.py compile     -std=c11 -Wall -Wextra -Werror with gcc (x86-64: baseline, AVX2, AVX-512), clang,
                            arm-none-eabi-gcc for a Cortex-M7 (tests/firmware/cross.py's flags) and a
                            Cortex-M55 (Helium), and aarch64-linux-gnu-gcc, at -O2 and -O3 (carve_q8_pool*.c,
                            carve_q8_run_pool's variants, too: compiles with -Werror); prints the loops
                            each vectorised (GCC's
                            -fopt-info-vec, Clang's -Rpass=loop-vectorize) by function, and checks:
                              * the convolutions' inner loops (dot_rows, dw_tap_block) are vectorised by gcc
                                (x86-64 and aarch64, -O2 and -O3) and clang (-O2 and -O3);
                              * the Cortex-M7 object has no floating-point arithmetic outside quantize and
                                dequantize (the entry points may compare the descriptor's scale, nothing
                                else).
                            A cross compiler that is not installed is skipped with a message (tools/install.sh
                            --test installs them); gcc must be there.
    q8_build.py aarch64     q8_tool.c + carve_q8.c + carve_q8_pool*.c + carve_isa.c + carve_rt.c for aarch64 Linux
                            (GCC vectorises carve_q8.c for NEON; carve_q8_pool_neon.c's neon variant), run under
                            qemu-aarch64 by q8_vs_arith.py: the same bit-exact comparison with arith.py, the
                            variants portable and neon, select picking neon; then a build with carve_pool.c run
                            by q8_pool_vs_run.py (the variants on 0 to 7 threads against carve_q8_run), and
                            test_q8.c (argument checks, refusals, the selector).
                            Exit 77 (skipped) without aarch64-linux-gnu-gcc or qemu-aarch64.
    q8_build.py q8conv-aarch64
                            carve_q8conv_neon.c (the NEON variants) for aarch64: clang --target=aarch64-linux-gnu
                            -fsyntax-only -Werror (carve_q8_pool*.c too) without and with the dot product (if
                            clang is there); then
                            q8conv_tool.c + carve_q8conv*.c + carve_isa.c + carve_rt.c + carve_pool.c built with
                            aarch64-linux-gnu-gcc -O2 -Werror and run under qemu-aarch64 by q8conv_vs_arith.py:
                            on qemu's default CPU ("max", which has the dot product) the variants portable, neon
                            and neondot on 1 / 2 / 5 threads, carve_q8conv_select picking neondot; on -cpu
                            cortex-a53 (ARMv8.0, no dot product) portable and neon (--quick), select picking neon;
                            and test_q8conv.c (a record written by hand, refusals, the selector, the names) on both.
                            Exit 77 (skipped) without aarch64-linux-gnu-gcc or qemu-aarch64.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SRC = REPO / "runtime" / "carve_q8.c"
# carve_q8_run_pool's instruction-set variants (xnnpack packages): portable C and the selection, and one file per
# instruction-set family (runtime/carve_q8_pool_impl.h)
POOL_SRCS = [REPO / "runtime" / f"carve_q8_pool{s}.c" for s in ("", "_avx512", "_avx2", "_neon")]
# carve_q8conv: the driver and portable C, and one file per instruction-set family (runtime/carve_q8conv_impl.h)
Q8CONV_SRCS = [REPO / "runtime" / f"carve_q8conv{s}.c" for s in ("", "_avx512", "_avx2", "_neon")]
WARN = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-DCARVE_RT_NO_THREADS", f"-I{REPO / 'runtime'}"]
M7 = ["-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard", "-mthumb", "-DCARVE_RT_NO_FILE", "-DCARVE_RT_NO_HEAP"]
AARCH64_LIBC = Path("/usr/aarch64-linux-gnu")
SKIP = 77
HOT = ("dot_rows", "dw_tap_block")  # the convolutions' inner loops

# (label, compiler, flags, hot loops must vectorise)
CONFIGS = [
    ("gcc x86-64 -O2", "gcc", ["-O2"], True),
    ("gcc x86-64 -O3", "gcc", ["-O3"], True),
    ("gcc x86-64 -O2 -mavx2", "gcc", ["-O2", "-mavx2"], True),
    ("gcc x86-64 -O3 -march=skylake-avx512", "gcc", ["-O3", "-march=skylake-avx512"], True),
    ("clang x86-64 -O2", "clang", ["-O2"], True),
    ("clang x86-64 -O3 -mavx2", "clang", ["-O3", "-mavx2"], True),
    ("arm-none-eabi-gcc cortex-m7 -O2", "arm-none-eabi-gcc", ["-O2", *M7], False),
    ("arm-none-eabi-gcc cortex-m7 -O3", "arm-none-eabi-gcc", ["-O3", *M7], False),
    ("arm-none-eabi-gcc cortex-m55 (Helium) -O2", "arm-none-eabi-gcc",
     ["-O2", "-mcpu=cortex-m55", "-mfloat-abi=hard", "-mthumb", "-DCARVE_RT_NO_FILE", "-DCARVE_RT_NO_HEAP"], False),
    ("aarch64-linux-gnu-gcc -O2", "aarch64-linux-gnu-gcc", ["-O2"], True),
]


def functions_by_line() -> list:
    """The function each line of carve_q8.c belongs to (index: line number - 1)."""
    out, current = [], "?"
    start = re.compile(r"^(?:CARVE_Q8_VECTORIZE )?(?:static )?(?:inline )?[\w ]+?[ *](\w+)\(")
    for line in SRC.read_text().splitlines():
        m = start.match(line)
        if m and not line.startswith(("//", "#", " ", "}")):
            current = m.group(1)
        out.append(current)
    return out


def vectorised(cc: str, flags: list, obj: Path) -> tuple:
    """Compiles carve_q8.c to obj; returns (ok, message, {function: sorted loop lines vectorised})."""
    report = ["-Rpass=loop-vectorize"] if cc == "clang" else ["-fopt-info-vec-optimized"]
    p = subprocess.run([cc, *WARN, *flags, *report, "-c", str(SRC), "-o", str(obj)], capture_output=True, text=True)
    if p.returncode != 0:
        return False, p.stderr.strip(), {}
    owner = functions_by_line()
    loops: dict = {}
    pat = re.compile(re.escape(SRC.name) + r":(\d+):\d+: (?:remark: vectorized loop|optimized: loop vectorized)")
    for m in pat.finditer(p.stderr):
        line = int(m.group(1))
        loops.setdefault(owner[line - 1], set()).add(line)
    return True, "", {f: sorted(v) for f, v in loops.items()}


FP_ARITH = re.compile(r"^v(add|sub|mul|div|fma|fms|fnm|neg|abs|sqrt|cvt|rint|max|min|mla|mls)")
FP_ANY = re.compile(r"^v")


def m7_float_check(obj: Path) -> list:
    """Problems: VFP instructions where there should be none (objdump of the Cortex-M7 object)."""
    dump = subprocess.run(["arm-none-eabi-objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True,
                          text=True, check=True).stdout
    fn, problems = "?", []
    for line in dump.splitlines():
        m = re.match(r"^[0-9a-f]+ <(\w+)>:$", line)
        if m:
            fn = m.group(1)
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        op = parts[1].strip()
        if fn in ("quantize", "dequantize") or not FP_ANY.match(op):
            continue
        if fn in ("carve_q8_run", "carve_q8_run_pool", "valid") and not FP_ARITH.match(op):
            continue  # the scale checks: vldr / vcmp / vmrs
        problems.append(f"{fn}: {op} {parts[2].strip() if len(parts) > 2 else ''}")
    return problems


def compile_all() -> int:
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, cc, flags, hot in CONFIGS:
            if shutil.which(cc) is None:
                if cc == "gcc":
                    print(f"FAIL {label}: gcc not found")
                    failed += 1
                else:
                    print(f"  {label}: {cc} not installed, skipped (sh tools/install.sh --test)")
                continue
            obj = Path(tmp, re.sub(r"\W+", "_", label) + ".o")
            ok, msg, loops = vectorised(cc, flags, obj)
            if not ok:
                print(f"FAIL {label}: does not compile with -Werror:\n{msg}")
                failed += 1
                continue
            text = ", ".join(f"{f} {'/'.join(map(str, v))}" for f, v in sorted(loops.items())) or "none"
            print(f"  {label}: compiles; loops vectorised (function line): {text}")
            missing = [f for f in HOT if hot and f not in loops]
            if missing:
                print(f"FAIL {label}: the inner loops of {', '.join(missing)} are not vectorised")
                failed += 1
            # carve_q8_run_pool's variants (carve_q8_pool*.c): their AVX-512 and AVX2 target functions on x86-64,
            # NEON on aarch64, the portable variant and the selector everywhere; -Werror everywhere
            pool_ok = True
            for pool_src in POOL_SRCS:
                pool_obj = obj.with_name(obj.stem + "_" + pool_src.stem + ".o")
                pp = subprocess.run([cc, *WARN, *flags, "-c", str(pool_src), "-o", str(pool_obj)],
                                    capture_output=True, text=True)
                if pp.returncode != 0:
                    print(f"FAIL {label}: {pool_src.name} does not compile with -Werror:\n{pp.stderr.strip()}")
                    failed += 1
                    pool_ok = False
            if pool_ok:
                print(f"  {label}: carve_q8_pool*.c compile")
            if cc == "arm-none-eabi-gcc" and "cortex-m7" in label:
                problems = m7_float_check(obj)
                for p in problems[:10]:
                    print(f"FAIL {label}: floating point outside quantize / dequantize: {p}")
                failed += bool(problems)
                if not problems:
                    print(f"  {label}: no floating-point instruction outside quantize / dequantize (and the "
                          f"scale checks' compares)")
    print("q8_build compile: " + ("ok" if not failed else f"{failed} FAILED"))
    return 1 if failed else 0


def aarch64() -> int:
    cc = "aarch64-linux-gnu-gcc"
    for tool in (cc, "qemu-aarch64"):
        if shutil.which(tool) is None:
            print(f"q8_build aarch64: SKIPPED: {tool} not installed (sh tools/install.sh --test)")
            return SKIP
    rt = REPO / "runtime"
    sources = [str(HERE / "q8_tool.c"), str(SRC), *map(str, POOL_SRCS), str(rt / "carve_isa.c"),
               str(rt / "carve_rt.c")]
    expect = ["--exec", f"qemu-aarch64 -L {AARCH64_LIBC}", "--expect", "portable,neon", "--expect-selected", "neon"]
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp, "q8_tool")
        subprocess.run([cc, *WARN, "-O2", *sources, "-o", str(exe), "-lm"], check=True)
        print(f"  {exe.name} built with {cc} -O2; running q8_vs_arith.py under qemu-aarch64")
        p = subprocess.run([sys.executable, str(HERE / "q8_vs_arith.py"), *expect, str(exe)])
        # with the thread pool (carve_pool.c): carve_q8_run_pool's variants (the neon one) on 0 to 7 threads
        threaded = Path(tmp, "q8_tool_threads")
        subprocess.run([cc, *[f for f in WARN if f != "-DCARVE_RT_NO_THREADS"], "-O2", *sources,
                        str(rt / "carve_pool.c"), "-o", str(threaded), "-pthread", "-lm"], check=True)
        print(f"  {threaded.name} (with carve_pool.c) built; running q8_pool_vs_run.py under qemu-aarch64")
        q = subprocess.run([sys.executable, str(HERE / "q8_pool_vs_run.py"), *expect, str(threaded)])
        test = Path(tmp, "test_q8")  # the argument checks and refusals, the selector (the neon variant)
        subprocess.run([cc, *[f for f in WARN if f != "-DCARVE_RT_NO_THREADS"], "-O2", "-UNDEBUG",
                        str(HERE / "test_q8.c"), *sources[1:], str(rt / "carve_pool.c"), "-o", str(test), "-pthread",
                        "-lm"], check=True)
        r = subprocess.run(["qemu-aarch64", "-L", str(AARCH64_LIBC), str(test)], capture_output=True, text=True)
        print("  test_q8 under qemu-aarch64: " + (r.stdout.strip().splitlines() or ["?"])[-1])
        if r.returncode != 0:
            print(r.stdout + r.stderr)
        return 1 if p.returncode or q.returncode or r.returncode else 0


def q8conv_aarch64() -> int:
    cc = "aarch64-linux-gnu-gcc"
    for tool in (cc, "qemu-aarch64"):
        if shutil.which(tool) is None:
            print(f"q8_build q8conv-aarch64: SKIPPED: {tool} not installed (sh tools/install.sh --test)")
            return SKIP
    rt = REPO / "runtime"
    failed = 0
    if shutil.which("clang") is not None:
        for extra in ([], ["-march=armv8.2-a+dotprod"]):
            p = subprocess.run(["clang", "--target=aarch64-linux-gnu", *extra, "-std=c11", "-Wall", "-Wextra",
                                "-Werror", "-fsyntax-only", f"-I{rt}", *map(str, Q8CONV_SRCS),
                                *map(str, POOL_SRCS)], capture_output=True, text=True)
            label = " ".join(["clang --target=aarch64-linux-gnu", *extra, "carve_q8conv*.c carve_q8_pool*.c"])
            print(f"  {label}: {'clean' if p.returncode == 0 else 'FAILED'}")
            if p.returncode != 0:
                print(p.stderr.strip())
                failed += 1
    else:
        print("  clang not installed: its aarch64 syntax check skipped")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp, "q8conv_tool")
        subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", f"-I{rt}", str(HERE / "q8conv_tool.c"),
                        *map(str, Q8CONV_SRCS), str(rt / "carve_isa.c"), str(rt / "carve_rt.c"),
                        str(rt / "carve_pool.c"), "-o", str(exe), "-pthread", "-lm"], check=True)
        test = Path(tmp, "test_q8conv")  # the hand-written record, refusals, the selector and the names
        subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2", "-UNDEBUG", f"-I{rt}",
                        str(HERE / "test_q8conv.c"), *map(str, Q8CONV_SRCS), str(rt / "carve_isa.c"),
                        str(rt / "carve_rt.c"), str(rt / "carve_pool.c"), "-o", str(test), "-pthread", "-lm"],
                       check=True)
        for cpu in ("max", "cortex-a53"):
            p = subprocess.run(["qemu-aarch64", "-cpu", cpu, "-L", str(AARCH64_LIBC), str(test)], capture_output=True,
                               text=True)
            print(f"  test_q8conv under qemu-aarch64 -cpu {cpu}: " + (p.stdout.strip().splitlines() or ["?"])[-1])
            if p.returncode != 0:
                print(p.stdout + p.stderr)
                failed += 1
        script = [sys.executable, str(HERE / "q8conv_vs_arith.py")]
        for cpu, args in (("max", ["--expect", "portable,neon,neondot", "--expect-selected", "neondot"]),
                          ("cortex-a53", ["--quick", "--expect", "portable,neon", "--expect-selected", "neon"])):
            print(f"  {exe.name} built with {cc} -O2; q8conv_vs_arith.py under qemu-aarch64 -cpu {cpu}")
            p = subprocess.run([*script, *args, "--exec", f"qemu-aarch64 -cpu {cpu} -L {AARCH64_LIBC}", str(exe)])
            failed += p.returncode != 0
    print("q8_build q8conv-aarch64: " + ("ok" if not failed else f"{failed} FAILED"))
    return 1 if failed else 0


MODES = {"compile": compile_all, "aarch64": aarch64, "q8conv-aarch64": q8conv_aarch64}


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        print(__doc__)
        return 2
    return MODES[sys.argv[1]]()


if __name__ == "__main__":
    sys.exit(main())
