"""The firmware harness of tests/firmware/m7 built around a generated package: for qemu's mps2-an500 (an
emulated Cortex-M7, bare metal) and for the host, run, and its output read back.

Used by tests/firmware/qemu_m7.py (the emulated run against the host) and tests/firmware/sizes.py --firmware (flash
and RAM of the linked image). The harness's C files are in tests/firmware/m7/ (fw_main.c says what it prints);
this module writes the two files it needs beside the package (fw_model.h, fw_image.rgb), compiles every package
source with the harness, and parses what the program printed.

Build (both targets): -std=c11 -O2 -Wall -Wextra -Werror -DCARVE_RT_NO_THREADS -DCARVE_RT_NO_FILE
-DCARVE_RT_NO_HEAP (cross.py's bare-metal defines), every source of the package but the demo's carve_io.c.
Cortex-M7: cross.py's -mcpu=cortex-m7 -mfpu=fpv5-d16 -mfloat-abi=hard -mthumb, -ffunction-sections -fdata-sections
and --gc-sections (what a firmware link does: unused runtime kernels dropped), -nostartfiles (startup_m7.S is the
start-up), m7/mps2_an500.ld, newlib's libc and libm (--specs=nosys.specs: no system call is used; text and exit go
through semihosting).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import cross
import fwlib
from fwlib import REPO, run

M7_DIR = Path(__file__).resolve().parent / "m7"
LINKER_SCRIPT = M7_DIR / "mps2_an500.ld"
QEMU = "qemu-system-arm"
MACHINE = "mps2-an500"
QEMU_X86 = "qemu-x86_64"   # qemu-user: runs the host build on a CPU without AVX2 / FMA (portable_isa_host)
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"]
M7_FLAGS = [*cross.M7, "-ffunction-sections", "-fdata-sections"]
M7_LDFLAGS = ["-nostartfiles", f"-T{LINKER_SCRIPT}", "-Wl,--gc-sections", "-Wl,--no-warn-execstack",
              "--specs=nosys.specs"]
JOBS = 2  # compiler processes at a time (CI: 2 cores)
ALLOCATORS = ("malloc", "calloc", "realloc", "aligned_alloc", "posix_memalign", "free", "_malloc_r", "_free_r")


def c_name(manifest_name: str) -> str:
    return manifest_name.replace("-", "_")


def write_inputs(pkg: Path, name: str, task: str, image: Path, image_scratch: int | None = None) -> tuple[int, int]:
    """fw_model.h (the model's names, the task, the image's size) and fw_image.rgb (the PNG's RGB bytes, as stb
    decodes it for the demo) in pkg; returns (width, height). classify: image_scratch is run_image's scratch."""
    import cv2

    bgr = cv2.imread(str(image), cv2.IMREAD_COLOR)
    if bgr is None:
        raise SystemExit(f"firmware harness: {image}: not an image cv2 can read")
    rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    h, w = rgb.shape[:2]
    (pkg / "fw_image.rgb").write_bytes(rgb.tobytes())
    lines = ["// Written by tests/firmware/fwm7.py for the firmware harness (tests/firmware/m7/fw_main.c).",
             f'#include "{name}.h"', f'#define FW_NAME "{name}"', f"#define FW_T {name}",
             f"#define FW(f) {name}_##f", f"#define FW_C(c) {name.upper()}_##c",
             "#define FW_CLASSIFY 1" if task == "classify" else "#define FW_DETECT 1",
             f"#define FW_IMAGE_W {w}", f"#define FW_IMAGE_H {h}"]
    if task == "classify":
        lines.append(f"#define FW_IMAGE_SCRATCH_BYTES {image_scratch or 64}u")
    (pkg / "fw_model.h").write_text("\n".join(lines) + "\n")
    return w, h


