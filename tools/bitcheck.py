#!/usr/bin/env python3
"""bitcheck: do the packages a carve checkout generates compute the same bits as another checkout's?

The proof harness of issue 16's constraint: for every YOLO26 variant and backend, generate the package with
a checkout's own ``./carve generate`` (its generator, templates and runtime), build it, run its demo on one
real image with ``--json --dump DIR``, and record a SHA-256 of every dumped layer and of the JSON (timing
fields removed). Run it once on the base commit and once on the changed tree, then compare the two.

  bitcheck.py run --root /work/base --out /work/baseline-bits            # 25 variants x 2 backends + yolo26n@640
  bitcheck.py run --root . --out build/after-bits --backends xnnpack,portable,cuda-emu
  bitcheck.py compare /work/baseline-bits build/after-bits               # exit 1 on any difference

run
  Variants: yolo26{n,s,m,l,x}{,-seg,-pose,-obb,-cls} (manifests/<variant>.yaml of --root) at --imgsz (default
  64), plus yolo26n at 640 (--extra; "none" drops it). Backends: xnnpack, portable, cuda-emu (the cuda package
  built on the host with the checkout's tests/cuda/cuda_emu.h through the package's own CMake emulation option,
  Release). xnnpack and portable build with the package's own one-line cc command (its README's
  ``<!-- carve:cc -->`` block; --build cmake uses the package's CMakeLists.txt, Release, instead).
  Checkpoints: random weights with realistic BatchNorm statistics from tools/oracle.py make-checkpoint (seed
  --seed), cached in --cache/checkpoints/ and reused, so that both sides of a comparison read the same files
  (each entry records the checkpoint's SHA-256 and compare checks it). The demo runs with --threads 2 on the
  CPU backends (and once more with --threads 1, whose dumps must be identical: outputs are documented as
  bit-identical for any thread count), --conf --conf (0.1: more detections in the JSON than the default).
  Results: OUT/entries/<variant>@<imgsz>-<backend>.json (hashes, the canonical JSON, shapes, timings) and
  OUT/dumps/<same>/ (the .npy files, kept so that compare can say how far differing layers are apart);
  OUT/run.json (checkout commit, host, compiler, options). Packages are built under OUT/work/ and deleted
  after each entry (--keep keeps them). An entry already in OUT with the same settings is skipped (--redo
  runs it again), so an interrupted run resumes.

compare
  Per variant/backend: identical, or which files differ (for float dumps: max |a-b| and max |a-b| / max|a|),
  the JSON's first differing fields, or missing / failed entries. Prints a summary table; exit status 0 only
  when every entry of BEFORE is present in AFTER and identical (and AFTER has no failed entries); --partial
  compares only the entries AFTER holds.

Only the standard library and numpy; stdlib + numpy are also all that compare needs.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent
SCALES = "nsmlx"
TASK_SUFFIXES = ("", "-seg", "-pose", "-obb", "-cls")
VARIANTS = tuple(f"yolo26{s}{t}" for t in TASK_SUFFIXES for s in SCALES)  # the 25 YOLO26 variants
BACKENDS = ("xnnpack", "portable", "cuda-emu")
GENERATOR_BACKEND = {"xnnpack": "xnnpack", "portable": "portable", "cuda-emu": "cuda"}
TIMING_KEYS = ("timing_ms",)  # removed from the demo's JSON before hashing
FORMAT = 1  # of the entry files


class BitcheckError(Exception):
    """A user-facing failure: printed as 'bitcheck: <message>'."""


def log(msg: str) -> None:
    print(f"[{datetime.datetime.now():%H:%M:%S}] {msg}", flush=True)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def entry_key(variant: str, imgsz: int, backend: str) -> str:
    return f"{variant}@{imgsz}-{backend}"


def canonical_json(stdout: str) -> str:
    """The demo's JSON with its timing fields removed, keys sorted: the text that is hashed."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as e:
        raise BitcheckError(f"the demo's --json output is not JSON ({e}): {stdout[:200]!r}") from None
    if isinstance(doc, dict):
        for k in TIMING_KEYS:
            doc.pop(k, None)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


# ---------------------------------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------------------------------


def _cmd(cmd: list, cwd=None, env=None, timeout=None) -> subprocess.CompletedProcess:
    cmd = [str(c) for c in cmd]
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BitcheckError(f"timed out after {timeout} s: {shlex.join(cmd)}") from None
    if p.returncode != 0:
        tail = (p.stdout[-3000:] + p.stderr[-3000:]).strip()
        raise BitcheckError(f"exit code {p.returncode}: {shlex.join(cmd)}\n{tail}")
    return p


