"""Several models in one package: ``carve generate A.yaml B.yaml ... --backend B``.

Composition, not a second pipeline: each model is compiled alone by ``compiler.compile_model`` (its
``{path: bytes}``), then

  * its own files (``<name>.h``, ``<name>.c``, ``<name>_demo.c``, weights) are taken as they are, each
    model's API under its own prefix (its C name: ``yolo26n_shapes_*``, ``yolo26n_cls_*``);
  * its README becomes ``<name>.md`` (its API, sizes and one-model builds still hold in the shared folder);
  * ``runtime/`` is the union of the models' runtime files, which must be byte-identical where they
    overlap (one carve copies one runtime);
  * one ``CMakeLists.txt`` (templates/common/CMakeLists_multi.txt.j2: one ``carve_runtime`` target, one
    library and one demo per model) and one ``README.md`` (README_multi.md.j2) list the models.

Refused before anything is compiled, every problem at once: one manifest given twice, two models with one C
name, models of different backends, a count of checkpoints other than the count of manifests, and the cuda
backend (its packages build the device runtime into the model library; see docs/backends/cuda.md).
Pure like the compiler: returns ``{path: bytes}``; only the CLI writes.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__
from .backends import get_backend
from .backends.emit_c import _env, c_ident, runtime_abi
from .compiler import _noop, compile_model
from .errors import CarveError
from .manifest import load_manifest

# Backends whose packages can share one runtime (their CMakeLists_base.txt.j2 defines carve_runtime).
SHARED_RUNTIME_BACKENDS = ("xnnpack", "portable")


@dataclass
class ModelSpec:
    manifest: str           # manifest path
    checkpoint: str         # weights path
    backend: str


@dataclass
class MultiResult:
    models: list                    # compiler.Result of each model, in the order given
    files: dict                     # relative path -> bytes
    summary: dict = field(default_factory=dict)


def check_specs(specs: list) -> list:
    """The manifests of ``specs``, loaded; every reason they cannot share one package is raised at once."""
    if len(specs) < 2:
        raise CarveError("several models in one package need at least two manifests")
    problems = []
    backends = sorted({s.backend for s in specs})
    if len(backends) > 1:
        problems.append(f"the models name different backends ({', '.join(backends)}): one package has one runtime "
                        "build; generate one package per backend")
    for b in backends:
        if b not in SHARED_RUNTIME_BACKENDS:
            problems.append(f"--backend {b}: several models in one package are supported for "
                            f"{', '.join(SHARED_RUNTIME_BACKENDS)} only (a {b} package builds its runtime into the "
                            "model library); generate one package per model")
    seen_paths: dict = {}
    for s in specs:
        key = Path(s.manifest).resolve()
        if key in seen_paths:
            also = f" (also as {seen_paths[key]})" if seen_paths[key] != s.manifest else ""
            problems.append(f"{s.manifest}: given twice{also}")
        seen_paths.setdefault(key, s.manifest)
    manifests = [load_manifest(s.manifest) for s in specs]
    by_name: dict = {}
    for s, m in zip(specs, manifests):
        name = c_ident(m.name)
        if name in by_name and Path(by_name[name]).resolve() != Path(s.manifest).resolve():
            problems.append(f"{s.manifest}: model C name '{name}' is also the name of {by_name[name]} (each model's "
                            "API is prefixed by its name; rename one in its manifest)")
        by_name.setdefault(name, s.manifest)
    if problems:
        raise CarveError(f"cannot put these {len(specs)} models in one package:\n  " + "\n  ".join(problems),
                         hint="no files were written")
    return manifests


def compile_models(specs: list, imgsz=None, options: dict | None = None, progress=_noop) -> MultiResult:
    """Compile every model of ``specs`` alone, then compose one package (see the module docstring)."""
    t0 = time.perf_counter()
    manifests = check_specs(specs)
    results = []
    for i, (s, m) in enumerate(zip(specs, manifests), 1):
        progress(f"model {i}/{len(specs)}: {m.name}")
        results.append(compile_model(s.manifest, s.backend, s.checkpoint, imgsz, options,
                                     progress=lambda msg, m=m: progress(f"{m.name}: {msg}")))
    progress(f"composing one package of {len(results)} models")
    files = compose(results, specs[0].backend)
    summary = dict(models=len(results), seconds=time.perf_counter() - t0,
                   ops=sum(r.summary["ops"] for r in results),
                   weight_bytes=sum(r.summary["weight_bytes"] for r in results),
                   arena_bytes=sum(r.summary["arena_bytes"] for r in results))
    return MultiResult(models=results, files=files, summary=summary)


def _origin(banner_line: str, path: str) -> str:
    """'<manifest> (weights sha256 ...; options)' from a generated file's banner."""
    m = re.search(r"Generated by carve \S+ from (.+?); do not edit\.", banner_line)
    if not m:  # pragma: no cover - every generated header starts with the banner (emit_c checks it)
        raise AssertionError(f"{path}: no carve banner on its first line")
    return m.group(1)


def _weights(name: str, files: dict) -> dict:
    """How a model's package carries its weights, read from its files (emit_c names them)."""
    if f"{name}_weights.S" in files:
        return dict(format="blob", source=f"{name}_weights.S", linked=True)
    if f"{name}_weights.c" in files:
        return dict(format="c-array", source=f"{name}_weights.c", linked=True)
    file = f"{name}.weights"
    if file not in files:  # pragma: no cover - emit_c writes one of the three
        raise AssertionError(f"{name}: no weights in the package")
    return dict(format="file", source=None, linked=False, file=file, file_bytes=len(files[file]))