def classify_image_scratch(pkg: Path, width: int, height: int, imgsz: int) -> int:
    """run_image's scratch of a classify package for a width x height image: the runtime's own
    carve_pre_classify_scratch_bytes (runtime/carve_pre_math.h, static inline), compiled and run on the host."""
    src = pkg / "fw_image_scratch.c"
    src.write_text('#include <stdio.h>\n#include <stdlib.h>\n#include "carve_pre_math.h"\n'
                   "int main(int argc, char** argv) {\n  (void)argc;\n"
                   '  printf("%zu\\n",\n'
                   "         carve_pre_classify_scratch_bytes(atoi(argv[1]), atoi(argv[2]), atoi(argv[3])));\n"
                   "  return 0;\n}\n")
    exe = pkg / "fw_image_scratch"
    run(["cc", *CFLAGS, *cross.M7_DEFINES, f"-I{pkg / 'runtime'}", src, "-o", exe, "-lm"])
    return int(run([exe, width, height, imgsz]).stdout)


def calib_folder(work: Path, seed: int = 0, count: int = 32) -> Path:
    """count PNGs of tools/train_demo.py's renderer (seed 0: the demo model's training images; index 0..count-1)
    in WORK/calib-shapes-<seed>-<count>, rendered once; the folder holds nothing else (a --calib folder)."""
    import cv2
    import train_demo  # tools/, on the path through fwlib

    out = work.resolve() / f"calib-shapes-{seed}-{count}"
    if out.is_dir() and len(list(out.glob("*.png"))) == count:
        return out
    tmp = fwlib.fresh(out.with_name(out.name + ".tmp"))
    for i in range(count):
        img, _ = train_demo.render_image(seed, i)
        cv2.imwrite(str(tmp / f"{seed}_{i:05d}.png"), img)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


HANDQUANT_IMAGES = 8  # quant "hand": the ranges (min / max) over the first 8 calibration images


def supports_precision() -> bool:
    """This carve's generate has --precision (the quantization pass)."""
    p = subprocess.run([str(fwlib.CARVE), "generate", "--help"], text=True, capture_output=True)
    return "--precision" in p.stdout


def quant_mode(precision: str, quant: str = "auto") -> str:
    """fp32: "fp32"; int8: "pass" (./carve generate --precision int8 --calib), "all" (the pass's calibration and
    rewrite with no op kept in float32: generate_all_int8) or "hand" (tests/int8/handquant.py's graph); "auto" picks
    the pass when this carve has it."""
    if precision == "fp32":
        return "fp32"
    return ("pass" if supports_precision() else "hand") if quant == "auto" else quant


def generate(manifest: str, checkpoint: Path, out: Path, imgsz: int, quant: str, calib: Path | None) -> Path:
    """The portable package of manifests/<manifest> at imgsz: fp32, or int8 by quant_mode's "pass", "all" or
    "hand"."""
    if quant == "all":
        return generate_all_int8(manifest, checkpoint, out, imgsz, calib)
    if quant != "hand":
        flags = ["--imgsz", str(imgsz)] + (["--precision", "int8", "--calib", calib] if quant == "pass" else [])
        p = run([fwlib.CARVE, "generate", REPO / "manifests" / manifest, "--backend", "portable", "--weights",
                 checkpoint, "--out", out, "--force", *flags])
        for ln in p.stderr.splitlines():  # the int8 summary: ops in int8, those kept float32 and why
            if ln.startswith(("carve: int8", "carve:   ", "carve: generated")):
                fwlib.log(ln)
        return out
    return generate_handquant(manifest, checkpoint, out, imgsz, calib)


def _write_files(files: dict, out: Path) -> None:
    fwlib.fresh(out)
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)


