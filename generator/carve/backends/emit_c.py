"""Render a C package from a lowered program: templates hold layout, this module the data.

``CPackage.files()`` returns ``{relative path: bytes}``; only the CLI writes
files. Output is deterministic: no timestamps, sorted everything, and every
generated text file starts with the same banner.
"""

from __future__ import annotations

import functools
import re
import struct
import zlib
from pathlib import Path

import jinja2
import numpy as np

from .. import __version__

from ..coco import category_ids
from ..paths import data_dir  # templates/, runtime/: in the installed package, else in the checkout
TEMPLATES = data_dir("templates")
RUNTIME = data_dir("runtime")


# template -> generated file ({name}: the model's C identifier); a backend may list its own as `templates`
TEMPLATES_C = (("model.h.j2", "{name}.h"), ("model.c.j2", "{name}.c"), ("demo.c.j2", "{name}_demo.c"),
               ("CMakeLists.txt.j2", "CMakeLists.txt"), ("README.md.j2", "README.md"))


ROW_DOCS = {
    "detect": "x1, y1, x2, y2, score, class",
    "segment": "x1, y1, x2, y2, score, class, 32 mask coefficients",
    "pose": "x1, y1, x2, y2, score, class, 17 keypoints (x, y, visibility)",
    "obb": "cx, cy, w, h, score, class, angle (radians)",
}