def default_image() -> Path:
    """Ultralytics' bus.jpg (located without importing ultralytics), else carve's assets/shapes-3.png."""
    import importlib.util

    spec = importlib.util.find_spec("ultralytics")
    if spec and spec.origin:
        bus = Path(spec.origin).parent / "assets" / "bus.jpg"
        if bus.is_file():
            return bus
    return TOOLS.parent / "assets" / "shapes-3.png"


def git_state(root: Path) -> dict:
    def git(*a):
        p = subprocess.run(["git", "-C", str(root), *a], text=True, capture_output=True)
        return p.stdout.strip() if p.returncode == 0 else None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "describe": git("log", "-1", "--format=%h %s")[:120]
            if git("rev-parse", "HEAD") else None, "dirty": bool(status) if status is not None else None}


def host_info() -> dict:
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
        model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), platform.processor())
    except OSError:
        model = platform.processor()
    cc = subprocess.run(["cc", "--version"], text=True, capture_output=True).stdout.split("\n")[0]
    cxx = subprocess.run(["c++", "--version"], text=True, capture_output=True).stdout.split("\n")[0]
    isa = sorted(f for f in flags if f in ("avx512f", "avx512bw", "avx512vl", "avx2", "fma", "f16c", "neon", "asimd"))
    return {"machine": platform.machine(), "cpu": model, "isa": isa, "cc": cc, "cxx": cxx}


def checkpoint_digest(pt: Path) -> str:
    """SHA-256 of a checkpoint's content: torch.save's zip members without their root folder (named after the
    file torch.save wrote, so the file's own hash changes with its name); the file's hash if it is no zip."""
    import zipfile

    if not zipfile.is_zipfile(pt):
        return sha256_file(pt)
    h = hashlib.sha256()
    with zipfile.ZipFile(pt) as z:
        for name in sorted(z.namelist(), key=lambda n: n.split("/", 1)[-1]):
            h.update(name.split("/", 1)[-1].encode() + b"\0" + sha256_bytes(z.read(name)).encode() + b"\0")
    return h.hexdigest()


class Checkpoints:
    """Cached random-weight checkpoints, one per (variant, seed); made by tools/oracle.py make-checkpoint."""

    def __init__(self, cache: Path, seed: int, root: Path):
        self.dir = cache / "checkpoints"
        # this tool's oracle (the same file on both sides of a comparison), else the checkout's
        self.oracle = next((p for p in (TOOLS / "oracle.py", root / "tools" / "oracle.py") if p.is_file()),
                           TOOLS / "oracle.py")
        self.seed = seed
        self.locks: dict = {}
        self.guard = threading.Lock()

    def get(self, variant: str) -> Path:
        with self.guard:
            lock = self.locks.setdefault(variant, threading.Lock())
        with lock:
            pt = self.dir / f"{variant}-seed{self.seed}.pt"
            if not pt.is_file():
                self.dir.mkdir(parents=True, exist_ok=True)
                tmp = pt.with_name(f"{pt.stem}.tmp{os.getpid()}.pt")
                log(f"  checkpoint {variant} (seed {self.seed}): tools/oracle.py make-checkpoint")
                # one torch thread: the same file whatever the host (the oracle promises its bits for a given
                # thread count) and no OpenMP threads spinning on a loaded machine
                env = dict(os.environ, CARVE_ORACLE_THREADS="1", OMP_NUM_THREADS="1")
                _cmd([sys.executable, self.oracle, "make-checkpoint", "--cfg", f"{variant}.yaml",
                      "--out", tmp, "--seed", self.seed], env=env)
                tmp.rename(pt)
            return pt


def readme_cc_command(pkg: Path) -> str | None:
    """The package's one-line compiler command: the sh block after <!-- carve:cc --> in its README.md."""
    readme = pkg / "README.md"
    if not readme.is_file():
        return None
    m = re.search(r"<!-- carve:cc -->\s*```sh\n(.*?)\n```", readme.read_text(), re.S)
    return m.group(1).strip() if m else None