def generate_all_int8(manifest: str, checkpoint: Path, out: Path, imgsz: int, calib: Path) -> Path:
    """The int8 package of the quantization pass with its sensitivity threshold at -1e300 dB (measured on one
    image, and ignored): calibrated and rewritten as --precision int8 does, but every conv2d / add in int8 (ops
    without an int8 kernel stay float32), through compile_model's graph_hook as tests/int8/xnn_vs_portable.py
    --quant-pass does. The package a trained model gets when the analysis keeps nothing in float32: for the demo
    model, --precision int8's package without the float32 ops its analysis keeps (a few box-branch and backbone
    convolutions: docs/quantization.md) and without the minutes of the analysis; for random-weight
    checkpoints (sizes.py), whose ops the analysis would nearly all keep in float32 (alone in int8, each brings the
    random network's output below 35 dB of SQNR), the package a trained one would get."""
    import sys
    sys.path.insert(0, str(REPO / "generator"))
    from carve.compiler import compile_model, quantized_graph

    path = str(REPO / "manifests" / manifest)
    q = quantized_graph(path, str(checkpoint), str(calib), imgsz, threshold_db=-1e300, sens_images=1)
    res = compile_model(path, "portable", str(checkpoint), imgsz, graph_hook=lambda g: q.graph)
    _write_files(res.files, out)
    fwlib.log(f"int8 package of the pass's graph with nothing kept in float32 ({q.summary['int8_ops']} of "
              f"{q.summary['quantizable_ops']} conv/add ops in int8) in {out}")
    return out


def generate_handquant(manifest: str, checkpoint: Path, out: Path, imgsz: int, calib: Path) -> Path:
    """The int8 package of tests/int8/handquant.py's graph: every convolution in int8 between a quantize and a
    dequantize, every other op float32, ranges from the first HANDQUANT_IMAGES images of calib; through
    compile_model's graph_hook, as tests/int8/xnn_vs_portable.py makes it. The portable backend's int8 lowering
    and carve_q8 kernels, before the quantization pass (--precision int8) exists; not its packages (the pass keeps
    tensors int8 across ops, so its arena differs)."""
    import sys
    sys.path[:0] = [str(REPO / "generator"), str(REPO / "tests" / "int8")]
    import handquant
    import numpy as np
    import oracle
    from carve.checkpoint import read_checkpoint
    from carve.compiler import compile_model, load_architecture
    from carve.frontend.yolo26 import build_graph
    from carve.manifest import load_manifest
    from carve.passes import optimize

    path = REPO / "manifests" / manifest
    m = load_manifest(path)
    task = "classify" if m.task == "classify" else "detect"
    fgraph = optimize(build_graph(m, load_architecture(m), read_checkpoint(str(checkpoint)), imgsz))
    images = [np.ascontiguousarray(oracle.make_input(p, imgsz, task=task)[0].transpose(1, 2, 0), np.float32)
              for p in sorted(calib.glob("*.png"))[:HANDQUANT_IMAGES]]
    qgraph = handquant.quantize_graph(fgraph, handquant.calibrate(fgraph, images))
    res = compile_model(str(path), "portable", str(checkpoint), imgsz, graph_hook=lambda g: qgraph)
    _write_files(res.files, out)
    n = sum(op.kind == "qconv2d" for op in qgraph.ops)
    fwlib.log(f"int8 package of handquant's graph ({n} qconv2d, calibrated on {len(images)} images) in {out}")
    return out


def _compile(cc: str, flags: list, sources: list, objdir: Path) -> list:
    objdir.mkdir(parents=True, exist_ok=True)
    objs = [objdir / (src.name + ".o") for src in sources]  # <name>_weights.S.o: what mps2_an500.ld places
    cmds = [[cc, *flags, "-c", src, "-o", obj] for src, obj in zip(sources, objs)]
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        list(pool.map(run, cmds))
    return objs


def _sources(pkg: Path, name: str, *harness: str) -> list:
    return cross.package_sources(pkg, name) + [M7_DIR / f for f in ("fw_main.c", *harness, "fw_image.S")]


def _common(pkg: Path) -> list:
    return [*CFLAGS, f"-I{pkg}", f"-I{pkg / 'runtime'}", f"-I{M7_DIR}", f"-DCARVE_PACKAGE_ABI={cross.abi()}",
            *cross.M7_DEFINES]


