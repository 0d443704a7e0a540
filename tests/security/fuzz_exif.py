#!/usr/bin/env python3
"""Build tests/security/harness/fuzz_exif.c with clang (libFuzzer + ASan + UBSan) and run it.

Usage: fuzz_exif.py WORK_DIR [SECONDS]

Seeds: JPEG headers with an APP1 Exif segment in both byte orders, the tag first or after other entries, an
XMP APP1 before it, and damaged lengths / offsets. Exits 0 after SECONDS (default 10) without a finding,
1 on a finding (the input is left in WORK_DIR/findings-exif/), and 0 with 'skipped' when clang has no
libFuzzer.
"""

import shutil
import struct
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def app1(entries, order="II", ifd_offset=8):
    e = "<" if order == "II" else ">"
    tiff = order.encode() + struct.pack(e + "HI", 42, ifd_offset) + struct.pack(e + "H", len(entries))
    for tag, typ, count, value in entries:
        tiff += struct.pack(e + "HHI", tag, typ, count) + struct.pack(e + "HH", value, 0)
    tiff += b"\0\0\0\0"
    payload = b"Exif\0\0" + tiff
    return b"\xFF\xE1" + struct.pack(">H", len(payload) + 2) + payload


def seeds():
    soi, sos = b"\xFF\xD8", b"\xFF\xDA\x00\x02"
    xmp = b"\xFF\xE1\x00\x10http://ns.ado"
    return {
        "ii-6": soi + app1([(0x0112, 3, 1, 6)]) + sos,
        "mm-8": soi + app1([(0x0112, 3, 1, 8)], "MM") + sos,
        "third": soi + app1([(0x010F, 2, 1, 0), (0x0110, 2, 1, 0), (0x0112, 3, 1, 5)]) + sos,
        "xmp-first": soi + xmp + app1([(0x0112, 3, 1, 3)], "MM") + sos,
        "bad-offset": soi + app1([(0x0112, 3, 1, 6)], ifd_offset=0xFFFFFFF0) + sos,
        "bad-length": soi + b"\xFF\xE1\xFF\xFFExif\0\0II*\0",
        "fill": soi + b"\xFF\xFF\xFF" + app1([(0x0112, 3, 1, 2)]),
    }


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__)
        return 2
    work = Path(sys.argv[1])
    seconds = int(sys.argv[2]) if len(sys.argv) == 3 else 10
    clang = shutil.which("clang")
    exe = work / "fuzz_exif"
    work.mkdir(parents=True, exist_ok=True)
    build = [clang or "clang", "-std=c11", "-g", "-O1", "-fsanitize=fuzzer,address,undefined",
             "-fno-sanitize-recover=all", f"-I{REPO / 'runtime'}", str(REPO / "tests/security/harness/fuzz_exif.c"),
             str(REPO / "runtime/carve_io.c"), str(REPO / "runtime/carve_rt.c"), "-lstb", "-lpthreadpool", "-lm", "-o", str(exe)]
    if clang is None or subprocess.run(build, capture_output=True).returncode != 0:
        print("fuzz_exif: skipped (clang with libFuzzer, libstb or libpthreadpool not found)")
        return 0
    corpus, findings = work / "corpus-exif", work / "findings-exif"
    corpus.mkdir(exist_ok=True)
    findings.mkdir(exist_ok=True)
    for name, data in seeds().items():
        (corpus / f"seed-{name}").write_bytes(data)
    r = subprocess.run([exe, f"-max_total_time={seconds}", "-max_len=512", "-seed=1", "-timeout=10",
                        f"-artifact_prefix={findings}/", corpus])
    if r.returncode != 0:
        print(f"fuzz_exif: FAIL: a finding (status {r.returncode}), input in {findings}")
        return 1
    print(f"fuzz_exif: {seconds} s without a finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