class ObjectCache:
    """Objects of a package's runtime/ sources, cached by content: every package of a checkout carries the same
    runtime files, so each is compiled once per compile command, not once per package.

    The key is the compile command (package and build paths replaced by placeholders, the object and dependency
    file names dropped), the compiler's --version, the bytes of every file in the package's runtime/ folder, and
    those of every header the source reaches through #include "..." or <...> found in the package (resolved like
    the compiler: its own folder for "...", then -iquote / -I) and of -include files: a hit needs the same
    command on the same runtime folder, whichever checkout generated it.
    Only sources under the package's runtime/ folder are cached; the model, its demo and its weights are compiled
    every time. The command that runs is the package's own, so the object is the one the package would build."""

    SRC_EXT = (".c", ".cc", ".cpp", ".cxx", ".cu", ".S", ".s")

    def __init__(self, d: Path | None):
        self.dir = d
        self.versions: dict = {}
        self.hits = self.misses = 0
        self.lock = threading.Lock()

    def _version(self, compiler: str) -> str:
        with self.lock:
            if compiler not in self.versions:
                p = subprocess.run([compiler, "--version"], text=True, capture_output=True)
                self.versions[compiler] = p.stdout + p.stderr
            return self.versions[compiler]

    @staticmethod
    def _strip_outputs(args: list) -> tuple:
        """(args without -o/-MF/-MT/-MQ and their values and without -MD/-MMD, the -o value)."""
        out, obj, skip = [], None, None
        for a in args:
            if skip:
                if skip == "-o":
                    obj = a
                skip = None
            elif a in ("-o", "-MF", "-MT", "-MQ"):
                skip = a
            elif a in ("-MD", "-MMD"):
                continue
            else:
                out.append(a)
        return out, obj

    @staticmethod
    def _include_dirs(args: list, cwd: Path) -> tuple:
        dirs, forced = [], []
        it = iter(range(len(args)))
        for i in it:
            a = args[i]
            for flag, into in (("-iquote", dirs), ("-I", dirs), ("-include", forced)):
                if a == flag and i + 1 < len(args):
                    into.append(cwd / args[i + 1])
                    next(it, None)
                    break
                if a.startswith(flag) and len(a) > len(flag) and flag != "-include":
                    into.append(cwd / a[len(flag):])
                    break
        return dirs, forced

    def _deps(self, src: Path, dirs: list, forced: list) -> list:
        """(name, bytes) of the source, its forced includes and every quoted #include it reaches."""
        seen, out, todo = set(), [], [src, *forced]
        while todo:
            f = todo.pop(0).resolve()
            if f in seen or not f.is_file():
                continue
            seen.add(f)
            data = f.read_bytes()
            out.append((f.name, data))
            for quote, inc in re.findall(rb'^\s*#\s*include\s*(["<])([^">]+)[">]', data, re.M):
                inc = inc.decode()
                for d in ([f.parent] if quote == b'"' else []) + dirs:
                    if (d / inc).is_file():
                        todo.append(d / inc)
                        break
        return out

    def compile(self, args: list, cwd: Path, src: Path, pkg: Path, build: Path | None) -> bool:
        """Runs the compile command args (in cwd) or copies its object from the cache; False: not cacheable."""
        if self.dir is None or (pkg / "runtime").resolve() not in (cwd / src).resolve().parents:
            return False
        plain, obj = self._strip_outputs(args)
        if obj is None:
            return False
        dirs, forced = self._include_dirs(plain, cwd)
        h = hashlib.sha256()
        norm = []
        for a in plain:
            a = a.replace(str(pkg.resolve()), "<PKG>").replace(str(pkg), "<PKG>")
            if build is not None:
                a = a.replace(str(build), "<BUILD>")
            norm.append(a)
        h.update("\0".join(norm).encode() + b"\0" + self._version(args[0]).encode())
        for f in sorted((pkg / "runtime").rglob("*")):
            if f.is_file():
                h.update(b"\0" + str(f.relative_to(pkg)).encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
        for name, data in self._deps(cwd / src, dirs, forced):
            h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
        cached = self.dir / f"{h.hexdigest()}.o"
        target = cwd / obj
        target.parent.mkdir(parents=True, exist_ok=True)
        if cached.is_file():
            shutil.copyfile(cached, target)
            with self.lock:
                self.hits += 1
            return True
        _cmd([*plain, "-o", target], cwd=cwd)
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f"{cached.name}.tmp{os.getpid()}.{threading.get_ident()}")
        shutil.copyfile(target, tmp)
        tmp.rename(cached)
        with self.lock:
            self.misses += 1
        return True


def split_cc_line(line: str) -> tuple | None:
    """A one-line `cc ... a.c b.S ... -o demo -lx` as (compiler, compile flags, sources, output, link flags);
    None when it is not that simple (shell syntax, -c, several outputs)."""
    if re.search(r"[;&|<>`$()]", line):
        return None
    toks = shlex.split(line.replace("\\\n", " "))
    if len(toks) < 3 or "-c" in toks or toks.count("-o") != 1:
        return None
    compiler, flags, srcs, link, out = toks[0], [], [], [], None
    it = iter(toks[1:])
    for t in it:
        if t == "-o":
            out = next(it)
        elif t.startswith(("-l", "-L", "-Wl,")) or t in ("-pthread", "-static"):
            link.append(t)
        elif not t.startswith("-") and t.endswith(ObjectCache.SRC_EXT):
            srcs.append(t)
        elif t in ("-I", "-include", "-iquote", "-D", "-U", "-x"):
            flags += [t, next(it)]
        elif t.startswith("-"):
            flags.append(t)
        else:
            return None  # an object or library file given by path: not a plain line
    return (compiler, flags, srcs, out, link) if srcs and out else None


