#!/usr/bin/env python3
"""Cross-compiles generated packages (Debian's cross toolchains, tools/install.sh --test installs them) and runs
the aarch64 ones under qemu-aarch64 against the x86-64 package.

    cross.py --work build/work --target aarch64-xnnpack | aarch64-xnnpack-int8 | aarch64-portable | cortex-m7

aarch64-xnnpack   yolo26n at 320 (xnnpack) built with aarch64-linux-gnu-gcc against Debian's arm64 XNNPACK,
                  pthreadpool and cpuinfo, fetched and unpacked (not installed) by tools/arm64_sysroot.sh into
                  build/.cache/arm64-sysroot:
                  1. every package source compiled -Werror and linked with a minimal main (create_with in static
                     buffers, one run): cross.elf, an AArch64 ELF, run under qemu-aarch64 (exit status CARVE_OK);
                  2. the package's demo, built as tests/portable/compare_backends.py builds it (same function),
                     run under qemu-aarch64 on bus.jpg's letterboxed tensor with --dump; every layer and the
                     output compared with the x86-64 xnnpack package of the same checkpoint and --imgsz on the
                     same tensor, with compare_backends' bound: max(1e-4, 3 x |PyTorch fp32 - x86-64 xnnpack|)
                     relative to the layer's max |value| (NEON and AVX micro-kernels sum in different orders).
aarch64-xnnpack-int8
                  the int8 package of the trained demo model on the xnnpack backend (tests/int8/int8pkg.py's shared
                  package, 128x128), its demo built for aarch64 against the same sysroot and run under qemu-aarch64
                  on -cpu max (ARMv8.2+ with the dot product: carve_q8conv's neondot and carve_q8_run_pool's neon
                  variants) and -cpu cortex-a53 (ARMv8.0: neon and neon), on the four sample images with --dump,
                  against the x86-64 build of the same package (this CPU's AMX / AVX-512 / AVX2 variants): the int8
                  layers up to the first convolution kept in float32 bit-identical (every int8 op is bit for bit
                  arith.py in every variant), later int8 layers within one unit and float layers within 1e-4
                  relative (XNNPACK's NEON and AVX float kernels round differently), the rows' detections the same
                  (tests/int8/xnn_vs_portable.py's bounds); the number of bit-identical layers is printed.
aarch64-portable  the same with --backend portable (-DCARVE_RT_NO_THREADS; libm, and libstb for the demo),
                  compared with the same x86-64 xnnpack package.
cortex-m7         --backend portable for arm-none-eabi-gcc -mcpu=cortex-m7 -mfpu=fpv5-d16 -mfloat-abi=hard
                  (newlib, --specs=nosys.specs), -DCARVE_RT_NO_THREADS -DCARVE_RT_NO_FILE -DCARVE_RT_NO_HEAP,
                  linked with the minimal main, and checked to contain no malloc; arm-none-eabi-size prints
                  text/data/bss for yolo26n-cls at 224 and yolo26n at 320. Not run here (tests/firmware/qemu_m7.py runs
                  a package bare-metal on qemu-system-arm's mps2-an500).
Exit 77 (ctest: skipped), with the reason: the portable targets while `--backend portable` is not in this carve;
the aarch64 targets when the arm64 packages cannot be downloaded (tools/arm64_sysroot.sh exit 3: no network).
A missing cross compiler or qemu-aarch64 fails (tools/install.sh --test installs them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

# One BLAS thread, as `carve generate --precision int8` runs the pass's calibration (cli.py): int8pkg.package_graph
# rebuilds the int8 package's graph in this process and wants its scales bit for bit, which OpenBLAS's threads
# (another summation split) do not give on every CPU (an AMD EPYC: "the rebuilt graph's int8 tensors are not
# quant.json's"). Read when numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import REPO, log, run  # noqa: E402

sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(REPO / "tests" / "portable"))
import compare_backends  # noqa: E402  (the demo build and the comparison bound of the portable tests)
import oracle  # noqa: E402  (tools/, on the path through fwlib)

SKIP = 77
M7 = ["-mcpu=cortex-m7", "-mfpu=fpv5-d16", "-mfloat-abi=hard", "-mthumb"]
# bare metal: no threads, no stdio for the weights, no heap (create_with only; malloc is never linked in)
M7_DEFINES = ["-DCARVE_RT_NO_THREADS", "-DCARVE_RT_NO_FILE", "-DCARVE_RT_NO_HEAP"]
AARCH64_CC = "aarch64-linux-gnu-gcc"
AARCH64_LIBC = Path("/usr/aarch64-linux-gnu")  # libc6-arm64-cross: the dynamic loader and libc for qemu -L
SYSROOT_SCRIPT = REPO / "tools" / "arm64_sysroot.sh"
SYSROOT_OFFLINE = 3  # arm64_sysroot.sh: the packages could not be downloaded


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


def arm64_sysroot() -> Path | None:
    """tools/arm64_sysroot.sh: Debian's arm64 XNNPACK, pthreadpool, cpuinfo and stb unpacked under build/.cache
    (downloaded once, then cached); None when they cannot be downloaded. Any other failure ends the test."""
    p = subprocess.run(["sh", str(SYSROOT_SCRIPT)], text=True, capture_output=True)
    sys.stdout.write(p.stderr)
    if p.returncode == SYSROOT_OFFLINE:
        return None
    if p.returncode != 0:
        raise SystemExit(f"cross: {SYSROOT_SCRIPT.name} failed with exit code {p.returncode}")
    return Path(p.stdout.strip().splitlines()[-1])


def qemu(exe: Path, libdir: Path, *args) -> subprocess.CompletedProcess:
    """Runs an aarch64 executable under qemu-user: Debian's cross libc as the guest's root for the loader, the
    sysroot's libraries on the guest's LD_LIBRARY_PATH (-E: not the host qemu's)."""
    return run(["qemu-aarch64", "-L", AARCH64_LIBC, "-E", f"LD_LIBRARY_PATH={libdir}", exe, *args], check=False)


def aarch64(backend: str, cache: Path, work: Path, sysroot: Path) -> bool:
    """yolo26n at 320 for aarch64 (checkpoint cached in cache/checkpoints, files in work): the minimal main and the demo linked against the sysroot and run under qemu;
    the demo's layers and output against the x86-64 xnnpack package's on the same tensor."""
    manifest, name, task, imgsz = "yolo26n.yaml", "yolo26n", "detect", 320
    inc, lib = sysroot / "usr" / "include", sysroot / "usr" / "lib" / "aarch64-linux-gnu"
    pt = fwlib.checkpoint(cache, manifest)
    pkgs = {}
    for arch, b in (("aarch64", backend), ("x86-64", "xnnpack")):
        pkgs[arch] = fwlib.generate(manifest, pt, work / f"{name}-{b}-{arch}", "--imgsz", str(imgsz), backend=b)
    pkg = pkgs["aarch64"]
    if backend == "xnnpack":
        flags, libs = [f"-I{inc}"], ["-lXNNPACK", "-lpthreadpool", "-lpthread", "-lm"]
    else:
        flags, libs = ["-DCARVE_RT_NO_THREADS"], ["-lm"]
    ldflags = [f"-L{lib}", f"-Wl,-rpath-link={lib}"]
    elf = build(pkg, name, task, AARCH64_CC, flags, [*ldflags, *libs], True)
    machine = elf_machine(elf)
    ok = "AArch64" in machine
    log(f"{name} ({backend}, {imgsz}): {elf.name} is an ELF for {machine}: {'ok' if ok else 'FAIL'}")
    p = qemu(elf, lib)
    log(f"   qemu-aarch64 {elf.name} (create_with in static buffers, one run): exit status {p.returncode} "
        f"({'ok' if p.returncode == 0 else 'FAIL'})")
    ok &= p.returncode == 0

    demo = compare_backends.build(pkg, name, backend, cc=AARCH64_CC, cflags=(f"-I{inc}",), ldflags=tuple(ldflags))
    host_demo = compare_backends.build(pkgs["x86-64"], name, "xnnpack")
    tensor = work / "input.npy"
    oracle.make_input(oracle.sample_image("bus.jpg"), imgsz, tensor, task=task)
    dumps = {arch: work / f"dump-{arch}" for arch in pkgs}
    t = fwlib.Timer()
    p = qemu(demo, lib, "--input", tensor, "--dump", dumps["aarch64"])
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-4000:] + p.stderr[-4000:])
        log(f"   qemu-aarch64 {demo.name}: exit status {p.returncode}: FAIL")
        return False
    log(f"   qemu-aarch64 {demo.name} --input --dump: {compare_backends.latency(p.stdout):.0f} ms per run under "
        f"emulation ({t} with the dump)")
    run([host_demo, "--input", tensor, "--dump", dumps["x86-64"]])
    ref32 = work / "ref32"
    oracle.reference_layers(pt, tensor, ref32)
    tol, factor = compare_backends.TOL, compare_backends.FACTOR
    log(f"== {name} at {imgsz}: aarch64 {backend} (qemu) vs x86-64 xnnpack, bound max({tol:g}, {factor:g} x "
        f"|PyTorch fp32 - x86-64 xnnpack|)")
    same = oracle.compare_layers(dumps["aarch64"], dumps["x86-64"], tol=tol, baseline=ref32, factor=factor)
    worst = max(oracle.LAST_STATS, key=lambda k: oracle.LAST_STATS[k][0])
    log(f"   aarch64 {backend} vs x86-64 xnnpack: {'PASS' if same else 'FAIL'}; max rel error "
        f"{oracle.LAST_STATS[worst][0]:.2e} ({worst})")
    return ok and same