def c_ident(s: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", s)


def c_float(x: float) -> str:
    """A float literal that round-trips exactly through float32."""
    r = repr(float(np.float32(x)))
    if "inf" in r or "nan" in r:
        raise ValueError(f"non-finite constant {x}")
    return (r if ("." in r or "e" in r) else r + ".0") + "f"


def _env(backend_name: str) -> jinja2.Environment:
    env = jinja2.Environment(
        # a backend's template extends a common one of the same name as "common/<name>"
        loader=jinja2.FileSystemLoader([str(TEMPLATES / backend_name), str(TEMPLATES / "common"), str(TEMPLATES)]),
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        autoescape=False)
    env.filters["cfloat"] = c_float
    env.filters["cident"] = c_ident
    env.filters["cstr"] = lambda s: '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'
    return env


# ---- Options shared by every C backend ----------------------------------------
#
# compiler.compile_model normalises the options with normalize_options() before anything is read;
# CPackage renders them. A backend lists what it supports in Backend.weights_formats / weights_dtypes.

WEIGHTS_FORMATS = ("blob", "c-array", "file")
WEIGHTS_DTYPES = ("f32", "f16")
WEIGHTS_MAGIC = b"CARVEWTS"
WEIGHTS_FILE_VERSION = 1
WEIGHTS_DTYPE_CODES = {"f32": 1, "f16": 2}   # carve_weights_dtype in runtime/carve_weights.h
WEIGHTS_HEADER_BYTES = 64


def runtime_abi() -> int:
    """CARVE_RT_ABI of the runtime this carve copies into packages (runtime/carve_rt.h is the one source)."""
    return runtime_define("CARVE_RT_ABI")


# ---- Constants read from the runtime ------------------------------------------
#
# The generator never types a C constant again: runtime_define reads it from the runtime's sources, wherever it
# lives (headers first, then .c / .cu sources), so a define that moves between files keeps working.

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?![\w(])[ \t]*(.*?)[ \t]*(?://.*)?$")
_COND = re.compile(r"^[ \t]*#[ \t]*(ifdef|ifndef|if|elif|else|endif)\b[ \t]*(\w*)")


def live_lines(text: str, defined: tuple):
    """The lines of a runtime file that the preprocessor keeps when exactly the macros in ``defined`` are set, as
    far as #ifdef / #ifndef X / #else tell (other conditions: both branches kept). Backslash-newlines joined."""
    stack: list = []   # per open conditional: True / False (known) or None (unknown)
    for line in text.replace("\\\n", " ").split("\n"):
        c = _COND.match(line)
        if c:
            kw, arg = c.groups()
            if kw in ("ifdef", "ifndef"):
                # a header's own guard and "#ifndef NAME / #define NAME default" hold: NAME is not set
                stack.append((arg in defined) == (kw == "ifdef"))
            elif kw == "if":
                stack.append(None)
            elif kw in ("else", "elif") and stack:
                stack[-1] = None if stack[-1] is None or kw == "elif" else not stack[-1]
            elif kw == "endif" and stack:
                stack.pop()
            continue
        if False not in stack:
            yield line


@functools.lru_cache(maxsize=None)
def _runtime_defines(defined: tuple) -> dict:
    """NAME -> [(value text, file)] of every object-like #define in runtime/*.h, then *.c / *.cu, keeping those in
    the branches that hold when exactly the macros in ``defined`` are set (live_lines)."""
    out: dict = {}
    files = sorted(RUNTIME.glob("*.h")) + sorted(RUNTIME.glob("*.c")) + sorted(RUNTIME.glob("*.cu"))
    for path in files:
        for line in live_lines(path.read_text(), defined):
            m = _DEFINE.match(line)
            if m and m.group(2):
                out.setdefault(m.group(1), []).append((m.group(2), path.name))
    return out


def _c_int(text: str, lookup, name: str) -> int:
    """The value of an integer constant expression of C: literals (u / l suffixes), casts to integer types,
    + - * / % << >> | & ~ and parentheses, other macros through ``lookup``."""
    import ast
    expr = re.sub(r"\((?:size_t|u?int(?:8|16|32|64)_t|unsigned|int|long|unsigned long|long long)\)", "", text)
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", expr)
    expr = re.sub(r"\b([A-Za-z_]\w*)\b", lambda m: str(lookup(m.group(1))), expr)
    expr = expr.replace("/", "//")
    tree = ast.parse(expr, mode="eval")
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv,
               ast.Mod, ast.LShift, ast.RShift, ast.BitOr, ast.BitAnd, ast.BitXor, ast.Invert, ast.USub, ast.UAdd)
    if not all(isinstance(n, allowed) for n in ast.walk(tree)) or not all(
            isinstance(n.value, int) for n in ast.walk(tree) if isinstance(n, ast.Constant)):
        raise AssertionError(f"runtime/: #define {name} {text}: not an integer constant expression carve can read")
    return int(eval(compile(tree, name, "eval")))  # only integer arithmetic nodes, checked above


def runtime_define(name: str, defined: tuple = ()) -> int:
    """The integer value of ``#define NAME value`` in runtime/ (see _runtime_defines; ``defined``: the macros the
    package's runtime is compiled with, e.g. ("CARVE_RT_NO_THREADS",)). Raises when NAME is missing, or defined
    twice with different values in the branches that hold (a carve bug: the runtime and the generator disagree)."""
    table = _runtime_defines(tuple(defined))

    def value(n: str, seen: tuple) -> int:
        found = table.get(n)
        if not found:
            where = f" (needed by {seen[-1]})" if seen else ""
            raise AssertionError(f"runtime/: no '#define {n} <value>' in runtime/*.h, *.c or *.cu{where}; the "
                                 "generator reads this constant from the runtime")
        vals = {_c_int(t, lambda m: value(m, seen + (n,)), n) for t, _ in found}
        if len(vals) != 1:
            raise AssertionError(f"runtime/: #define {n} has several values {sorted(vals)} in "
                                 f"{', '.join(sorted({f for _, f in found}))} (defined: {list(defined) or 'none'})")
        return vals.pop()

    return value(name, ())


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"(carve_\w+\.h)"', re.M)


def runtime_closure(files, defined: tuple = ()) -> list:
    """The runtime files a package needs for these seeds (runtime file names, headers or sources): each file's
    ``#include "carve_*.h"`` added, and for each header its source (``.c`` / ``.cu`` of the same stem) when runtime/
    has one, until nothing new comes in. Sorted. ``defined``: the macros the package's runtime is compiled with
    (Backend.runtime_macros); an include in a branch they rule out does not count (live_lines): carve_rt.h
    includes carve_pool.h only without CARVE_RT_NO_THREADS."""
    todo, seen = list(files), set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        path = RUNTIME / f
        if not path.is_file():
            raise AssertionError(f"runtime/{f}: named by a step or backend but missing")  # pragma: no cover
        seen.add(f)
        todo += _INCLUDE.findall("\n".join(live_lines(path.read_text(), tuple(defined))))
        if f.endswith(".h"):
            todo += [src.name for src in (path.with_suffix(".c"), path.with_suffix(".cu")) if src.is_file()]
    return sorted(seen)


def abi_check(abi: int) -> str:
    """The compile-time check every generated C source that includes the runtime carries."""
    return (f"#if CARVE_RT_ABI != {abi}\n"
            f'#error "this package was generated for carve runtime ABI {abi}: use the runtime/ it came with, '
            f'or regenerate it with this carve"\n'
            "#endif")


def normalize_options(options: dict | None, backend) -> dict:
    """Defaults filled in and every value checked; raises CarveError naming the option."""
    from ..errors import CarveError
    o = dict(options or {})
    o.setdefault("weights_format", "blob")
    o.setdefault("weights_dtype", "f32")
    formats = getattr(backend, "weights_formats", WEIGHTS_FORMATS)
    dtypes = getattr(backend, "weights_dtypes", WEIGHTS_DTYPES)
    if o["weights_format"] not in formats:
        raise CarveError(f"--weights-format {o['weights_format']}: backend '{backend.name}' supports "
                         f"{', '.join(formats)}")
    if o["weights_dtype"] not in dtypes:
        raise CarveError(f"--weights-dtype {o['weights_dtype']}: backend '{backend.name}' supports {', '.join(dtypes)}")
    batch = o.setdefault("batch", 1)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 1024:
        raise CarveError(f"--batch {batch}: expected an integer from 1 to 1024 (images per run)")
    if batch != 1 and backend.name != "cuda":
        raise CarveError(f"--batch {batch}: backend '{backend.name}' runs one image per run; --batch is for "
                         f"--backend cuda", hint="no files were written")
    return o


def options_string(backend_name: str, meta: dict, options: dict) -> str:
    """The options a package was generated with, as carve command-line flags (for banners)."""
    h, w = meta.get("input_hw") or (meta["imgsz"], meta["imgsz"])
    imgsz = f"{h}" if h == w else f"{h} {w}"
    head = ""
    if meta.get("head") == "nms":  # the e2e head (the default) keeps the banners it always had
        head = f" --head nms --iou {meta['iou']:g}" + (" --agnostic" if meta.get("agnostic") else "")
    batch = f" --batch {options['batch']}" if options.get("batch", 1) != 1 else ""
    return (f"--backend {backend_name} --imgsz {imgsz} --weights-format {options.get('weights_format', 'blob')} "
            f"--weights-dtype {options.get('weights_dtype', 'f32')}{head}{batch}"
            + (" --precision fp16" if options.get("precision") == "fp16" else ""))


def weights_storage(graph, program: dict, dtype: str):
    """(payload, F16Weights or None): the bytes a package stores, f32: the program's blob; f16: the checkpoint's
    halves that backends/f16.py's pieces rebuild the blob from (bit for bit, where the checkpoint is float16)."""
    if dtype == "f32":
        return program["blob"], None
    from . import f16
    stored = f16.build(graph, program)
    return stored.payload, stored


def f16_desc(f16w) -> str:
    """What an f16 package's weights are, for its banners and README."""
    if not f16w.lossy:
        return ("float16 as the checkpoint holds them, rebuilt at create into the f32 package's float32 weights "
                "(BatchNorm folded, bit for bit)")
    return (f"float16, rebuilt at create into float32; {len(f16w.lossy)} tensor(s) were not float16 in the checkpoint "
            "and were rounded (not bit-identical to the f32 package)")


def weights_file(payload: bytes, dtype: str, sha256_hex: str) -> bytes:
    """The `--weights file` image: the 64-byte header of runtime/carve_weights.h, then the payload."""
    header = (WEIGHTS_MAGIC + struct.pack("<IIQII", WEIGHTS_FILE_VERSION, WEIGHTS_DTYPE_CODES[dtype], len(payload),
                                          zlib.crc32(payload), 0) + bytes.fromhex(sha256_hex))
    assert len(header) == WEIGHTS_HEADER_BYTES
    return header + payload


def _c_bytes(data: bytes) -> str:
    return ", ".join(f"0x{b:02x}" for b in data)


def package_runtime_seeds(backend, graph, program: dict, options: dict) -> list:
    """The runtime files a package's C calls into, before the include closure: those of every lowered step
    (Step.runtime_files) and those of its fixed parts (backend.runtime_families)."""
    from .steps import family_files
    seeds = set(family_files(backend.runtime_families(graph, options)))
    for lay in program["layers"]:
        for st in lay["steps"]:
            seeds.update(st.runtime_files)
    return sorted(seeds)


def _q8_layout() -> int:
    """The CARVE_Q8_LAYOUT backends/q8_pack.py writes (imported here: q8_pack reads runtime defines through this
    module)."""
    from . import q8_pack
    return q8_pack.PACKS_LAYOUT


class CPackage:
    """Renders a lowered program with the backend's templates. Backend-independent parts live here:
    the banner (with the options), the weight storage (blob / c-array / file, f32 / f16), the ABI
    check, the plain `cc` command of the README, and the checks that every generated source has them."""

    def __init__(self, backend, graph, plan, program: dict, options: dict):
        self.backend = backend
        self.graph = graph
        self.plan = plan
        self.program = program
        self.options = normalize_options(options, backend)

    def files(self) -> dict:
        g, p = self.graph, self.program
        name = c_ident(g.name)
        meta = g.meta
        fmt, dtype = self.options["weights_format"], self.options["weights_dtype"]
        opts = options_string(self.backend.name, meta, self.options)
        banner = (f"Generated by carve {__version__} from {Path(meta['manifest']).name} "
                  f"(weights sha256 {meta['weights_sha256']}; {opts}); do not edit.")
        in_h, in_w = meta.get("input_hw") or (meta["imgsz"], meta["imgsz"])
        payload, f16w = weights_storage(g, p, dtype)
        floats = len(p["blob"]) // 4
        rt_abi = runtime_abi()
        seeds = package_runtime_seeds(self.backend, g, p, self.options)
        runtime = runtime_closure(seeds, self.backend.runtime_macros)
        runtime_sources = [f for f in runtime if f.endswith(".c") and f != "carve_io.c"]
        weights = dict(
            format=fmt, dtype=dtype, linked=fmt != "file", floats=floats, payload_bytes=len(payload),
            f32_bytes=floats * 4, wide_bytes=floats * 4 if dtype == "f16" else 0,
            crc32=zlib.crc32(payload), sha256_c=_c_bytes(bytes.fromhex(meta["weights_sha256"])),
            file=f"{name}.weights", file_bytes=WEIGHTS_HEADER_BYTES + len(payload),
            source={"blob": f"{name}_weights.S", "c-array": f"{name}_weights.c"}.get(fmt),
            c_type="float" if dtype == "f32" else "uint16_t",
            pieces=f16w.pieces if f16w else [], winograd_pieces=bool(f16w and any(pc.winograd for pc in f16w.pieces)),
            lossy=f16w.lossy if f16w else [],
            desc=(f"{'float32' if dtype == 'f32' else f16_desc(f16w)}, "
                  + {"blob": "linked with .incbin", "c-array": "a C array",
                     "file": f"read at create from {name}.weights or a caller's buffer"}[fmt]))
        ctx = dict(
            name=name, NAME=name.upper(), banner=banner, version=__version__, meta=meta, p=p,
            backend=self.backend.name, imgsz=meta["imgsz"], input_h=in_h, input_w=in_w,
            imgsz_str=f"{in_h}x{in_w}", names=meta["names"], nc=meta["nc"],
            weights_format=fmt, weights_dtype=dtype, weights=weights, options=self.options, options_str=opts,
            rt_abi=rt_abi, abi_check=abi_check(rt_abi), runtime_sources=runtime_sources, runtime_files=runtime,
            # the runtime headers the model source includes: those of its steps and fixed parts (not the demo's I/O)
            model_includes=sorted(f for f in seeds if f.endswith(".h") and f != "carve_io.h"),
            runtime_cuda_sources=[f for f in runtime if f.endswith(".cu")],
            gflops=p["flops"] / 1e9, task=meta["task"], row_doc=ROW_DOCS.get(meta["task"], ""),
            q8_layout=_q8_layout(),  # the layout of the carve_q8 CONV records (int8 packages)
            **self.backend.template_vars,
        )
        ctx["coco_ids"], ctx["coco_ids_rule"] = category_ids(meta["names"])  # the demo's --coco category_id
        ctx["demo_source"] = next(path.format(name=name) for t, path in self._templates() if t.startswith("demo."))
        ctx["cc_command"] = self._cc_command(name, weights, runtime_sources)
        env = _env(self.backend.name)
        out: dict = {}
        for template, path in self._templates():
            out[path.format(name=name)] = env.get_template(template).render(**ctx).encode()
        if fmt == "blob":
            out[f"{name}_weights.S"] = env.get_template("weights.S.j2").render(**ctx).encode()
            out[f"{name}_weights.bin"] = payload
        elif fmt == "c-array":
            out[f"{name}_weights.c"] = self._weights_c(name, banner, payload, dtype)
        else:
            out[weights["file"]] = weights_file(payload, dtype, meta["weights_sha256"])
        for f in runtime:
            out[f"runtime/{f}"] = (RUNTIME / f).read_bytes()
        self._check_generated(out, ctx)
        return out

    def _templates(self) -> tuple:
        return getattr(self.backend, "templates", TEMPLATES_C)

    def _cc_command(self, name: str, weights: dict, runtime_sources: list) -> str:
        """One plain compiler command that builds the demo from the package folder (the README's)."""
        srcs = [f"{name}.c"] + ([weights["source"]] if weights["linked"] else [])
        srcs += [f"runtime/{f}" for f in runtime_sources] + [f"{name}_demo.c", "runtime/carve_io.c"]
        libs = list(getattr(self.backend, "cc_libs", ())) + ["stb", "m"]
        defines = "".join(f" -D{d}" for d in getattr(self.backend, "cc_defines", ()))
        return (f"cc -std=c11 -O2 -I. -Iruntime -DCARVE_PACKAGE_ABI={runtime_abi()}{defines} " + " ".join(srcs)
                + f" -o {name}_demo " + " ".join(f"-l{lib}" for lib in libs))

    def _check_generated(self, out: dict, ctx: dict) -> None:
        """Generator-side invariants every backend's templates must keep (a failure is a carve bug):
        each text file carries the banner, each C/CUDA source that includes a carve header has the ABI check, every
        runtime header a generated file includes is in the package's runtime/."""
        carried = {p[len("runtime/"):] for p in out if p.startswith("runtime/")}
        for path, data in out.items():
            if path.startswith("runtime/") or path.endswith((".bin", ".weights")):
                continue
            text = data.decode()
            if ctx["banner"] not in text.split("\n", 1)[0]:
                raise AssertionError(f"{self.backend.name}: generated {path} does not start with the banner")
            missing = sorted(set(_INCLUDE.findall(text)) - carried)
            if missing:
                raise AssertionError(f"{self.backend.name}: generated {path} includes {', '.join(missing)}, which the "
                                     "package does not carry (a step or runtime_families lacks its family)")
            if path.endswith((".c", ".cu", ".cc", ".cpp")) and re.search(r'#include "(carve_|{})'.format(
                    re.escape(ctx["name"])), text) and ctx["abi_check"] not in text:
                raise AssertionError(f"{self.backend.name}: generated {path} lacks the runtime ABI check "
                                     "({{ abi_check }} in its template)")

    def _weights_c(self, name: str, banner: str, payload: bytes, dtype: str) -> bytes:
        """The blob as a C array of 32-bit words (f32) or 16-bit halves (f16), no float literals."""
        bits, np_t, c_t = (32, "<u4", "uint32_t") if dtype == "f32" else (16, "<u2", "uint16_t")
        words = np.frombuffer(payload, dtype=np_t)
        digits = bits // 4
        what = "32-bit words of IEEE-754 floats" if dtype == "f32" else "IEEE-754 half floats (widened at create)"
        lines = [f"// {banner}", f"// Weights of {name} as {what}.", "",
                 "#include <stdint.h>", "", f"#define N_WORDS {max(words.size, 1)}u", ""]
        if dtype == "f32":
            lines.append("static const union { uint32_t u[N_WORDS]; float f[N_WORDS]; } blob "
                         "__attribute__((aligned(64))) = {{")
        else:
            lines.append(f"static const {c_t} blob[N_WORDS] __attribute__((aligned(64))) = {{")
        # big-endian bytes in hex are the words' digits, most significant first: fast for millions of words
        flat = words.astype(">" + np_t[1:]).tobytes().hex()
        hexes = ["0x" + flat[i:i + digits] for i in range(0, len(flat), digits)] or ["0"]
        per = 8 if dtype == "f32" else 12
        for i in range(0, len(hexes), per):
            lines.append("  " + ", ".join(hexes[i:i + per]) + ",")
        if dtype == "f32":
            lines += ["}};", "", f"const float* const {name}_weights = blob.f;", ""]
        else:
            lines += ["};", "", f"const uint16_t* const {name}_weights = blob;", ""]
        return "\n".join(lines).encode()