def build_cc(pkg: Path, cc: str, objects: ObjectCache) -> None:
    """The package's cc line, source by source with the same flags (runtime objects from the cache), then
    linked in the same order: the same objects and the same program as the line itself builds."""
    parts = split_cc_line(cc)
    if parts is None or objects.dir is None:
        _cmd(["sh", "-c", cc], cwd=pkg)
        return
    compiler, flags, srcs, out, link = parts
    objdir = pkg / "bitcheck-obj"
    objs = []
    for i, s in enumerate(srcs):
        o = objdir / f"{i:02d}-{Path(s).name}.o"
        args = [compiler, *flags, "-c", s, "-o", str(o.relative_to(pkg))]
        if not objects.compile(args, pkg, Path(s), pkg, None):
            o.parent.mkdir(parents=True, exist_ok=True)
            _cmd(args, cwd=pkg)
        objs.append(str(o.relative_to(pkg)))
    _cmd([compiler, *flags, *objs, "-o", out, *link], cwd=pkg)


def build_cmake(pkg: Path, b: Path, defs: list, jobs: int, objects: ObjectCache) -> list:
    """The package's CMakeLists.txt (Release); runtime objects compiled first from compile_commands.json (or
    copied from the cache), so that the build itself compiles the model and demo and links."""
    cmds = [["cmake", "-S", pkg, "-B", b, "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", *defs],
            ["cmake", "--build", b, "-j", jobs]]
    _cmd(cmds[0])
    cc_json = b / "compile_commands.json"
    if objects.dir is not None and cc_json.is_file():
        for e in json.loads(cc_json.read_text()):
            args = e.get("arguments") or shlex.split(e["command"])
            objects.compile(args, Path(e["directory"]), Path(e["file"]), pkg, b)
    _cmd(cmds[1])
    return cmds


def build_package(pkg: Path, backend: str, build: str, emu_header: Path, jobs: int, objects: ObjectCache) -> tuple:
    """Builds the package's demo; returns (demo path, the build as text)."""
    name = next(pkg.glob("*_demo.c*"), None)
    if name is None:
        raise BitcheckError(f"{pkg}: no <model>_demo.c / .cu in the package")
    demo_name = name.name.split(".")[0]
    if backend == "cuda-emu" or build == "cmake":
        b = pkg / ("build-emu" if backend == "cuda-emu" else "build")
        defs = [f"-DCARVE_CUDA_EMULATION_HEADER={emu_header}"] if backend == "cuda-emu" else []
        cmds = build_cmake(pkg, b, defs, jobs, objects)
        return b / demo_name, " && ".join(shlex.join(map(str, c)) for c in cmds)
    cc = readme_cc_command(pkg)
    if cc is None:
        raise BitcheckError(f"{pkg}/README.md: no '<!-- carve:cc -->' block (use --build cmake)")
    build_cc(pkg, cc, objects)
    return pkg / demo_name, cc


def hash_dump(d: Path) -> dict:
    out = {}
    for f in sorted(d.iterdir()):
        if f.is_file():
            rec = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
            if f.suffix == ".npy":
                try:
                    a = np.load(f, mmap_mode="r")
                    rec.update(shape=list(a.shape), dtype=str(a.dtype))
                except Exception as e:  # noqa: BLE001 - recorded, the hash still stands
                    rec["error"] = f"np.load: {e}"
            out[f.name] = rec
    return out


def run_demo(demo: Path, pkg: Path, image: Path, threads: int, conf: float, dump: Path, timeout: int) -> str:
    shutil.rmtree(dump, ignore_errors=True)
    dump.parent.mkdir(parents=True, exist_ok=True)  # the demo creates DIR itself, not its parents
    p = _cmd([demo, image, "--json", "--dump", dump, "--threads", threads, "--conf", conf], cwd=pkg,
             timeout=timeout)
    return p.stdout