def build_m7(pkg: Path, name: str, stack_size: int | None = None) -> Path:
    """pkg/fw-m7.elf (and its map, fw-m7.map); fails if it links an allocator."""
    objs = _compile("arm-none-eabi-gcc", [*_common(pkg), *M7_FLAGS],
                    _sources(pkg, name, "fw_m7.c", "startup_m7.S"), pkg / "obj-m7")
    elf = pkg / "fw-m7.elf"
    extra = [f"-Wl,--defsym=STACK_SIZE={stack_size}"] if stack_size else []
    run(["arm-none-eabi-gcc", *cross.M7, *M7_LDFLAGS, *extra, f"-Wl,-Map={pkg / 'fw-m7.map'}", *objs, "-o", elf,
         "-lm"])
    syms = set(run(["arm-none-eabi-nm", elf]).stdout.split())
    heap = sorted(syms.intersection(ALLOCATORS))
    if heap:
        raise SystemExit(f"firmware harness: {elf} links an allocator ({', '.join(heap)}): CARVE_RT_NO_HEAP broken")
    return elf


def build_host(pkg: Path, name: str) -> Path:
    """pkg/fw-host: the same harness and package for the machine running the tests."""
    objs = _compile("cc", _common(pkg), _sources(pkg, name, "fw_host.c"), pkg / "obj-host")
    exe = pkg / "fw-host"
    run(["cc", *objs, "-o", exe, "-lm"])
    return exe


def elf_sections(elf: Path) -> dict:
    """{section: bytes} of arm-none-eabi-size -A."""
    out = {}
    for ln in run(["arm-none-eabi-size", "-A", elf]).stdout.splitlines():
        m = re.match(r"^(\.\S+)\s+(\d+)\s+\d+", ln)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


@dataclass
class Result:
    """What one run printed, parsed (fw_main.c's format)."""
    text: str
    returncode: int
    seconds: float
    header: str = ""
    records: list = field(default_factory=list)   # the det / top lines, platform-independent
    values: list = field(default_factory=list)    # per record: (class_id, [floats from the bits])
    count: int = -1
    status: int = -1
    stack_used: int = 0
    stack_size: int = 0
    image_scratch: int = 0


def parse(text: str, returncode: int, seconds: float) -> Result:
    r = Result(text, returncode, seconds)
    for ln in text.splitlines():
        f = ln.split()
        if not f:
            continue
        if f[0] == "carve-fw":
            r.header = re.sub(r" platform .* input ", " input ", ln)
        elif f[0] in ("det", "top"):
            r.records.append(ln)
            bits = f[f.index("bits") + 1:]
            r.values.append((int(f[3]), [struct.unpack("<f", bytes.fromhex(b)[::-1])[0] for b in bits]))
        elif f[0] in ("detections", "classes"):
            r.count = int(f[1])
        elif f[0] == "stack_bytes":
            r.stack_used, r.stack_size = int(f[1]), int(f[3])
        elif f[0] == "image_scratch_bytes":
            r.image_scratch = int(f[1])
        elif f[0] == "status":
            r.status = int(f[1])
    return r


def _timed(cmd: list, timeout: float) -> Result:
    cmd = [str(c) for c in cmd]
    fwlib.log("$ " + " ".join(cmd))
    t0 = time.time()
    try:
        p = subprocess.run(cmd, text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return parse(out + f"\n(timed out after {timeout:.0f} s)\n", 124, time.time() - t0)
    return parse(p.stdout + p.stderr, p.returncode, time.time() - t0)


def run_qemu(elf: Path, timeout: float = 600) -> Result:
    """The ELF on qemu's mps2-an500, semihosting on (text on qemu's stdout, the exit status qemu's)."""
    return _timed([QEMU, "-M", MACHINE, "-nographic", "-monitor", "none", "-serial", "none", "-semihosting",
                   "-kernel", elf], timeout)


def run_host(exe: Path, portable_isa: bool = False, timeout: float = 600) -> Result:
    """The host build; portable_isa: under qemu-user with a CPU without AVX2 or FMA (qemu64), where the runtime
    picks its portable C kernels (carve_isa_detect) as on the Cortex-M7, instead of its AVX-512 / AVX2 ones."""
    return _timed([QEMU_X86, "-cpu", "qemu64", exe] if portable_isa else [exe], timeout)


def have(tool: str) -> bool:
    return shutil.which(tool) is not None
