#!/usr/bin/env python3
"""Cross-compiles generated packages (Debian's cross toolchains, tools/install.sh --test installs them).

    cross.py --work build/work --target aarch64-xnnpack | aarch64-portable | cortex-m7 [--sizes]

aarch64-xnnpack   yolo26n at 320 (xnnpack) built with aarch64-linux-gnu-gcc: every package source compiled
                  -Werror; linked with a minimal main (create_with in static buffers, one run) against
                  Debian's arm64 XNNPACK (libxnnpack-dev:arm64, multiarch) when it is installed, else
                  compiled only (the headers are architecture independent) and said so.
aarch64-portable  the same with --backend portable, linked (libm only).
cortex-m7         --backend portable for arm-none-eabi-gcc -mcpu=cortex-m7 -mfpu=fpv5-d16 -mfloat-abi=hard
                  (newlib, --specs=nosys.specs), -DCARVE_RT_NO_THREADS -DCARVE_RT_NO_FILE -DCARVE_RT_NO_HEAP,
                  linked with the minimal main, and checked to contain no malloc; arm-none-eabi-size prints
                  text/data/bss for yolo26n-cls at 224 and yolo26n at 320.
The portable targets exit 77 (ctest: skipped) while `--backend portable` is not in this carve.
Nothing is run: the binaries are for another machine; each is checked to be an ELF of its architecture.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import REPO, log, run  # noqa: E402

sys.path.insert(0, str(REPO / "generator"))
SKIP = 77
M7 = ["-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard", "-mthumb"]
# bare metal: no threads, no stdio for the weights, no heap (create_with only; malloc is never linked in)
M7_DEFINES = ["-DCARVE_RT_NO_THREADS", "-DCARVE_RT_NO_FILE", "-DCARVE_RT_NO_HEAP"]
ARM64_LIBDIR = Path("/usr/lib/aarch64-linux-gnu")


def have_backend(name: str) -> bool:
    from carve.backends import available_backends
    return name in {b.name for b in available_backends()}


def package_sources(pkg: Path, name: str) -> list:
    srcs = [pkg / f"{name}.c"] + [p for p in (pkg / f"{name}_weights.S", pkg / f"{name}_weights.c") if p.exists()]
    return srcs + sorted(p for p in (pkg / "runtime").glob("*.c") if p.name != "carve_io.c")


def write_main(pkg: Path, name: str, task: str) -> Path:
    run_call = ("  " + name + "_class top[1];\n  s = " + name + "_run_tensor(model, g_input, top, 1);" if task == "classify"
                else "  size_t n = 0;\n  s = " + name + "_run_tensor(model, g_input, 0.25f, NULL, 0, &n);")
    text = Path(__file__).with_name("cross_main.c.in").read_text()
    text = text.replace("@RUN@", run_call).replace("@UNAME@", name.upper()).replace("@NAME@", name)
    out = pkg / "cross_main.c"
    out.write_text(text)
    return out


def elf_machine(path: Path) -> str:
    out = run(["readelf", "-h", path]).stdout
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Machine:" in ln), "?")


def build(pkg: Path, name: str, task: str, cc: str, flags: list, libs: list, link: bool) -> Path | None:
    """Compiles every source of the package (-Werror) and, if link, a minimal main into pkg/cross.elf."""
    objs = []
    common = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{pkg}", f"-I{pkg / 'runtime'}",
              f"-DCARVE_PACKAGE_ABI={abi()}", *flags]
    for src in package_sources(pkg, name) + [write_main(pkg, name, task)]:
        obj = pkg / "obj" / (src.name + ".o")
        obj.parent.mkdir(exist_ok=True)
        run([cc, *common, "-c", src, "-o", obj])
        objs.append(obj)
    if not link:
        return None
    elf = pkg / "cross.elf"
    run([cc, *flags, *objs, "-o", elf, *libs])
    return elf


def abi() -> int:
    from carve.backends.emit_c import runtime_abi
    return runtime_abi()


def arm64_xnnpack() -> bool:
    return (ARM64_LIBDIR / "libXNNPACK.so").exists() and (ARM64_LIBDIR / "libpthreadpool.so").exists()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--target", required=True, choices=("aarch64-xnnpack", "aarch64-portable", "cortex-m7"))
    args = ap.parse_args()
    t = fwlib.Timer()
    backend = "xnnpack" if args.target.endswith("xnnpack") else "portable"
    if backend == "portable" and not have_backend("portable"):
        log(f"cross {args.target}: SKIPPED: --backend portable is not in this carve yet")
        return SKIP
    cc = "arm-none-eabi-gcc" if args.target == "cortex-m7" else "aarch64-linux-gnu-gcc"
    if shutil.which(cc) is None:
        log(f"cross {args.target}: {cc} not found (sh tools/install.sh --test installs it)")
        return 1
    work = fwlib.fresh(args.work.resolve() / f"firmware-cross-{args.target}")
    variants = [("yolo26n.yaml", "yolo26n", "detect", "320")]
    if args.target == "cortex-m7":
        variants.insert(0, ("yolo26n-cls.yaml", "yolo26n_cls", "classify", "224"))
    ok = True
    for manifest, name, task, imgsz in variants:
        pt = fwlib.checkpoint(args.work, manifest)
        pkg = work / name
        run([fwlib.CARVE, "generate", REPO / "manifests" / manifest, "--backend", backend, "--weights", pt,
             "--out", pkg, "--imgsz", imgsz])
        if args.target == "cortex-m7":
            elf = build(pkg, name, task, cc, [*M7, *M7_DEFINES],
                        ["--specs=nosys.specs", "-lm"], True)
            want = "ARM"
        elif backend == "portable":
            elf = build(pkg, name, task, cc, ["-DCARVE_RT_NO_THREADS"], ["-lm"], True)
            want = "AArch64"
        else:
            inc = work / "include"  # XNNPACK's and pthreadpool's headers only, not the host's /usr/include
            inc.mkdir(exist_ok=True)
            for h in ("xnnpack.h", "pthreadpool.h"):
                if not (inc / h).exists():
                    shutil.copy(Path("/usr/include") / h, inc / h)
            link = arm64_xnnpack()
            elf = build(pkg, name, task, cc, [f"-I{inc}"],
                        [f"-L{ARM64_LIBDIR}", f"-Wl,-rpath-link={ARM64_LIBDIR}", "-lXNNPACK", "-lpthreadpool",
                         "-lpthread", "-lm"], link)
            want = "AArch64"
            if not link:
                log(f"{name}: compiled for aarch64 (every source, -Werror); NOT linked: Debian's arm64 XNNPACK "
                    f"(libxnnpack-dev:arm64) is not installed")
                machine = elf_machine(next((pkg / "obj").glob("*.o")))
                ok &= want in machine
                continue
        machine = elf_machine(elf)
        good = want in machine
        log(f"{name} ({backend}, {imgsz}): {elf.name} is an ELF for {machine}: {'ok' if good else 'FAIL'}")
        ok &= good
        if args.target == "cortex-m7":
            syms = run(["arm-none-eabi-nm", elf]).stdout.split()
            heap = sorted({s for s in syms if s in ("malloc", "calloc", "aligned_alloc", "posix_memalign", "free",
                                                    "_malloc_r")})
            log(f"   allocator symbols linked in: {', '.join(heap) or 'none'}")
            ok &= not heap
            size = run(["arm-none-eabi-size", "-B", elf]).stdout
            log(f"$ arm-none-eabi-size -B {elf.name}\n{size.rstrip()}")
            hdr = (pkg / f"{name}.h").read_text()
            arena = next(ln for ln in hdr.splitlines() if "_ARENA_BYTES" in ln and ln.startswith("#define"))
            log(f"   {arena.split('//')[0].strip()}")
    shutil.rmtree(work, ignore_errors=True)
    log(f"cross {args.target}: {'PASS' if ok else 'FAIL'} ({t})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
