"""Model manifests: load, validate and describe one model variant.

A manifest is a small YAML file (schema in docs/manifest.md). Validation
errors name the file, the line and the field, e.g.
``manifests/yolo26n.yaml:12: backends: unknown backend 'tpu' (known: xnnpack)``.
Unknown keys are refused, with a hint when a known key is close.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import CarveError
from .paths import data_dir

SCHEMA_VERSION = 1
TASKS = ("detect", "segment", "pose", "obb", "classify")
KNOWN_BACKENDS = ("xnnpack", "cuda", "portable")
SCALES = ("n", "s", "m", "l", "x")

# field -> (required, expected python type(s), description for messages)
_TOP_FIELDS = {
    "schema": (True, int),
    "name": (True, str),
    "family": (True, str),
    "task": (True, str),
    "architecture": (True, dict),
    "input": (True, dict),
    "classes": (True, (str, list)),
    "backends": (True, list),
    "conf": (False, (float, int)),
    "head": (False, str),
    "provenance": (False, dict),
}
DEFAULT_CONF = 0.25  # Ultralytics' predict default
# The two heads of a box task (detect, segment, pose, obb): the one-to-one branch with its top-k (Ultralytics'
# predict(nms=False)), or the one-to-many branch with non-maximum suppression (predict() with its defaults).
HEADS = ("e2e", "nms")
DEFAULT_HEAD = "e2e"
# The manifest file of each task: manifests/yolo26<scale><suffix>.yaml
TASK_SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb", "classify": "-cls"}
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".safetensors")
_ARCH_FIELDS = {"config": (True, str), "scale": (True, str)}
_INPUT_FIELDS = {"imgsz": (True, (int, list))}


@dataclass(frozen=True)
class Manifest:
    path: str                     # as given (used in messages and banners)
    name: str
    family: str
    task: str
    arch_config: str              # absolute path of the architecture yaml
    scale: str
    imgsz: int | tuple            # square size, or (height, width)
    classes: tuple[str, ...] | None   # None: take them from the checkpoint
    backends: tuple[str, ...]
    conf: float = DEFAULT_CONF    # the packages' default confidence threshold (demo, <NAME>_DEFAULT_CONF)
    head: str = DEFAULT_HEAD      # the head `carve generate` builds without --head (box tasks; classify: "e2e")
    provenance: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict, compare=False, repr=False)  # field path -> line

    @property
    def input_hw(self) -> tuple:
        """(height, width) of the network input."""
        return input_hw(self.imgsz)

    def where(self, field_path: str) -> str:
        """``file:line`` of a field, for error messages."""
        line = self.lines.get(field_path)
        return f"{self.path}:{line}" if line else self.path


def input_hw(imgsz) -> tuple:
    """(height, width) of an ``imgsz`` given as one size (square) or as (height, width)."""
    if isinstance(imgsz, (tuple, list)):
        if len(imgsz) == 1:
            return int(imgsz[0]), int(imgsz[0])
        h, w = imgsz
        return int(h), int(w)
    return int(imgsz), int(imgsz)


def format_hw(hw) -> str:
    """``640`` for a square input, ``256x384`` (height x width) otherwise."""
    h, w = input_hw(hw)
    return str(h) if h == w else f"{h}x{w}"


def _type_name(t) -> str:
    if t == (float, int):
        return "a number"
    if isinstance(t, tuple):
        return " or ".join(_type_name(x) for x in t)
    return {int: "an integer", str: "a string", list: "a list", dict: "a mapping"}[t]


def _record_lines(node: yaml.Node, lines: dict, prefix: str, path: str, seen: set | None = None) -> None:
    """Record the line of every mapping key as ``lines['a.b'] = n``; refuse duplicate keys and
    aliases (a node reached twice: ``*anchor``), which a manifest never needs and which would let a
    few lines expand into billions of nodes."""
    seen = set() if seen is None else seen
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        if id(node) in seen:  # reported at the key that holds the alias (the node's own mark is the anchor's)
            holder = prefix
            while holder.endswith("]"):
                holder = holder[: holder.rindex("[")]
            line = lines.get(holder, node.start_mark.line + 1)
            raise CarveError(f"{prefix or 'the document'}: YAML anchors and aliases are not supported in manifests",
                             location=f"{path}:{line}")
        seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for knode, vnode in node.value:
            key = f"{prefix}.{knode.value}" if prefix else str(knode.value)
            if key in lines:
                raise CarveError(f"{key}: duplicate key", location=f"{path}:{knode.start_mark.line + 1}")
            lines[key] = knode.start_mark.line + 1
            if isinstance(knode, yaml.ScalarNode) and knode.tag != "tag:yaml.org,2002:str":
                try:  # a non-string key (1:, null:, true:) is also found under its value's str()
                    value = yaml.safe_load(knode.value)
                    lines.setdefault(f"{prefix}.{value}" if prefix else str(value), knode.start_mark.line + 1)
                except yaml.YAMLError:
                    pass
            _record_lines(vnode, lines, key, path, seen)
    elif isinstance(node, yaml.SequenceNode):
        for i, vnode in enumerate(node.value):
            lines[f"{prefix}[{i}]"] = vnode.start_mark.line + 1
            _record_lines(vnode, lines, f"{prefix}[{i}]", path, seen)


def _check_fields(data: dict, spec: dict, prefix: str, path: str, lines: dict) -> None:
    def loc(key: str) -> str:
        line = lines.get(f"{prefix}{key}") or lines.get(prefix.rstrip("."))
        return f"{path}:{line}" if line else path

    for key in data:
        if not isinstance(key, str):
            raise CarveError(f"{prefix}{key!r}: unknown key (keys are names)", location=loc(str(key)),
                             hint=f"known keys: {', '.join(spec)}")
        if key not in spec:
            close = difflib.get_close_matches(key, list(spec), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(spec)}"
            raise CarveError(f"{prefix}{key}: unknown key", location=loc(key), hint=hint)
    for key, (required, typ) in spec.items():
        if key not in data:
            if required:
                where = lines.get(prefix.rstrip(".")) if prefix else None
                raise CarveError(f"{prefix}{key}: required field is missing",
                                 location=f"{path}:{where}" if where else path)
            continue
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, typ):
            raise CarveError(f"{prefix}{key}: expected {_type_name(typ)}, found {value!r}", location=loc(key))


def manifests_dir() -> Path:
    """The shipped manifests: the installed package's copy, else the checkout's manifests/."""
    return data_dir("manifests")


def looks_like_checkpoint(path: str | os.PathLike) -> bool:
    """A .pt / .pth / .safetensors name, or a zip (torch's format): never a manifest."""
    if str(path).lower().endswith(CHECKPOINT_SUFFIXES):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def manifest_for(task: str, scale: str, names=None, near: str | os.PathLike | None = None) -> Path | None:
    """The shipped manifest for a checkpoint's task and scale: one whose class list equals the checkpoint's
    ``names`` (a model trained with its own manifest, like yolo26n-shapes) first, else
    ``yolo26<scale><task suffix>.yaml``. Looked up beside ``near`` (a manifest given by the user), then in
    :func:`manifests_dir`. None when there is none."""
    if task not in TASK_SUFFIX or scale not in SCALES:
        return None
    folders = [Path(near).parent] if near is not None else []
    folders.append(manifests_dir())
    wanted = tuple(names.values()) if isinstance(names, dict) else tuple(names or ())
    for folder in folders:
        if wanted:
            for path in sorted(folder.glob("*.yaml")):
                try:
                    m = load_manifest(path)
                except CarveError:
                    continue
                if m.task == task and m.scale == scale and m.classes == wanted:
                    return path
        path = folder / f"yolo26{scale}{TASK_SUFFIX[task]}.yaml"
        if path.is_file():
            return path
    return None


def load_manifest(path: str | os.PathLike) -> Manifest:
    """Read and validate a manifest; raise CarveError naming file, line and field."""
    path = str(path)
    if looks_like_checkpoint(path):
        raise CarveError("this is a checkpoint, not a manifest", location=path,
                         hint=f"`carve generate {path} --backend B` picks the manifest from the checkpoint; or give a "
                              f"manifest (manifests/*.yaml) first and the checkpoint with --checkpoint {path}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CarveError("manifest not found", location=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CarveError(f"cannot read manifest: {exc}", location=path) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if not isinstance(node, yaml.MappingNode):
            raise CarveError("a manifest must be a YAML mapping of fields", location=path)
        lines: dict = {}
        _record_lines(node, lines, "", path)
        data = yaml.safe_load(text)  # constructing can fail too: unknown tags (!foo), unhashable keys
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"{path}:{mark.line + 1}" if mark else path
        raise CarveError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", location=loc) from None
    except RecursionError:
        raise CarveError("the YAML is nested too deeply for a manifest", location=path) from None

    _check_fields(data, _TOP_FIELDS, "", path, lines)
    _check_fields(data["architecture"], _ARCH_FIELDS, "architecture.", path, lines)
    _check_fields(data["input"], _INPUT_FIELDS, "input.", path, lines)

    def where(f: str) -> str:
        return f"{path}:{lines[f]}" if f in lines else path

    if data["schema"] != SCHEMA_VERSION:
        raise CarveError(f"schema: version {data['schema']} is not supported (this carve reads {SCHEMA_VERSION})",
                         location=where("schema"))
    if data["family"] != "yolo26":
        raise CarveError(f"family: '{data['family']}' is not supported", location=where("family"),
                         hint="carve compiles the yolo26 family")
    if data["task"] not in TASKS:
        raise CarveError(f"task: '{data['task']}' is not one of {', '.join(TASKS)}", location=where("task"))
    scale = data["architecture"]["scale"]
    if scale not in SCALES:
        raise CarveError(f"architecture.scale: '{scale}' is not one of {', '.join(SCALES)}",
                         location=where("architecture.scale"))
    imgsz = data["input"]["imgsz"]
    if isinstance(imgsz, list):
        if len(imgsz) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in imgsz):
            raise CarveError(f"input.imgsz: expected an integer or [height, width], found {imgsz!r}",
                             location=where("input.imgsz"))
        imgsz = tuple(imgsz) if imgsz[0] != imgsz[1] else imgsz[0]
    for v in (imgsz if isinstance(imgsz, tuple) else (imgsz,)):
        if v <= 0 or v % 32:
            raise CarveError(f"input.imgsz: {v} must be a positive multiple of 32 (the largest stride)",
                             location=where("input.imgsz"))
    classes = data["classes"]
    if isinstance(classes, str):
        if classes != "from-checkpoint":
            raise CarveError(f"classes: expected a list of names or 'from-checkpoint', found {classes!r}",
                             location=where("classes"))
        classes_t = None
    else:
        if not classes or not all(isinstance(c, str) and c for c in classes):
            raise CarveError("classes: expected a non-empty list of non-empty names", location=where("classes"))
        classes_t = tuple(classes)
    backends = data["backends"]
    if not backends:
        raise CarveError("backends: the list is empty", location=where("backends"))
    for i, b in enumerate(backends):
        if b not in KNOWN_BACKENDS:
            close = difflib.get_close_matches(str(b), KNOWN_BACKENDS, n=1)
            raise CarveError(f"backends: unknown backend {b!r} (known: {', '.join(KNOWN_BACKENDS)})",
                             location=where(f"backends[{i}]"), hint=f"did you mean '{close[0]}'?" if close else None)
    conf = data.get("conf", DEFAULT_CONF)
    if isinstance(conf, bool) or not 0.0 <= conf < 1.0:
        raise CarveError(f"conf: {conf!r} must be a number in [0, 1)", location=where("conf"))
    head = data.get("head", DEFAULT_HEAD)
    if head not in HEADS:
        raise CarveError(f"head: '{head}' is not one of {', '.join(HEADS)}", location=where("head"),
                         hint="e2e: the one-to-one head and its top-k (Ultralytics' nms=False); nms: the one-to-many "
                              "head and non-maximum suppression (Ultralytics' default predict)")
    if "head" in data and data["task"] == "classify":
        raise CarveError("head: a classify model has no box head to choose", location=where("head"))
    arch = Path(path).parent / data["architecture"]["config"]
    if not arch.is_file():
        raise CarveError(f"architecture.config: file '{data['architecture']['config']}' not found next to the manifest",
                         location=where("architecture.config"))
    name = data["name"]
    if not name.replace("_", "").replace("-", "").isalnum() or not name[0].isalpha():
        raise CarveError(f"name: '{name}' must start with a letter and hold only letters, digits, '-' and '_'",
                         location=where("name"))
    return Manifest(path=path, name=name, family=data["family"], task=data["task"],
                    arch_config=str(arch.resolve()), scale=scale, imgsz=imgsz, classes=classes_t,
                    backends=tuple(backends), conf=float(conf), head=head, provenance=dict(data.get("provenance") or {}), lines=lines)


def load_architecture(manifest: Manifest) -> dict:
    """The architecture yaml the manifest names, as plain data."""
    try:
        with open(manifest.arch_config, encoding="utf-8") as f:
            arch = yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as exc:
        raise CarveError(f"cannot read architecture: {exc}", location=manifest.arch_config) from None
    for key in ("backbone", "head", "scales"):
        if key not in (arch or {}):
            raise CarveError(f"{key}: missing from the architecture file", location=manifest.arch_config)
    return arch