def aarch64_int8(cache: Path, work: Path, sysroot: Path) -> bool:
    """The module docstring's aarch64-xnnpack-int8 (cache: the build's work folder, which holds the shared int8
    package; work: this test's files)."""
    sys.path.insert(0, str(REPO / "tests" / "int8"))
    import int8pkg
    import xnn_vs_portable as xvp
    import numpy as np
    inc, lib = sysroot / "usr" / "include", sysroot / "usr" / "lib" / "aarch64-linux-gnu"
    shared = int8pkg.package(cache, "xnnpack", int8pkg.IMGSZ)
    graph = int8pkg.package_graph(cache, shared, "xnnpack", int8pkg.IMGSZ)
    units = {lay.index: graph.tensors[lay.output].quant.scale for lay in graph.layers
             if graph.tensors[lay.output].dtype == "i8"}
    first_float = min((op.layer for op in graph.ops if op.kind == "conv2d"), default=None)
    files = int8pkg.package_files(shared)
    demos = {"x86-64": compare_backends.build(int8pkg.write_package(files, work / "x86-64"), int8pkg.PREFIX,
                                              "xnnpack")}
    arm = compare_backends.build(int8pkg.write_package(files, work / "aarch64"), int8pkg.PREFIX, "xnnpack",
                                 cc=AARCH64_CC, cflags=(f"-I{inc}",), ldflags=(f"-L{lib}", f"-Wl,-rpath-link={lib}"))
    log(f"int8 package {shared.name} (first float32 conv in layer {first_float}): {arm.name} built for "
        f"{elf_machine(arm)}")
    inputs = int8pkg.letterboxed(xvp.IMAGES, int8pkg.IMGSZ)
    ok = True
    for img in xvp.IMAGES:
        tensor = int8pkg.save_nchw(inputs[img], work / f"{img.stem}.npy")
        ref = work / f"dump-x86-64-{img.stem}"
        shutil.rmtree(ref, ignore_errors=True)
        int8pkg.run_demo(demos["x86-64"], "--input", tensor, "--dump", ref, "--conf", xvp.CONF)
        want_rows = np.load(ref / "output0.npy").reshape(-1, 6)
        for cpu in ("max", "cortex-a53"):
            d = work / f"dump-{cpu}-{img.stem}"
            shutil.rmtree(d, ignore_errors=True)
            p = run(["qemu-aarch64", "-cpu", cpu, "-L", AARCH64_LIBC, "-E", f"LD_LIBRARY_PATH={lib}", arm, "--input",
                     tensor, "--dump", d, "--conf", str(xvp.CONF)], check=False)
            if p.returncode != 0:
                sys.stdout.write(p.stdout[-4000:] + p.stderr[-4000:])
                log(f"   {img.name}, qemu-aarch64 -cpu {cpu}: exit status {p.returncode}: FAIL")
                ok = False
                continue
            problems, identical = [], 0
            for lay in graph.layers:
                name = f"layer_{lay.index:02d}.npy"
                a, b = np.load(d / name), np.load(ref / name)
                identical += a.tobytes() == b.tobytes()
                diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
                if lay.index in units:
                    bound = 0.0 if first_float is None or lay.index < first_float else 1.0
                    if diff / units[lay.index] > bound:
                        problems.append(f"int8 layer {lay.index} ({lay.type}) {diff / units[lay.index]:.3g} units off")
                elif diff > xvp.FLOAT_RTOL * max(float(np.abs(b).max()), 1e-30):
                    problems.append(f"float layer {lay.index} ({lay.type}) {diff:.3g} off")
            rows = np.load(d / "output0.npy").reshape(-1, 6)
            why = "" if rows.tobytes() == want_rows.tobytes() else xvp.rows_differ(rows, want_rows)
            if why:
                problems.append(f"the rows differ ({why})")
            detections = int(np.sum(want_rows[:, 4] >= xvp.CONF))
            if detections == 0:
                problems.append(f"no detection >= {xvp.CONF} on a sample image (a flat model proves nothing)")
            log(f"   {img.name}, qemu-aarch64 -cpu {cpu} vs x86-64: {identical} of {len(graph.layers)} layers "
                f"bit-identical, rows {'bit-identical' if rows.tobytes() == want_rows.tobytes() else 'close'}, "
                f"{detections} detections: {'; '.join(problems) or 'ok'}")
            ok &= not problems
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--target", required=True,
                    choices=("aarch64-xnnpack", "aarch64-xnnpack-int8", "aarch64-portable", "cortex-m7"))
    args = ap.parse_args()
    t = fwlib.Timer()
    backend = "portable" if args.target.endswith("portable") or args.target == "cortex-m7" else "xnnpack"
    if backend == "portable" and not have_backend("portable"):
        log(f"cross {args.target}: SKIPPED: --backend portable is not in this carve yet")
        return SKIP
    cc = "arm-none-eabi-gcc" if args.target == "cortex-m7" else AARCH64_CC
    tools = [cc] if args.target == "cortex-m7" else [cc, "qemu-aarch64"]
    for tool in tools:
        if shutil.which(tool) is None:
            log(f"cross {args.target}: {tool} not found (sh tools/install.sh --test installs it)")
            return 1
    work = fwlib.fresh(args.work.resolve() / f"firmware-cross-{args.target}")
    if args.target != "cortex-m7":
        sysroot = arm64_sysroot()
        if sysroot is None:
            log(f"cross {args.target}: SKIPPED: Debian's arm64 XNNPACK, pthreadpool, cpuinfo and stb could not be "
                f"downloaded (tools/arm64_sysroot.sh, see above): nothing linked or run for aarch64")
            return SKIP
        if args.target == "aarch64-xnnpack-int8":
            ok = aarch64_int8(args.work, work, sysroot)
        else:
            ok = aarch64(backend, args.work, work, sysroot)
        if ok:
            shutil.rmtree(work, ignore_errors=True)
        log(f"cross {args.target}: {'PASS' if ok else 'FAIL (files kept in ' + str(work) + ')'} ({t})")
        return 0 if ok else 1
    ok = True
    for manifest, name, task, imgsz in (("yolo26n-cls.yaml", "yolo26n_cls", "classify", "224"),
                                        ("yolo26n.yaml", "yolo26n", "detect", "320")):
        pt = fwlib.checkpoint(args.work, manifest)
        pkg = work / name
        run([fwlib.CARVE, "generate", REPO / "manifests" / manifest, "--backend", backend, "--weights", pt,
             "--out", pkg, "--imgsz", imgsz])
        elf = build(pkg, name, task, cc, [*M7, *M7_DEFINES], ["--specs=nosys.specs", "-lm"], True)
        machine = elf_machine(elf)
        good = "ARM" in machine
        log(f"{name} ({backend}, {imgsz}): {elf.name} is an ELF for {machine}: {'ok' if good else 'FAIL'}")
        ok &= good
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