def compose(results: list, backend_name: str) -> dict:
    """One package from the models' own packages: their files, the union of their runtimes, one CMakeLists.txt
    and one README.md."""
    out: dict = {}
    owner: dict = {}              # path -> the model whose package brought it
    runtime: list = []            # runtime sources (.c) in first-seen order
    models = []
    for r in results:
        name = c_ident(r.manifest.name)
        for path, data in r.files.items():
            if path.startswith("runtime/"):
                if path in out and out[path] != data:
                    raise CarveError(f"{path} differs between the packages of {owner[path]} and {r.manifest.name}",
                                     hint="a carve bug: one carve copies one runtime")
                if path not in out and path.endswith(".c") and path != "runtime/carve_io.c":
                    runtime.append(path[len("runtime/"):])
            elif path == "CMakeLists.txt":
                continue
            else:
                if path == "README.md":
                    path = f"{name}.md"
                if path in out:
                    raise CarveError(f"{path}: written by the packages of both {owner[path]} and {r.manifest.name}",
                                     hint="rename one model in its manifest")
            out.setdefault(path, data)
            owner.setdefault(path, r.manifest.name)
        header = r.files[f"{name}.h"].decode()
        hw = [re.search(rf"^#define {name.upper()}_INPUT_{d} (\d+)$", header, re.M) for d in "HW"]
        models.append(dict(name=name, NAME=name.upper(), manifest=Path(r.manifest.path).name, task=r.manifest.task,
                           input_hw=" x ".join(x.group(1) for x in hw if x),
                           origin=_origin(header.split("\n", 1)[0], f"{name}.h"),
                           weights=_weights(name, r.files)))
    names = [m["name"] for m in models]
    banner = (f"Generated by carve {__version__} from "
              + " and ".join(m["origin"] for m in models) + "; do not edit.")
    be = get_backend(backend_name)
    rt_abi = runtime_abi()
    ctx = dict(banner=banner, version=__version__, backend=backend_name, models=models, rt_abi=rt_abi,
               name="+".join(names), runtime_sources=runtime,
               asm=any(m["weights"]["format"] == "blob" for m in models),
               cc_command=cc_command(models, runtime, be), multithreaded=be.template_vars.get("multithreaded", False))
    env = _env(backend_name)
    out["CMakeLists.txt"] = env.get_template("CMakeLists_multi.txt.j2").render(**ctx).encode()
    out["README.md"] = env.get_template("README_multi.md.j2").render(**ctx).encode()
    for path in ("CMakeLists.txt", "README.md"):
        if banner not in out[path].decode().split("\n", 1)[0]:  # pragma: no cover - the templates' first line
            raise AssertionError(f"generated {path} does not start with the banner")
    return out


def cc_command(models: list, runtime: list, backend) -> str:
    """One plain compiler command that builds app.c, a program of the caller's using every model, from the
    package folder: each model's sources, the shared runtime once."""
    srcs = []
    for m in models:
        srcs += [f"{m['name']}.c"] + ([m["weights"]["source"]] if m["weights"]["linked"] else [])
    srcs += [f"runtime/{f}" for f in runtime] + ["app.c", "runtime/carve_io.c"]
    libs = list(backend.cc_libs) + ["stb", "m"]
    defines = "".join(f" -D{d}" for d in backend.cc_defines)
    return (f"cc -std=c11 -O2 -I. -Iruntime -DCARVE_PACKAGE_ABI={runtime_abi()}{defines} " + " ".join(srcs)
            + " -o app " + " ".join(f"-l{lib}" for lib in libs))


def default_out_name(manifests: list, backend: str) -> str:
    """generated/<name>+<name>...-<backend>"""
    return "+".join(m.name for m in manifests) + f"-{backend}"


def cmd_generate_multi(args, say) -> int:
    """``carve generate A.yaml B.yaml ...`` (cli.cmd_generate dispatches here for two manifests or more)."""
    from .cli import head_args, resolve_weights_args, write_package
    checkpoints, weights_format = resolve_weights_args(args, models=len(args.manifest))
    if args.imgsz is not None and len(args.imgsz) > 2:
        raise CarveError(f"--imgsz {' '.join(map(str, args.imgsz))}: give one size (square) or HEIGHT WIDTH")
    specs = [ModelSpec(m, c, args.backend) for m, c in zip(args.manifest, checkpoints)]
    manifests = check_specs(specs)
    out = Path(args.out) if args.out else Path.cwd() / "generated" / default_out_name(manifests, args.backend)
    if out.exists() and not args.force:  # refuse before the (long) compiles
        from .checkpoint import read_checkpoint
        from .compiler import check_checkpoint
        for s, m in zip(specs, manifests):  # but after a checkpoint that does not fit its manifest: the real error
            say(f"reading weights {s.checkpoint}")
            check_checkpoint(m, read_checkpoint(s.checkpoint))
        raise CarveError("output folder exists", location=str(out), hint="pass --force to update it")
    result = compile_models(specs, args.imgsz, {"weights_format": weights_format, "weights_dtype": args.weights_dtype,
                                                **head_args(args)},
                            progress=say)
    say(f"writing {len(result.files)} files to {out}")
    write_package(result.files, out, args.force)
    for r in result.models:
        s = r.summary
        for w in s.get("warnings", []):
            print(f"carve: warning: {r.manifest.name}: {w}", file=sys.stderr)
        print(f"carve: {r.manifest.name}: {s['ops']} ops, imgsz {s['imgsz']}, weights "
              f"{s['weight_bytes'] / 2**20:.1f} MiB, arena {s['arena_bytes'] / 2**20:.1f} MiB")
    print(f"carve: generated {out} ({len(result.models)} models, one runtime, {result.summary['seconds']:.1f} s)")
    return 0
