#!/usr/bin/env python3
"""The generated demo as a new user meets it (issue 18, item 5), on the shipped demo model (no torch needed).

    frictions.py --work build/work --part setup|images|out|moved

yolo26n-shapes at imgsz 64, --weights-format file, built with its CMakeLists.txt (--part setup: the package the
images and out parts share, in WORK/demo-frictions/pkg); then one part:

1. moved: a copy of the package, built in its own folder, then that folder moved elsewhere (the folder it was
   built in gone): it still runs, from its build/
   folder, with the same detections; its demo copied alone into another folder runs with the weights beside it, or
   in the working directory; with them nowhere it fails (exit 1) listing each path it looked at (beside the
   executable, its parent folder, the package folder it was built from, the working directory) and the --weights
   hint; a --weights FILE that does not exist is named in the error;
2. images: a missing file, a text file, a WebP and a TIFF header, an empty file and a truncated JPEG and PNG each
   fail with exit 1, the image's path and the reason (cannot open / unsupported format: <name> / corrupt or
   truncated <format>);
3. --out: .png, .jpg, .JPEG, .bmp and .tga write that format (the JPEG within a few levels of the PNG, the others
   identical to it); .gif and a name without an extension are refused before anything runs (exit 2, nothing
   written, no detections printed); --out / --coco with --input, and both an image and --input, are refused;
   --coco on an image whose name is not a number asks for --image-id; a folder that does not exist is named.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "firmware"))
import fwlib  # noqa: E402
from fwlib import IMAGE, REPO, log, run  # noqa: E402

NAME = "yolo26n_shapes"
WEIGHTS = f"{NAME}.weights"


def check(ok: bool, what: str) -> bool:
    log(f"  {'ok  ' if ok else 'FAIL'} {what}")
    return ok


def detections(exe: Path, *args, cwd=None) -> list:
    return fwlib.demo_json(exe, *args, cwd=cwd)["detections"]


def moved(work: Path, setup: Path, ref: list) -> bool:
    log("moved package")
    built = work / "built"
    shutil.copytree(setup, built, ignore=shutil.ignore_patterns("build"))
    fwlib.cmake_build(built, built / "build")
    pkg = work / "elsewhere" / "pkg"
    pkg.parent.mkdir()
    shutil.move(str(built), str(pkg))  # the folder the build was configured in is gone
    demo = pkg / "build" / f"{NAME}_demo"
    ok = check(detections(demo, cwd=work) == ref, "the moved package's demo: the weights in its parent folder")
    ship = work / "ship"
    ship.mkdir()
    shutil.copy(demo, ship)
    shutil.copy(pkg / WEIGHTS, ship)
    ok &= check(detections(ship / f"{NAME}_demo", cwd=work) == ref, "the demo copied with the weights beside it")
    (ship / WEIGHTS).unlink()
    here = work / "cwd"
    here.mkdir()
    shutil.move(str(pkg / WEIGHTS), str(here / WEIGHTS))
    ok &= check(detections(ship / f"{NAME}_demo", cwd=here) == ref, "... with the weights in the working directory")
    p = run([ship / f"{NAME}_demo", IMAGE], cwd=work, check=False)
    tried = [ship / WEIGHTS, work / WEIGHTS, built / WEIGHTS, f"./{WEIGHTS}"]
    ok &= check(p.returncode == 1 and f"cannot find the weights file {WEIGHTS}" in p.stderr and
                all(f"  {t}\n" in p.stderr for t in tried) and "--weights FILE" in p.stderr,
                f"nowhere: exit {p.returncode}, every path named:\n{p.stderr.rstrip()}")
    missing = work / "nothere.weights"
    p = run([ship / f"{NAME}_demo", IMAGE, "--weights", missing], check=False)
    ok &= check(p.returncode == 1 and str(missing) in p.stderr and "create failed" in p.stderr,
                f"--weights FILE missing: exit {p.returncode}, {p.stderr.strip()}")
    shutil.move(str(here / WEIGHTS), str(pkg / WEIGHTS))
    return ok


def bad_images(work: Path, demo: Path) -> bool:
    log("images that cannot be read")
    folder = work / "images"
    folder.mkdir()
    png = folder / "good.png"
    shutil.copy(IMAGE, png)
    jpg = folder / "good.jpg"
    run([demo, png, "--out", jpg])
    cases = {
        "missing.jpg": (None, "cannot open: No such file or directory"),
        "notes.jpg": (b"these are notes, not an image\n", "unsupported format: not an image stb_image reads"),
        "photo.webp": (b"RIFF\x24\0\0\0WEBPVP8 \x18\0\0\0" + bytes(24), "unsupported format: WebP"),
        "scan.tif": (b"II*\0\x08\0\0\0" + bytes(16), "unsupported format: TIFF"),
        "empty.png": (b"", "empty file"),
        "cut.jpg": (jpg.read_bytes()[: jpg.stat().st_size // 3], "corrupt or truncated JPEG"),
        "cut.png": (png.read_bytes()[: png.stat().st_size // 3], "corrupt or truncated PNG"),
    }
    ok = True
    for name, (data, reason) in cases.items():
        path = folder / name
        if data is not None:
            path.write_bytes(data)
        p = run([demo, path], check=False)
        ok &= check(p.returncode == 1 and f"cannot read image {path}: {reason}" in p.stderr and not p.stdout,
                    f"{name}: exit {p.returncode}, {p.stderr.strip()}")
    return ok


def out_formats(work: Path, demo: Path) -> bool:
    log("--out")
    from PIL import Image
    folder = work / "out"
    folder.mkdir()
    ok = True
    png = folder / "a.png"
    run([demo, IMAGE, "--out", png])
    ref = np.asarray(Image.open(png).convert("RGB"))
    magic = {".png": b"\x89PNG", ".jpg": b"\xff\xd8\xff", ".JPEG": b"\xff\xd8\xff", ".bmp": b"BM", ".tga": b""}
    for ext, head in magic.items():
        path = folder / f"b{ext}"
        p = run([demo, IMAGE, "--out", path])
        data = path.read_bytes()
        img = np.asarray(Image.open(path).convert("RGB"))
        diff = np.abs(img.astype(int) - ref.astype(int)).mean() if img.shape == ref.shape else 1e9
        lossy = ext.lower() in (".jpg", ".jpeg")
        good = data.startswith(head) and (diff < 4 if lossy else diff == 0)
        ok &= check(good and f"wrote {path}" in p.stdout, f"--out b{ext}: {data[:4]!r}..., mean difference from the "
                    f"PNG {diff:.3f}")
    for name in ("c.gif", "noextension"):
        path = folder / name
        p = run([demo, IMAGE, "--out", path], check=False)
        ok &= check(p.returncode == 2 and "--out: cannot write this image format" in p.stderr and not p.stdout
                    and not path.exists(), f"--out {name}: exit {p.returncode}, nothing run or written: "
                    f"{p.stderr.strip()}")
    p = run([demo, IMAGE, "--out", folder / "missing" / "d.png"], check=False)
    ok &= check(p.returncode == 1 and f"cannot write {folder / 'missing' / 'd.png'}" in p.stderr,
                f"--out into a missing folder: exit {p.returncode}, {p.stderr.strip()}")
    tensor = folder / "input.npy"
    np.save(tensor, np.zeros((1, 3, 64, 64), np.float32))
    refusals = {
        "--out with --input": (["--input", tensor, "--out", folder / "e.png"], "--out needs an image, not --input"),
        "--coco with --input": (["--input", tensor, "--coco", folder / "r.json"], "--coco needs an image, not --input"),
        "an image and --input": ([IMAGE, "--input", tensor], "give an image or --input, not both"),
        "--coco, no image id": ([IMAGE, "--coco", folder / "r.json"], "--coco needs the image's COCO image_id"),
        "--image-id -3": ([IMAGE, "--coco", folder / "r.json", "--image-id", "-3"], "--image-id expects"),
    }
    for what, (args, words) in refusals.items():
        p = run([demo, *args], check=False)
        ok &= check(p.returncode == 2 and words in p.stderr and not p.stdout, f"{what}: exit {p.returncode}, "
                    f"{p.stderr.strip()}")
    ok &= check(not list(folder.glob("*.tmp")) and not (folder / "r.json").exists(), "no file left behind")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--part", required=True, choices=("setup", "images", "out", "moved"))
    args = ap.parse_args()
    t = fwlib.Timer()
    root = args.work.resolve() / "demo-frictions"
    pkg = root / "pkg"
    demo = pkg / "build" / f"{NAME}_demo"
    if args.part == "setup":
        fwlib.fresh(root)
        fwlib.generate("yolo26n-shapes.yaml", REPO / "assets" / "yolo26n-shapes.pt", pkg, "--imgsz", "64",
                       "--weights-format", "file")
        fwlib.cmake_build(pkg, pkg / "build")
        log(f"demo_frictions_setup: built {demo} ({t})")
        return 0
    if not demo.is_file():
        sys.exit(f"demo_frictions: no {demo}: run --part setup first (ctest: demo_frictions_setup)")
    work = fwlib.fresh(root / args.part)
    ref = detections(demo, cwd=work)
    ok = check(len(ref) > 0, f"{len(ref)} detections on {IMAGE.name}")
    ok &= {"images": bad_images, "out": out_formats}[args.part](work, demo) if args.part != "moved" else \
        moved(work, pkg, ref)
    shutil.rmtree(work, ignore_errors=True)
    log(f"demo_frictions_{args.part}: {'PASS' if ok else 'FAIL'} ({t})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