def run_entry(args, ckpts: Checkpoints, variant: str, imgsz: int, backend: str, settings: dict) -> dict:
    key = entry_key(variant, imgsz, backend)
    rec = {"format": FORMAT, "key": key, "variant": variant, "imgsz": imgsz, "backend": backend,
           "settings": settings, "status": "error"}
    t = {}
    work = args.out / "work" / key
    try:
        t0 = time.time()
        pt = ckpts.get(variant)
        rec["checkpoint"] = {"path": str(pt), "sha256": checkpoint_digest(pt), "file_sha256": sha256_file(pt)}
        t["checkpoint"] = time.time() - t0
        manifest = args.root / "manifests" / f"{variant}.yaml"
        if not manifest.is_file():
            raise BitcheckError(f"{manifest}: no such manifest")
        shutil.rmtree(work, ignore_errors=True)
        pkg = work / "pkg"
        t0 = time.time()
        _cmd([args.root / "carve", "generate", manifest, "--backend", GENERATOR_BACKEND[backend], "--weights", pt,
              "--imgsz", imgsz, "--out", pkg, "--force"], cwd=args.root)
        t["generate"] = time.time() - t0
        rec["package_files"] = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*") if p.is_file())
        t0 = time.time()
        demo, rec["build"] = build_package(pkg, backend, args.build, args.emu_header, args.build_jobs,
                                               args.objects)
        t["build"] = time.time() - t0
        rec["runtime_objects_cached"] = args.objects.dir is not None
        threads = 1 if backend == "cuda-emu" else args.threads
        dump = args.out / "dumps" / key
        t0 = time.time()
        stdout = run_demo(demo, pkg, args.image, threads, args.conf, dump, args.timeout)
        t["run"] = time.time() - t0
        rec["threads"] = threads
        rec["json"] = canonical_json(stdout)
        rec["json_sha256"] = sha256_bytes(rec["json"].encode())
        rec["dumps"] = hash_dump(dump)
        if not rec["dumps"]:
            raise BitcheckError(f"{key}: the demo wrote no --dump files")
        if args.check_threads and backend != "cuda-emu" and threads != 1:
            t0 = time.time()
            d1 = work / "dump-threads1"
            j1 = canonical_json(run_demo(demo, pkg, args.image, 1, args.conf, d1, args.timeout))
            h1 = hash_dump(d1)
            diff = sorted(n for n in set(h1) | set(rec["dumps"])
                          if h1.get(n, {}).get("sha256") != rec["dumps"].get(n, {}).get("sha256"))
            if j1 != rec["json"].replace(f'"threads":{threads}', '"threads":1'):
                diff.append("json")
            rec["threads_1_vs_n"] = {"threads": [1, threads], "differ": diff}
            t["threads_check"] = time.time() - t0
        rec["status"] = "ok"
    except BitcheckError as e:
        rec["error"] = str(e)
    rec["seconds"] = {k: round(v, 2) for k, v in t.items()}
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return rec


def plan(args) -> list:
    items = [(v, args.imgsz) for v in args.variants]
    for extra in args.extra:
        items.append(extra)
    return [(v, s, b) for v, s in items for b in args.backends]


def parse_extra(text: str) -> list:
    if text.strip().lower() in ("", "none"):
        return []
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"(yolo26[nslmx](?:-seg|-pose|-obb|-cls)?)@(\d+)", part.strip())
        if not m:
            raise argparse.ArgumentTypeError(f"--extra {part!r}: expected VARIANT@IMGSZ, e.g. yolo26n@640")
        out.append((m.group(1), int(m.group(2))))
    return out


