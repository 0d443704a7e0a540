#!/usr/bin/env python3
"""Compare carve_image_load_rgb on Exif-rotated JPEGs with cv2.imread (which Ultralytics uses).

Usage: exif_vs_cv2.py PATH/TO/exif_tool

Writes one non-square JPEG (quadrants of four colours and a gradient, so every
mirror and rotation looks different) with each Exif orientation 1..8, in both
TIFF byte orders: little-endian through Pillow's Image.Exif, big-endian ("MM")
through an APP1 segment built here and spliced after SOI. Also one Exif block
with the tag in a later IFD entry, and one damaged (IFD offset past the end,
which both decoders must read as orientation 1). For each file carve's pixels
must have cv2's shape and match them within JPEG-decoder tolerance (mean
absolute difference <= 2 uint8 units; libjpeg-turbo and stb_image upsample
chroma differently) and match no other orientation as well. Exits 0 with
'skipped' when cv2, numpy or PIL is missing.
"""

import io
import os
import struct
import subprocess
import sys
import tempfile

try:
    import cv2
    import numpy as np
    from PIL import Image
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"exif_vs_cv2: skipped ({e})")
    sys.exit(0)

H, W = 48, 80
MAX_MEAN_DIFF = 2.0


def make_image():
    img = np.zeros((H, W, 3), np.uint8)
    img[: H // 2, : W // 2] = (230, 30, 30)
    img[: H // 2, W // 2:] = (30, 200, 40)
    img[H // 2:, : W // 2] = (40, 60, 220)
    img[H // 2:, W // 2:] = (240, 230, 50)
    img[:, :, 2] = np.clip(img[:, :, 2].astype(int) + np.arange(W)[None, :], 0, 255)
    img[2:8, 2:14] = 255  # a white mark near the stored top-left corner
    return img


def jpeg_bytes(img, exif=None):
    buf = io.BytesIO()
    kw = {"exif": exif} if exif is not None else {}
    Image.fromarray(img).save(buf, format="JPEG", quality=95, **kw)
    return buf.getvalue()


def app1_exif(entries, byteorder):
    """An APP1 segment holding a TIFF block with IFD0 = entries [(tag, type, count, value)]."""
    e = "<" if byteorder == "II" else ">"
    tiff = byteorder.encode() + struct.pack(e + "HI", 42, 8) + struct.pack(e + "H", len(entries))
    for tag, typ, count, value in entries:
        tiff += struct.pack(e + "HHI", tag, typ, count) + struct.pack(e + "HH", value, 0)
    tiff += struct.pack(e + "I", 0)
    payload = b"Exif\0\0" + tiff
    return b"\xFF\xE1" + struct.pack(">H", len(payload) + 2) + payload


def spliced(plain_jpeg, segment):
    assert plain_jpeg[:2] == b"\xFF\xD8"
    return plain_jpeg[:2] + segment + plain_jpeg[2:]


def orient(img, o):
    """What a viewer shows for stored pixels img with Exif orientation o (PIL's ImageOps.exif_transpose table)."""
    method = {2: Image.FLIP_LEFT_RIGHT, 3: Image.ROTATE_180, 4: Image.FLIP_TOP_BOTTOM, 5: Image.TRANSPOSE,
              6: Image.ROTATE_270, 7: Image.TRANSVERSE, 8: Image.ROTATE_90}.get(o)
    return img if method is None else np.asarray(Image.fromarray(img).transpose(method))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    img = make_image()
    plain = jpeg_bytes(img)
    cases = []  # (name, bytes, expected orientation)
    for o in range(1, 9):
        ex = Image.Exif()
        ex[0x0112] = o
        cases.append((f"pil_ii_o{o}", jpeg_bytes(img, ex.tobytes()), o))
        cases.append((f"mm_o{o}", spliced(plain, app1_exif([(0x0112, 3, 1, o)], "MM")), o))
    cases.append(("ii_third_entry_o6", spliced(plain, app1_exif(
        [(0x010F, 2, 1, 0), (0x0110, 2, 1, 0), (0x0112, 3, 1, 6)], "II")), 6))
    bad = bytearray(app1_exif([(0x0112, 3, 1, 6)], "II"))
    bad[4 + 6 + 4: 4 + 6 + 8] = struct.pack("<I", 0xFFFFFF00)  # IFD0 offset far past the block
    cases.append(("ii_bad_ifd_offset", spliced(plain, bytes(bad)), 1))

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        args = [tool]
        for name, data, _ in cases:
            path = os.path.join(tmp, name + ".jpg")
            with open(path, "wb") as f:
                f.write(data)
            args += [path, os.path.join(tmp, name)]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"exif_vs_cv2: FAIL: exif_tool: {r.stdout}{r.stderr}")
            return 1
        for name, _, o in cases:
            ref = cv2.imread(os.path.join(tmp, name + ".jpg"), cv2.IMREAD_COLOR)[:, :, ::-1].astype(np.float32)
            got = np.load(os.path.join(tmp, name + ".npy"))
            expect_shape = (W, H, 3) if o >= 5 else (H, W, 3)
            if ref.shape != expect_shape:  # the oracle itself must have rotated the file
                print(f"  {name}: cv2 gave {ref.shape}, expected {expect_shape}: test data broken")
                failures += 1
                continue
            if got.shape != ref.shape:
                print(f"  {name}: carve {got.shape} vs cv2 {ref.shape}")
                failures += 1
                continue
            diff = float(np.abs(got - ref).mean())
            others = [float(np.abs(got - orient(img, k).astype(np.float32)).mean())
                      for k in range(1, 9) if k != o and orient(img, k).shape == got.shape]
            ok = diff <= MAX_MEAN_DIFF and all(d > 4 * MAX_MEAN_DIFF for d in others)
            print(f"  {name}: {got.shape[1]}x{got.shape[0]}, mean |carve - cv2| {diff:.3f}, "
                  f"nearest other orientation {min(others):.1f} {'ok' if ok else 'FAIL'}")
            failures += not ok
    print(f"exif_vs_cv2: {len(cases)} files, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
