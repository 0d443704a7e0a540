"""Command line: ``carve generate | list``. The only module that touches the file system."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from . import __version__, faults
from .errors import CarveError

EPILOG = """examples:
  ./carve generate yolo26n.pt --backend xnnpack    # the manifest picked from the checkpoint's task and scale
  ./carve generate manifests/yolo26n.yaml --backend xnnpack --checkpoint yolo26n.pt
  ./carve generate manifests/yolo26n.yaml --backend xnnpack --checkpoint yolo26n.pt --imgsz 320 --out /tmp/pkg
  ./carve generate manifests/yolo26n.yaml --backend xnnpack --checkpoint yolo26n.pt --head nms --imgsz 640 480
  ./carve generate manifests/yolo26n.yaml --backend portable --checkpoint yolo26n.pt --imgsz 256 384 \\
      --weights file --weights-dtype f16 --out /tmp/pkg-fw
  ./carve generate manifests/yolo26n.yaml --backend portable --checkpoint yolo26n.pt --precision int8 \\
      --calib calib-images/
  ./carve generate manifests/yolo26n.yaml --backend cuda --checkpoint yolo26n.pt --precision fp16
  ./carve generate manifests/yolo26n-shapes.yaml manifests/yolo26n-cls.yaml --backend xnnpack \\
      --checkpoint shapes.pt --checkpoint cls.pt --out /tmp/two-models
  ./carve list

