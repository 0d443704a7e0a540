"""Helpers of the firmware tests (tests/firmware/*.py): checkpoints, generation, builds, demo runs.

Checkpoints come from Ultralytics (tools/oracle.py make-checkpoint, fixed seed, cached in WORK/checkpoints-r<recipe>,
shared with the oracle tests); packages are generated with ./carve and built with the system's tools.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CARVE = REPO / "carve"
IMAGE = REPO / "assets" / "shapes-3.png"       # a held-out image of the demo model, 360x480
sys.path.insert(0, str(REPO / "tools"))


def log(msg: str) -> None:
    print(msg, flush=True)


def run(cmd, cwd=None, check=True, env=None) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    log("$ " + " ".join(cmd) + (f"    (in {cwd})" if cwd else ""))
    p = subprocess.run(cmd, cwd=cwd, text=True, capture_output=True, env=env)
    if check and p.returncode != 0:
        sys.stdout.write(p.stdout[-4000:])
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"firmware test: command failed with exit code {p.returncode}")
    return p


def checkpoint(work: Path, cfg: str = "yolo26n.yaml", half: bool = True) -> Path:
    """A random-weight Ultralytics checkpoint (realistic BN statistics), cached like run_oracle.py's; saved in
    float16 as Ultralytics saves them, or (half=False) in float32 (<name>-f32.pt)."""
    import oracle
    pt = oracle.checkpoint_dir(work.resolve()) / cfg.replace(".yaml", ".pt" if half else "-f32.pt")
    if not pt.exists():
        pt.parent.mkdir(parents=True, exist_ok=True)
        tmp = pt.with_suffix(".tmp.pt")
        oracle.make_checkpoint(cfg, tmp, seed=0, half=half)
        tmp.rename(pt)
    return pt


def generate(manifest: str, pt: Path, out: Path, *flags, backend: str = "xnnpack") -> Path:
    run([CARVE, "generate", REPO / "manifests" / manifest, "--backend", backend, "--weights", pt,
         "--out", out, "--force", *flags])
    return out


def cmake_build(src: Path, build: Path, *defs) -> None:
    run(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release", *defs])
    run(["cmake", "--build", build, "-j", "2"])


def demo_json(exe: Path, *args, cwd=None) -> dict:
    p = run([exe, IMAGE, "--json", *args], cwd=cwd)
    return json.loads(p.stdout)


def same_detections(a: dict, b: dict, tol: float = 0.0) -> bool:
    """The same detections (class, score, box), to within tol (0: exactly as printed)."""
    da, db = a.get("detections") or [], b.get("detections") or []
    if len(da) != len(db):
        return False
    for x, y in zip(da, db):
        if x["class_id"] != y["class_id"] or abs(x["score"] - y["score"]) > tol:
            return False
        if any(abs(p - q) > tol * 1000 for p, q in zip(x["box"], y["box"])):
            return False
    return True


class Timer:
    def __init__(self):
        self.t0 = time.time()

    def __str__(self):
        return f"{time.time() - self.t0:.0f} s"


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def env_without(*names) -> dict:
    return {k: v for k, v in os.environ.items() if k not in names}
