#!/usr/bin/env python3
"""`--weights-format file` and the half-precision widening, end to end.

    weights_file.py --work build/work [--imgsz 160]

1. runtime/carve_weights.c against references: carve_f16_to_f32 of all 65536 halves equals numpy's float16 ->
   float32 (bit for bit; NaNs stay NaN), carve_crc32 equals zlib.crc32 (empty, "123456789", 1 MiB random).
2. yolo26n (random Ultralytics weights) generated with --weights-format file and with the linked blob, both
   f32; the demo loading yolo26n.weights from a path (create) and from its own buffer (--caller-memory:
   create_with) gives exactly the blob package's detections.
3. Damaged files, each refused at create with its named status and a non-zero exit, by both create paths:
   bad magic (CARVE_ERR_WEIGHTS_MAGIC), another format version (_VERSION), truncated / padded / empty
   (_SIZE), one payload bit flipped (_CHECKSUM), a valid file of the f16 package or one whose checkpoint
   SHA-256 differs, CRC made consistent (_MODEL), and a missing file (CARVE_ERR_IO).
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fwlib  # noqa: E402
from fwlib import IMAGE, REPO, log, run  # noqa: E402

# status -> carve_status_str() (runtime/carve_rt.c), which the demo prints after "create failed: "
STATUS = {
    "CARVE_ERR_WEIGHTS_MAGIC": "not a carve weights file (bad magic)",
    "CARVE_ERR_WEIGHTS_VERSION": "weights file has an unsupported format version",
    "CARVE_ERR_WEIGHTS_SIZE": "weights file is truncated or has the wrong size",
    "CARVE_ERR_WEIGHTS_CHECKSUM": "weights file is corrupted (checksum mismatch)",
    "CARVE_ERR_WEIGHTS_MODEL": "weights file is for another model or weight type",
    "CARVE_ERR_IO": "file input/output error",
}


def runtime_checks(work: Path) -> bool:
    tool = work / "weights_tool"
    run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", REPO / "runtime",
         Path(__file__).with_name("weights_tool.c"), REPO / "runtime" / "carve_weights.c", REPO / "runtime" / "carve_rt.c",
         "-DCARVE_RT_NO_THREADS", "-o", tool, "-lm"])
    ok = True
    raw = subprocess.run([str(tool), "f16"], capture_output=True, check=True).stdout
    ours = np.frombuffer(raw, dtype="<f4")
    ref = np.arange(65536, dtype="<u2").view("<f2").astype("<f4")
    nan = np.isnan(ref)
    same = np.array_equal(ours[~nan].view("<u4"), ref[~nan].view("<u4")) and bool(np.all(np.isnan(ours[nan])))
    log(f"f16 -> f32: {65536 - int(nan.sum())} finite/inf halves bit-identical to numpy, {int(nan.sum())} NaNs stay NaN: "
        f"{'ok' if same else 'FAIL'}")
    ok &= same
    rng = np.random.default_rng(0)
    for name, data in (("empty", b""), ("check", b"123456789"), ("1 MiB", rng.bytes(1 << 20))):
        f = work / f"crc-{name.replace(' ', '')}.bin"
        f.write_bytes(data)
        got = int(run([tool, "crc", f]).stdout.split()[0], 16)
        good = got == zlib.crc32(data)
        log(f"crc32 {name}: {got:08x} vs zlib {zlib.crc32(data):08x}: {'ok' if good else 'FAIL'}")
        ok &= good
    return ok


def put(data: bytes, off: int, chunk: bytes) -> bytes:
    return data[:off] + chunk + data[off + len(chunk):]


def damaged(good: bytes, other_model: bytes) -> dict:
    """name -> (file bytes, expected status)."""
    payload = good[64:]
    flipped = bytearray(good)
    flipped[64 + len(payload) // 2] ^= 0x10
    other_sha = put(good, 32, bytes(32))  # a valid file (its own CRC holds) of another checkpoint
    return {
        "magic": (put(good, 0, b"CARVEWTX"), "CARVE_ERR_WEIGHTS_MAGIC"),
        "version": (put(good, 8, struct.pack("<I", 2)), "CARVE_ERR_WEIGHTS_VERSION"),
        "truncated": (good[:-1], "CARVE_ERR_WEIGHTS_SIZE"),
        "padded": (good + b"\0" * 64, "CARVE_ERR_WEIGHTS_SIZE"),
        "header-only": (good[:64], "CARVE_ERR_WEIGHTS_SIZE"),
        "empty": (b"", "CARVE_ERR_WEIGHTS_SIZE"),
        "payload-bit": (bytes(flipped), "CARVE_ERR_WEIGHTS_CHECKSUM"),
        "f16-package": (other_model, "CARVE_ERR_WEIGHTS_MODEL"),
        "other-checkpoint": (other_sha, "CARVE_ERR_WEIGHTS_MODEL"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--imgsz", type=int, default=160)
    args = ap.parse_args()
    t = fwlib.Timer()
    work = fwlib.fresh(args.work.resolve() / "firmware-weights")
    ok = runtime_checks(work)
    pt = fwlib.checkpoint(args.work)
    sz = ("--imgsz", str(args.imgsz))
    blob = fwlib.generate("yolo26n.yaml", pt, work / "blob", *sz)
    filep = fwlib.generate("yolo26n.yaml", pt, work / "file", *sz, "--weights-format", "file")
    f16 = fwlib.generate("yolo26n.yaml", pt, work / "file16", *sz, "--weights-format", "file", "--weights-dtype", "f16")
    for pkg in (blob, filep):
        fwlib.cmake_build(pkg, pkg / "build")
    ref = fwlib.demo_json(blob / "build" / "yolo26n_demo")
    demo = filep / "build" / "yolo26n_demo"
    good = (filep / "yolo26n.weights").read_bytes()
    for how in ((), ("--caller-memory",)):
        res = fwlib.demo_json(demo, "--weights", filep / "yolo26n.weights", *how)
        same = fwlib.same_detections(ref, res)
        log(f"good file, {'create_with' if how else 'create'}: {len(res['detections'])} detections, "
            f"{'the same as' if same else 'DIFFERENT from'} the linked blob's")
        ok &= same and len(res["detections"]) > 0
    cases = damaged(good, (f16 / "yolo26n.weights").read_bytes())
    cases["missing"] = (None, "CARVE_ERR_IO")
    for name, (data, status) in cases.items():
        path = work / f"{name}.weights"
        if data is not None:
            path.write_bytes(data)
        for how in ((), ("--caller-memory",)):
            if name == "missing" and how:
                continue  # the demo reads the file itself before create_with
            p = run([demo, IMAGE, "--weights", path, *how], check=False)
            want = f"create failed: {STATUS[status]}"
            good_refusal = p.returncode == 1 and want in p.stderr
            log(f"{name:17} {'create_with' if how else 'create':11} -> exit {p.returncode}: {p.stderr.strip()}"
                f"{'' if good_refusal else '   FAIL: expected ' + status}")
            ok &= good_refusal
    shutil.rmtree(work, ignore_errors=True)
    log(f"weights file: {'PASS' if ok else 'FAIL'} ({t})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