(installed with pip, the command is `carve`; manifests/ is then the copy inside the package.)
--weights takes either a weights format (blob, c-array, file) or, as a shorthand for --checkpoint, the
checkpoint's path: `--weights yolo26n.pt` and `--checkpoint yolo26n.pt` are the same.
"""
WEIGHT_FORMATS = ("blob", "c-array", "file")


def _progress():
    step = [0]

    def say(msg: str) -> None:
        step[0] += 1
        print(f"carve: [{step[0]}] {msg}", file=sys.stderr, flush=True)
    return say


def write_package(files: dict, out: Path, force: bool) -> None:
    """Write the package atomically, whether ``out`` is new or (with ``force``) an existing package.

    Every file is written into a temporary folder beside ``out``; files whose bytes did not change
    are copied from the old package with their time stamps (builds stay incremental). Then the
    user's ``build/`` folder is moved into the new tree, the old package is parked under a temporary
    name, and the new tree is renamed to ``out``. A failure at any step (disk full, interrupt, or an
    injected fault: carve.faults) puts the old package and its ``build/`` back and removes the
    temporary folders, so ``out`` is either the old package, untouched, or the new one, whole.
    Files of the old package that the new one lacks go away with it."""
    out = out.resolve()
    if out.exists() and not force:
        raise CarveError("output folder exists", location=str(out), hint="pass --force to update it")
    if out.exists() and not out.is_dir():
        raise CarveError("output path exists and is not a folder", location=str(out))
    for rel in files:
        parts = Path(rel).parts
        if Path(rel).is_absolute() or not parts or ".." in parts:
            raise CarveError(f"refusing to write '{rel}' outside the package", location=str(out))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.new.", dir=out.parent))
    except OSError as exc:
        raise CarveError(f"cannot create the package folder: {exc.strerror or exc}", location=str(out)) from None
    parked = None      # the old package's temporary name, once it has been moved there
    moved_build = False
    try:
        for rel, data in sorted(files.items()):
            faults.point(f"write:{rel}")
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            prev = out / rel
            if prev.is_file() and prev.stat().st_size == len(data) and prev.read_bytes() == data:
                shutil.copy2(prev, p)  # unchanged: keep its time stamp so builds stay incremental
            else:
                p.write_bytes(data)
        faults.point("chmod")
        os.chmod(tmp, 0o755)
        if out.exists():
            faults.point("keep-build")
            if (out / "build").is_dir():
                os.rename(out / "build", tmp / "build")  # the user's build folder stays with the package
                moved_build = True
            faults.point("park-old")
            parked = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.rename(out, parked)  # replaces the empty folder mkdtemp made
        faults.point("rename")
        os.rename(tmp, out)
    except BaseException as exc:
        if parked is not None and not out.exists():
            os.rename(parked, out)
            parked = None
        if moved_build and (tmp / "build").is_dir() and not (out / "build").exists():
            os.rename(tmp / "build", out / "build")
        shutil.rmtree(tmp, ignore_errors=True)
        if parked is not None:
            shutil.rmtree(parked, ignore_errors=True)
        if isinstance(exc, OSError):
            raise CarveError(f"cannot write the package: {exc.strerror or exc}", location=str(out),
                             hint="nothing was changed") from None
        raise
    if parked is not None:
        shutil.rmtree(parked, ignore_errors=True)


def cmd_generate(args) -> int:
    """Checks that need no compile come first, in this order, so that the first error a user sees is the
    real one: the arguments, the manifest (given, or picked from the checkpoint), the backend and input
    size, then the output folder (when it exists, after the checkpoint's task, architecture and scale against
    the manifest); then the compile."""
    if getattr(args, "precision", None) == "int8" and "numpy" not in sys.modules:
        # The int8 pass runs thousands of small numpy matrix products; OpenBLAS's spinning worker threads make them
        # up to 10x slower on a busy machine. One thread, unless the user set OPENBLAS_NUM_THREADS (read by
        # OpenBLAS when numpy is first imported, just below).
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from .checkpoint import Checkpoint, read_checkpoint
    from .compiler import check_backend, check_checkpoint, compile_model, infer_manifest, precision_options
    from .manifest import load_manifest, looks_like_checkpoint
    from .quant.images import list_images
    say = _progress()
    precision_options(dict(precision_args(args), weights_dtype=args.weights_dtype))  # --precision / --calib first
    if len(args.manifest) > 1 and args.batch != 1:
        raise CarveError(f"--batch {args.batch}: one model per package (several manifests given)",
                         hint="generate the model on its own with --backend cuda --batch N")
    if len(args.manifest) > 1:  # several models in one package: carve.multi
        if args.precision == "int8":
            raise CarveError("--precision int8: one model per package for now (several manifests given)",
                             hint="generate each model on its own with --precision int8")
        from .multi import cmd_generate_multi
        return cmd_generate_multi(args, say)
    args.manifest = args.manifest[0] if args.manifest else None
    if args.manifest and looks_like_checkpoint(args.manifest) and not args.checkpoint and not any(
            w not in WEIGHT_FORMATS for w in args.weights or []):
        args.checkpoint, args.manifest = [args.manifest], None  # `carve generate model.pt --backend B`
    checkpoint, weights_format = resolve_weights_args(args)
    options = {"weights_format": weights_format, "weights_dtype": args.weights_dtype, **head_args(args),
               **precision_args(args), "batch": args.batch}
    if args.imgsz is not None and len(args.imgsz) > 2:
        raise CarveError(f"--imgsz {' '.join(map(str, args.imgsz))}: give one size (square) or HEIGHT WIDTH")
    weights = checkpoint
    if args.manifest is None:
        say(f"reading weights {checkpoint}")
        weights = read_checkpoint(checkpoint)
        args.manifest = infer_manifest(weights)
        say(f"no manifest given: {args.manifest} (the checkpoint's task and scale)")
    manifest = load_manifest(args.manifest)
    be = check_backend(manifest, args.backend)
    if options.get("precision") in ("int8", "fp16"):
        be.check_precision(options["precision"])  # int8 on cuda, fp16 on the CPU backends: before anything is read
    if options.get("precision") == "int8":
        list_images(options["calib"])     # the folder exists and holds files: before the (long) compile
    out = Path(args.out) if args.out else Path.cwd() / "generated" / f"{manifest.name}-{args.backend}"
    if out.exists() and not args.force:  # refuse before the (long) compile
        if not isinstance(weights, Checkpoint):  # but after a checkpoint that does not fit the manifest: the real error
            say(f"reading weights {checkpoint}")
            weights = read_checkpoint(checkpoint)
        check_checkpoint(manifest, weights)
        raise CarveError("output folder exists", location=str(out), hint="pass --force to update it")
    result = compile_model(args.manifest, args.backend, weights, args.imgsz, options, progress=say)
    say(f"writing {len(result.files)} files to {out}")
    write_package(result.files, out, args.force)
    s = result.summary
    for w in s.get("warnings", []):
        print(f"carve: warning: {w}", file=sys.stderr)
    for line in quant_summary_lines(s.get("quant")):
        print(f"carve: {line}", file=sys.stderr)
    for w in (s.get("quant") or {}).get("warnings", []):
        print(f"carve: warning: {w}", file=sys.stderr)
    print(f"carve: generated {out} ({s['ops']} ops, imgsz {s['imgsz']}, "
          f"weights {s['weight_bytes'] / 2**20:.1f} MiB, arena {s['arena_bytes'] / 2**20:.1f} MiB, "
          f"{s['seconds']:.1f} s)")
    return 0


def quant_summary_lines(q) -> list:
    """The generation summary of an int8 package: the counts, then every op that stays in float32 and why (with
    its measured error), then the int8 ops with the largest error (quant.json has every op)."""
    if not q:
        return []
    limits = ", ".join(f"{c} {db:g} dB" for c, db in q["thresholds_db"].items())
    measured = ", ".join(f"{c} {'no error' if db is None else f'{db:.1f} dB'}" for c, db in q["measured_db"].items())
    lines = [f"int8: {q['int8_ops']} of {q['quantizable_ops']} conv/add ops in int8 ({q['float_flops_share']:.1%} "
             f"of their FLOPs in float32), calibrated on {q['images']} images ({q['estimator']} ranges); measured "
             f"at the decoded outputs: {measured} (thresholds {limits}); quant.json has every op's errors and every "
             "tensor's scale and zero point"]
    for name, kind, reason in q["float_ops"]:
        lines.append(f"  float32 {name} ({kind}): {reason}")
    if q["worst"]:
        worst = ", ".join(f"{n} {db:.1f} dB" for db, n in q["worst"])
        lines.append(f"  largest int8 errors (alone, worst criterion): {worst}")
    return lines


def precision_args(args) -> dict:
    """--precision and --calib as compile options (compiler.precision_options checks them)."""
    out = {}
    if getattr(args, "precision", None) is not None:
        out["precision"] = args.precision
    if getattr(args, "calib", None) is not None:
        out["calib"] = args.calib
    return out


def head_args(args) -> dict:
    """The head options given on the command line (compiler.head_options checks and completes them)."""
    out = {}
    if args.head is not None:
        out["head"] = args.head
    if args.iou is not None:
        out["iou"] = args.iou
    if args.agnostic:
        out["agnostic"] = True
    return out


def resolve_weights_args(args, models: int = 1) -> tuple:
    """(checkpoint path, weights format) from --checkpoint, --weights (a format or a checkpoint path) and
    --weights-format; a value given twice in different ways is an error, not a silent pick. With ``models``
    > 1 manifests: (the list of their checkpoints, one per manifest in order, weights format)."""
    checkpoints = list(args.checkpoint or [])
    formats = [args.weights_format] if args.weights_format else []
    for value in args.weights or []:
        if value in WEIGHT_FORMATS:
            if not args.checkpoint and Path(value).exists():  # with --checkpoint, a keyword is the format
                raise CarveError(f"--weights {value}: '{value}' is both a weights format and a file here",
                                 hint=f"for the checkpoint write --checkpoint ./{value}; for the format, "
                                      f"--weights-format {value}")
            formats.append(value)
        else:
            checkpoints.append(value)
    if not checkpoints:
        raise CarveError("no checkpoint given", hint="pass --checkpoint MODEL.pt (or --weights MODEL.pt)")
    if models > 1 and len(checkpoints) != models:
        raise CarveError(f"{models} manifests and {len(checkpoints)} checkpoint(s) given",
                         hint="pass one --checkpoint per manifest, in the manifests' order")
    if models == 1 and len(set(checkpoints)) > 1:
        raise CarveError(f"two checkpoints given: {', '.join(checkpoints)}", hint="pass one --checkpoint")
    if len(set(formats)) > 1:
        raise CarveError(f"two weights formats given: {', '.join(formats)}",
                         hint=f"pass one of {', '.join(WEIGHT_FORMATS)}")
    return checkpoints[0] if models == 1 else checkpoints, formats[0] if formats else "blob"


def cmd_list(args) -> int:
    from .backends import available_backends
    from .manifest import format_hw, load_manifest, manifests_dir
    from .manifest import HEADS
    backends = [b.name for b in available_backends()]
    all_names = ["xnnpack", "cuda", "portable"]
    rows = []
    for path in sorted(manifests_dir().glob("*.yaml")):
        m = load_manifest(path)
        heads = "-" if m.task == "classify" else ",".join([m.head] + [h for h in HEADS if h != m.head])
        rows.append((m.name, m.task, format_hw(m.imgsz), heads, [
            ("yes" if b in m.backends and b in backends else
             "planned" if b in m.backends else "-") for b in all_names]))
    w = max([len(r[0]) for r in rows] + [5])
    print(f"{'model':<{w}}  {'task':<8}  {'imgsz':>5}  {'heads':<7}  " + "  ".join(f"{b:<8}" for b in all_names))
    for name, task, imgsz, heads, cells in rows:
        print(f"{name:<{w}}  {task:<8}  {imgsz:>5}  {heads:<7}  " + "  ".join(f"{c:<8}" for c in cells))
    print("\nheads: the manifest's default first (--head picks the other): e2e = one-to-one head + top-k "
          "(Ultralytics' predict(nms=False)), nms = one-to-many head + NMS (Ultralytics' default predict)")
    print("yes: supported; planned: declared by the manifest, backend not built yet; -: refused")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="carve", description="carve: compile YOLO26 checkpoints into standalone C packages.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"carve {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="show a traceback on errors")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    g = sub.add_parser("generate", help="generate a package for one model and backend",
                       description="Generate a standalone package from a manifest and an Ultralytics checkpoint.")
    g.add_argument("manifest", nargs="*",
                   help="model manifest (manifests/*.yaml); a checkpoint here (or none, with --checkpoint) picks the "
                        "shipped manifest from the checkpoint's task and scale; several manifests: one package of "
                        "several models sharing one runtime (one --checkpoint each, in order; docs/firmware.md)")
    g.add_argument("--backend", required=True, help="target backend (see 'carve list')")
    g.add_argument("--checkpoint", metavar="PT", action="append",
                   help="Ultralytics .pt checkpoint or .safetensors: the trained weights (read, never executed)")
    g.add_argument("--weights", action="append", metavar="FORMAT|PT",
                   help="how the package carries its weights: blob (an assembler .incbin, default), c-array (a C "
                        "array), or file (<name>.weights, read at create from a path or a caller's buffer: magic, "
                        "version, size, CRC-32 checked); any other value is the checkpoint (= --checkpoint)")
    g.add_argument("--out", help="output folder (default: generated/<model>-<backend> in the current directory; "
                   "several models: generated/<model>+<model>...-<backend>)")
    g.add_argument("--imgsz", type=int, nargs="+", metavar="SIZE",
                   help="input size, multiples of 32: one value (square) or HEIGHT WIDTH (default: the manifest's)")
    g.add_argument("--weights-format", choices=WEIGHT_FORMATS, help="the same as --weights FORMAT")
    g.add_argument("--weights-dtype", choices=("f32", "f16"), default="f32",
                   help="weight storage: float32 (default), or f16: the checkpoint's float16 tensors as they are "
                        "(about half the bytes), from which create rebuilds the f32 package's weights bit for bit "
                        "(a checkpoint that is not float16: rounded, with a warning)")
    g.add_argument("--head", choices=("e2e", "nms"),
                   help="box models: e2e, the one-to-one head and its top-k (Ultralytics' predict(nms=False)), or "
                        "nms, the one-to-many head and non-maximum suppression (what Ultralytics' predict() runs by "
                        "default); default: the manifest's `head` (e2e)")
    g.add_argument("--iou", type=float, metavar="X",
                   help="--head nms: the IoU threshold of the suppression, in [0, 1] (default 0.7, Ultralytics')")
    g.add_argument("--agnostic", action="store_true",
                   help="--head nms: class-agnostic suppression (Ultralytics' agnostic_nms)")
    g.add_argument("--batch", type=int, default=1, metavar="N",
                   help="--backend cuda: images per run (default 1): run_images / enqueue_* take N images, every "
                        "layer runs once for all of them, in one CUDA Graph (every task, either head; fp32 and fp16)")
    g.add_argument("--precision", choices=("fp32", "int8", "fp16"),
                   help="fp32 (default); int8 (portable, xnnpack): static post-training quantization from --calib "
                        "images (int8 weights per output channel, int8 activations per tensor, int32 accumulation; "
                        "the layers that lose too much stay float32: docs/quantization.md); fp16 (cuda, every task): "
                        "half weights (stored as --weights-dtype f16) and activations, float32 "
                        "accumulation on tensor cores, the head's post-processing and the outputs in float32 "
                        "(docs/backends/cuda.md#fp16)")
    g.add_argument("--calib", metavar="DIR",
                   help="--precision int8: a folder of calibration images (at least 32, the first 200 by name "
                        "are used; JPEG, PNG, BMP, ... as the demo reads them)")
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
    except OSError as e:  # a file-system failure no reader turned into a CarveError (disk full, ...)
        if args.verbose:
            traceback.print_exc()
        where = f"{e.filename}: " if e.filename else ""
        print(f"carve: error: {where}{e.strerror or e} (hint: nothing was written)", file=sys.stderr)
        return 1
