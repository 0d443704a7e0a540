"""Command line: ``carve generate | list``. The only module that touches the file system."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from . import __version__
from .errors import CarveError

ROOT = Path(__file__).resolve().parents[2]
EPILOG = """examples:
  ./carve generate manifests/yolo26n.yaml --backend xnnpack --weights yolo26n.pt
  ./carve generate manifests/yolo26n.yaml --backend xnnpack --weights yolo26n.pt --imgsz 320 --out /tmp/pkg
  ./carve list
"""


def _progress():
    step = [0]

    def say(msg: str) -> None:
        step[0] += 1
        print(f"carve: [{step[0]}] {msg}", file=sys.stderr, flush=True)
    return say


def write_package(files: dict, out: Path, force: bool) -> None:
    """Write atomically: a new folder appears whole (temp folder + rename); an existing one
    (only with --force) has each changed file replaced atomically and stale files removed."""
    out = out.resolve()
    if out.exists() and not force:
        raise CarveError("output folder exists", location=str(out), hint="pass --force to update it")
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            for rel, data in sorted(files.items()):
                p = tmp / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
            os.chmod(tmp, 0o755)
            os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return
    for rel, data in sorted(files.items()):
        p = out / rel
        if p.is_file() and p.read_bytes() == data:
            continue  # unchanged: keep its time stamp so builds stay incremental
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    wanted = {str(Path(r)) for r in files}
    for p in sorted(out.rglob("*"), reverse=True):
        rel = str(p.relative_to(out))
        if p.is_file() and rel not in wanted and rel.split(os.sep)[0] != "build":  # keep the user's build/
            p.unlink()


def cmd_generate(args) -> int:
    from .compiler import compile_model
    from .manifest import load_manifest
    say = _progress()
    options = {"weights_format": args.weights_format}
    out = Path(args.out) if args.out else ROOT / "generated" / f"{load_manifest(args.manifest).name}-{args.backend}"
    if out.exists() and not args.force:  # refuse before the (long) compile
        raise CarveError("output folder exists", location=str(out), hint="pass --force to update it")
    result = compile_model(args.manifest, args.backend, args.weights, args.imgsz, options, progress=say)
    say(f"writing {len(result.files)} files to {out}")
    write_package(result.files, out, args.force)
    s = result.summary
    print(f"carve: generated {out} ({s['ops']} ops, imgsz {s['imgsz']}, "
          f"weights {s['weight_floats'] * 4 / 2**20:.1f} MiB, arena {s['arena_bytes'] / 2**20:.1f} MiB, "
          f"{s['seconds']:.1f} s)")
    return 0


def cmd_list(args) -> int:
    from .backends import available_backends
    from .manifest import load_manifest
    backends = [b.name for b in available_backends()]
    all_names = ["xnnpack", "cuda", "portable"]
    rows = []
    for path in sorted((ROOT / "manifests").glob("*.yaml")):
        m = load_manifest(path)
        rows.append((m.name, m.task, m.imgsz, [
            ("yes" if b in m.backends and b in backends else
             "planned" if b in m.backends else "-") for b in all_names]))
    w = max([len(r[0]) for r in rows] + [5])
    print(f"{'model':<{w}}  {'task':<8}  {'imgsz':>5}  " + "  ".join(f"{b:<8}" for b in all_names))
    for name, task, imgsz, cells in rows:
        print(f"{name:<{w}}  {task:<8}  {imgsz:>5}  " + "  ".join(f"{c:<8}" for c in cells))
    print("\nyes: supported; planned: declared by the manifest, backend not built yet; -: refused")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="carve", description="carve: compile YOLO26 checkpoints into standalone C packages.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"carve {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="show a traceback on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    g = sub.add_parser("generate", help="generate a package for one model and backend",
                       description="Generate a standalone package from a manifest and an Ultralytics checkpoint.")
    g.add_argument("manifest", help="model manifest (manifests/*.yaml)")
    g.add_argument("--backend", required=True, help="target backend (see 'carve list')")
    g.add_argument("--weights", required=True, help="Ultralytics .pt checkpoint or .safetensors (never executed)")
    g.add_argument("--out", help="output folder (default: generated/<model>-<backend>)")
    g.add_argument("--imgsz", type=int, help="square input size, a multiple of 32 (default: the manifest's)")
    g.add_argument("--weights-format", choices=("blob", "c-array"), default="blob",
                   help="link weights with an assembler .incbin (blob, default) or as a C array")
    g.add_argument("--force", action="store_true", help="update an existing output folder")
    g.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                   help="show a traceback on errors")
    g.set_defaults(func=cmd_generate)
    ls = sub.add_parser("list", help="show the models x backends support matrix")
    ls.set_defaults(func=cmd_list)
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    try:
        return args.func(args)
    except CarveError as e:
        if args.verbose:
            traceback.print_exc()
        print(f"carve: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("carve: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `carve list | head`
        sys.stderr.close()
        return 0