def cmd_run(args) -> int:
    args.root = args.root.resolve()
    args.out = args.out.resolve()
    if not (args.root / "carve").is_file():
        raise BitcheckError(f"{args.root}: not a carve checkout (no ./carve)")
    args.emu_header = (args.emu_header or args.root / "tests" / "cuda" / "cuda_emu.h").resolve()
    if "cuda-emu" in args.backends and not args.emu_header.is_file():
        raise BitcheckError(f"{args.emu_header}: no CUDA emulation header (--emu-header)")
    args.image = (args.image or default_image()).resolve()
    if not args.image.is_file():
        raise BitcheckError(f"{args.image}: no such image")
    cache = (args.cache or TOOLS.parent / "build" / "bitcheck-cache").resolve()
    (args.out / "entries").mkdir(parents=True, exist_ok=True)
    settings = {"threads": args.threads, "conf": args.conf, "build": args.build, "seed": args.seed,
                "image": args.image.name, "image_sha256": sha256_file(args.image)}
    run_info = {"tool": "bitcheck", "tool_sha256": sha256_file(Path(__file__)), "format": FORMAT, "root": str(args.root), "git": git_state(args.root),
                "host": host_info(), "settings": settings, "cache": str(cache),
                "emu_header": str(args.emu_header), "started": datetime.datetime.now().isoformat(timespec="seconds"),
                "argv": sys.argv[1:]}
    runs_file = args.out / "run.json"
    history = json.loads(runs_file.read_text()).get("runs", []) if runs_file.is_file() else []
    items = plan(args)
    todo = []
    for v, s, b in items:
        f = args.out / "entries" / f"{entry_key(v, s, b)}.json"
        if f.is_file() and not args.redo:
            old = json.loads(f.read_text())
            if old.get("status") == "ok" and old.get("settings") == settings:
                continue
        todo.append((v, s, b))
    log(f"bitcheck run: {args.root} ({run_info['git']['describe']}{', dirty' if run_info['git']['dirty'] else ''})"
        f" -> {args.out}; {len(items)} entries, {len(items) - len(todo)} already done; image {args.image.name}; "
        f"checkpoints {cache / 'checkpoints'}; jobs {args.jobs}")
    ckpts = Checkpoints(cache, args.seed, args.root)
    args.objects = ObjectCache(None if args.no_object_cache else cache / "objects")
    t_start = time.time()
    failed = []
    done = [0]
    lock = threading.Lock()

    def one(item):
        v, s, b = item
        rec = run_entry(args, ckpts, v, s, b, settings)
        (args.out / "entries" / f"{rec['key']}.json").write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        with lock:
            done[0] += 1
            sec = rec["seconds"]
            if rec["status"] == "ok":
                th = rec.get("threads_1_vs_n")
                thr = "" if th is None else ("; threads 1 = 2" if not th["differ"] else
                                             f"; THREADS 1 != {th['threads'][1]}: {', '.join(th['differ'][:4])}")
                log(f"[{done[0]}/{len(todo)}] {rec['key']}: {len(rec['dumps'])} dump files, json "
                    f"{rec['json_sha256'][:12]}{thr} (generate {sec.get('generate', 0):.1f} s, build "
                    f"{sec.get('build', 0):.1f} s, run {sec.get('run', 0):.1f} s)")
            else:
                failed.append(rec["key"])
                log(f"[{done[0]}/{len(todo)}] {rec['key']}: FAILED: {rec['error'][:2000]}")

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for fut in [ex.submit(one, it) for it in todo]:
            fut.result()
    run_info["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    run_info["seconds"] = round(time.time() - t_start)
    run_info["entries"] = len(todo)
    runs_file.write_text(json.dumps({"runs": history + [run_info]}, indent=1) + "\n")
    if not args.keep:
        shutil.rmtree(args.out / "work", ignore_errors=True)
    log(f"done in {run_info['seconds']} s: {len(todo) - len(failed)} ok, {len(failed)} failed"
        + (f" ({', '.join(failed)})" if failed else ""))
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------------------------------------------------


def load_entries(d: Path) -> dict:
    ed = d / "entries"
    if not ed.is_dir():
        raise BitcheckError(f"{d}: not a bitcheck result folder (no entries/)")
    out = {}
    for f in sorted(ed.glob("*.json")):
        try:
            rec = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise BitcheckError(f"{f}: not JSON ({e})") from None
        out[rec.get("key", f.stem)] = rec
    return out


def array_diff(a_path: Path, b_path: Path) -> str:
    """How far two dumped arrays are apart: max |a-b| and max |a-b| / max |a| (float), or why not comparable."""
    try:
        a, b = np.load(a_path), np.load(b_path)
    except Exception as e:  # noqa: BLE001
        return f"unreadable ({e})"
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"shape/dtype {a.shape} {a.dtype} -> {b.shape} {b.dtype}"
    if a.dtype.kind not in "fc":
        n = int(np.count_nonzero(a != b))
        return f"{n} of {a.size} elements differ"
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    if (nan_a != nan_b).any():
        return f"NaN positions differ ({int((nan_a != nan_b).sum())} elements)"
    fin = ~nan_a
    d = np.abs(a64[fin] - b64[fin])
    d = d[np.isfinite(d)] if d.size else d
    max_abs = float(d.max()) if d.size else 0.0
    scale = float(np.abs(a64[fin]).max()) if fin.any() else 0.0
    rel = max_abs / scale if scale > 0 else float("inf") if max_abs > 0 else 0.0
    n = int(np.count_nonzero(a64[fin] != b64[fin]))
    return f"max abs {max_abs:.3g}, max rel {rel:.3g} ({n} of {a.size} elements)"


def json_diff(a: str, b: str, limit: int = 3) -> list:
    """The first differing paths between two canonical JSON texts."""
    out = []

    def walk(x, y, path):
        if len(out) >= limit:
            return
        if type(x) is not type(y):
            out.append(f"{path or '/'}: {json.dumps(x)[:60]} -> {json.dumps(y)[:60]}")
        elif isinstance(x, dict):
            for k in sorted(set(x) | set(y)):
                if k not in x or k not in y:
                    out.append(f"{path}/{k}: {'missing before' if k not in x else 'missing after'}")
                else:
                    walk(x[k], y[k], f"{path}/{k}")
                if len(out) >= limit:
                    return
        elif isinstance(x, list):
            if len(x) != len(y):
                out.append(f"{path}: {len(x)} items -> {len(y)}")
            for i, (p, q) in enumerate(zip(x, y)):
                walk(p, q, f"{path}[{i}]")
                if len(out) >= limit:
                    return
        elif x != y:
            out.append(f"{path or '/'}: {json.dumps(x)[:60]} -> {json.dumps(y)[:60]}")

    try:
        walk(json.loads(a), json.loads(b), "")
    except json.JSONDecodeError:
        out.append("unparsable JSON")
    return out or ["text differs"]


def compare_entry(key: str, a: dict, b: dict | None, dir_a: Path, dir_b: Path, ignore_json: tuple = ()) -> tuple:
    """(verdict, details): verdict is 'identical', 'DIFFERENT', 'MISSING' or 'FAILED'. ``ignore_json``: JSON
    paths (e.g. /threads) whose change is expected and not counted (said in the details as 'ignored')."""
    if b is None:
        return "MISSING", [f"no entry {key} in {dir_b}"]
    if a.get("status") != "ok":
        return "FAILED", [f"before: {a.get('error', 'failed')[:300]}"]
    if b.get("status") != "ok":
        return "FAILED", [f"after: {b.get('error', 'failed')[:300]}"]
    details = []
    ca, cb = a.get("checkpoint", {}).get("sha256"), b.get("checkpoint", {}).get("sha256")
    if ca != cb:
        details.append(f"checkpoints differ ({str(ca)[:12]} vs {str(cb)[:12]}): not the same weights")
    sa, sb = a.get("settings", {}), b.get("settings", {})
    for k in sorted(set(sa) | set(sb)):
        if sa.get(k) != sb.get(k) and k != "build":
            details.append(f"settings differ: {k} {sa.get(k)!r} vs {sb.get(k)!r}")
    da, db = a.get("dumps", {}), b.get("dumps", {})
    for name in sorted(set(da) | set(db)):
        if name not in db:
            details.append(f"{name}: missing after")
        elif name not in da:
            details.append(f"{name}: new after")
        elif da[name]["sha256"] != db[name]["sha256"]:
            pa, pb = dir_a / "dumps" / key / name, dir_b / "dumps" / key / name
            how = array_diff(pa, pb) if pa.is_file() and pb.is_file() and name.endswith(".npy") else \
                "hash differs (dump files not kept)"
            details.append(f"{name}: {how}")
    if a.get("json_sha256") != b.get("json_sha256"):
        diffs = json_diff(a.get("json", ""), b.get("json", ""))
        kept = [d for d in diffs if d.split(":", 1)[0] not in ignore_json]
        if kept:
            details.append("json: " + "; ".join(kept))
        ignored = [d for d in diffs if d not in kept]
    else:
        ignored = []
    for side, rec in (("before", a), ("after", b)):
        th = rec.get("threads_1_vs_n")
        if th and th["differ"]:
            details.append(f"{side}: threads 1 vs {th['threads'][1]} differ in {', '.join(th['differ'][:5])}")
    if not details and ignored:
        return "identical", ["json (ignored): " + "; ".join(ignored)]
    return ("identical" if not details else "DIFFERENT"), details


def cmd_compare(args) -> int:
    ea, eb = load_entries(args.before), load_entries(args.after)
    if not ea:
        raise BitcheckError(f"{args.before}: no entries")
    rows = []
    for key in sorted(ea, key=_sort_key):
        if args.partial and key not in eb:
            rows.append((key, "skipped", ["not in after (--partial)"]))
            continue
        verdict, details = compare_entry(key, ea[key], eb.get(key), args.before, args.after,
                                         tuple(args.ignore_json or ()))
        rows.append((key, verdict, details))
    if args.partial and all(r[1] == "skipped" for r in rows):
        raise BitcheckError(f"{args.after}: none of the entries of {args.before} (--partial)")
    for key in sorted(set(eb) - set(ea), key=_sort_key):
        if eb[key].get("status") != "ok":
            rows.append((key, "FAILED", [f"after only: {eb[key].get('error', 'failed')[:300]}"]))
        else:
            rows.append((key, "extra", ["only in after (not compared)"]))
    hosts = [_hosts(d) for d in (args.before, args.after)]
    if hosts[0] and hosts[1] and hosts[0] != hosts[1]:
        print(f"note: the two folders were made on different hosts or compilers (ISA, cc): {hosts[0]} vs {hosts[1]}")
    width = max(len(r[0]) for r in rows)
    print(f"{'variant@imgsz-backend':<{width}}  verdict    files  details")
    for key, verdict, details in rows:
        nfiles = len(ea.get(key, eb.get(key, {})).get("dumps", {}))
        first = details[0] if details else ""
        print(f"{key:<{width}}  {verdict:<9}  {nfiles:>5}  {first}")
        shown = details[1:] if args.verbose else details[1:6]
        for d in shown:
            print(f"{'':<{width}}  {'':<9}  {'':>5}  {d}")
        if len(details) - 1 > len(shown):
            print(f"{'':<{width}}  {'':<9}  {'':>5}  ... {len(details) - 1 - len(shown)} more (-v)")
    counts: dict = {}
    for _, v, _ in rows:
        counts[v] = counts.get(v, 0) + 1
    bad = sum(n for v, n in counts.items() if v in ("DIFFERENT", "MISSING", "FAILED"))
    print("\nsummary: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) +
          f" of {len(ea)} entries in {args.before}")
    print("RESULT: " + ("all identical" if bad == 0 else f"{bad} entries differ, are missing or failed"))
    return 0 if bad == 0 else 1


def _hosts(d: Path) -> list:
    """The (ISA, cc, c++) of every run that wrote into a result folder (run.json), deduplicated."""
    try:
        runs = json.loads((d / "run.json").read_text()).get("runs", [])
    except (OSError, json.JSONDecodeError):
        return []
    return sorted({(" ".join(r["host"]["isa"]), r["host"]["cc"], r["host"]["cxx"]) for r in runs if "host" in r})


def _sort_key(key: str):
    m = re.fullmatch(r"yolo26([nslmx])(-\w+)?@(\d+)-(.+)", key)
    if not m:
        return (9, key)
    return (int(m.group(3)), TASK_SUFFIXES.index(m.group(2) or "") if (m.group(2) or "") in TASK_SUFFIXES else 9,
            SCALES.index(m.group(1)), m.group(4))


# ---------------------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------------------


def _list(kind: str, allowed: tuple):
    def parse(text: str) -> list:
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{kind} {', '.join(bad) or text!r}: expected a comma-separated list "
                                             f"of {', '.join(allowed)}")
        return items
    return parse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bitcheck.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate, build and run every variant/backend of a checkout; record hashes",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("--root", type=Path, required=True, help="the carve checkout whose ./carve generate is used")
    r.add_argument("--out", type=Path, required=True, help="result folder (entries/, dumps/, run.json)")
    r.add_argument("--backends", type=_list("backend", BACKENDS), default=["xnnpack", "portable"],
                   help=f"comma-separated of {','.join(BACKENDS)}")
    r.add_argument("--variants", type=_list("variant", VARIANTS), default=list(VARIANTS),
                   help="comma-separated variants (default: all 25)")
    r.add_argument("--imgsz", type=int, default=64, help="input size of the variants (multiple of 32)")
    r.add_argument("--extra", type=parse_extra, default=[("yolo26n", 640)],
                   help="more VARIANT@IMGSZ entries, comma-separated, or 'none' (default: yolo26n@640)")
    r.add_argument("--jobs", type=int, default=1, help="entries processed at once")
    r.add_argument("--build-jobs", type=int, default=2, help="-j of the CMake builds (cuda-emu, --build cmake)")
    r.add_argument("--build", choices=("cc", "cmake"), default="cc",
                   help="xnnpack/portable: the package's README one-line cc command, or its CMakeLists (Release)")
    r.add_argument("--threads", type=int, default=2, help="demo --threads on the CPU backends (cuda-emu: 1)")
    r.add_argument("--check-threads", action=argparse.BooleanOptionalAction, default=True,
                   help="also run the CPU demos with --threads 1 and check that every dump is identical")
    r.add_argument("--conf", type=float, default=0.1, help="demo --conf")
    r.add_argument("--image", type=Path, help="input image (default: Ultralytics' bus.jpg, else assets/shapes-3.png)")
    r.add_argument("--seed", type=int, default=0, help="checkpoint seed")
    r.add_argument("--cache", type=Path, help="checkpoint cache (default: build/bitcheck-cache of this tool's repo)")
    r.add_argument("--emu-header", type=Path, help="CUDA emulation header (default: ROOT/tests/cuda/cuda_emu.h)")
    r.add_argument("--no-object-cache", action="store_true",
                   help="compile every package's runtime files (default: runtime objects cached in --cache/objects)")
    r.add_argument("--timeout", type=int, default=3600, help="seconds one demo run may take")
    r.add_argument("--keep", action="store_true", help="keep the generated packages and builds (OUT/work/)")
    r.add_argument("--redo", action="store_true", help="run entries again that OUT already holds")
    c = sub.add_parser("compare", help="compare two result folders; exit 1 on any difference or missing entry")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--partial", action="store_true",
                   help="compare only the entries AFTER holds (a rerun of some variants); the others are 'skipped'")
    c.add_argument("--ignore-json", action="append", metavar="PATH",
                   help="a JSON path whose change is expected (e.g. /threads: the portable demo reports the one "
                        "thread it uses since issue 17); repeatable; the change is still printed, as 'ignored'")
    c.add_argument("-v", "--verbose", action="store_true", help="list every differing file")
    args = ap.parse_args(argv)
    try:
        return cmd_run(args) if args.cmd == "run" else cmd_compare(args)
    except BitcheckError as e:
        print(f"bitcheck: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
