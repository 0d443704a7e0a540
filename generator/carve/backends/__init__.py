"""Backends: each lowers IR op kinds to one target and emits a package.

A backend is a module of this package exposing ``BACKEND``, an instance of a
``Backend`` subclass, and listed in ``_MODULES``. ``check`` lists every op it
cannot lower, so a refusal names all missing pieces at once, before any file
is written.
"""

from __future__ import annotations

from ..errors import CarveError
from ..ir import Graph


class Backend:
    name = ""
    description = ""
    # op kind -> predicate(op, graph) returning None when lowerable, else the reason
    lowerable: dict = {}
    # extra names the backend's templates use (C package backends)
    template_vars: dict = {}
    # What emit_c.CPackage renders for every C backend (options checked by emit_c.normalize_options):
    weights_formats = ("blob", "c-array", "file")
    weights_dtypes = ("f32", "f16")
    cc_libs: tuple = ()        # libraries (-l) of the README's one-line cc build, besides stb and m
    cc_defines: tuple = ()     # macros (-D) of that build, besides CARVE_PACKAGE_ABI
    runtime_macros: tuple = ()  # macros the package's runtime is compiled with (emit_c.runtime_closure)
    # int8 (--precision int8, docs/quantization.md): lowers_int8 stays False until the backend lowers quantized
    # graphs (the int8 op kinds and int8 tensors); int8_refusal, when set, says why it never will, and refuses
    # --precision int8 at generation, before the calibration images are read.
    lowers_int8: bool = False
    int8_refusal: str = ""
    # fp16 (--precision fp16: half weights and activations, float32 accumulation): the cuda backend only; the
    # others refuse it with this reason at generation.
    fp16_refusal: str = ("it computes in float32 on the CPU; its reduced precision is int8 (--precision int8 "
                         "--calib DIR: docs/quantization.md); fp16 is the cuda backend's")

    def regions(self, graph: Graph) -> tuple:
        """The ops the backend may run concurrently (planner.Region), which the memory plan must keep apart: none
        (everything in op order) unless the backend says otherwise (the cuda backend's lanes)."""
        return ()

    def reads(self, graph: Graph) -> dict:
        """Tensors the backend reads later than the graph says (planner 5.: tensor -> the op index it is read
        until): none unless the backend runs several ops as one call (the cuda backend's depthwise + 1x1 pairs)."""
        return {}

    def check_precision(self, precision: str) -> None:
        """Refuse a precision this backend never takes (before any work)."""
        if precision == "int8" and self.int8_refusal:
            raise CarveError(f"--precision int8: {self.int8_refusal}",
                             hint="generate with --precision fp32 (the default); no files were written")
        if precision == "fp16" and self.fp16_refusal:
            raise CarveError(f"--precision fp16: backend '{self.name}': {self.fp16_refusal}",
                             hint="generate with --precision fp32 (the default) or int8; no files were written")

    def int8_ops(self, graph: Graph) -> list:
        """The ops of a quantized graph that touch int8: the int8 op kinds and every op reading or writing an i8
        tensor."""
        quant = ("quantize", "dequantize", "qconv2d", "qadd")
        i8 = {n for n, t in graph.tensors.items() if getattr(t, "dtype", "f32") == "i8"}
        return [op for op in graph.ops if op.kind in quant or any(t in i8 for t in op.inputs + op.outputs)]

    def unsupported(self, graph: Graph) -> list:
        """Human-readable reasons, one per op this backend cannot lower."""
        out = []
        for op in graph.ops:
            rule = self.lowerable.get(op.kind)
            if rule is None:
                out.append(f"{op.name}: op '{op.kind}' ({op.source or op.kind}) has no {self.name} lowering")
                continue
            why = rule(op, graph)
            if why:
                out.append(f"{op.name}: {why}")
        return out

    def check(self, graph: Graph) -> None:
        if not self.lowers_int8:
            ops = self.int8_ops(graph)
            if ops:
                shown = ", ".join(f"{op.name} ({op.kind})" for op in ops[:4])
                raise CarveError(f"int8 is not lowered by backend '{self.name}' yet: {len(ops)} op(s) of "
                                 f"{graph.name} run in int8 (e.g. {shown})",
                                 hint="generate with --precision fp32 for now; no files were written")
        missing = self.unsupported(graph)
        if missing:
            raise CarveError(f"backend '{self.name}' cannot lower {len(missing)} op(s) of {graph.name}:\n  "
                             + "\n  ".join(missing), hint="no files were written")

    def emit(self, graph: Graph, plan, options) -> dict:  # pragma: no cover - interface
        raise NotImplementedError


_MODULES = ("xnnpack", "cuda", "portable")


def available_backends() -> list:
    import importlib
    return [importlib.import_module(f"{__name__}.{m}").BACKEND for m in _MODULES]


def get_backend(name: str) -> Backend:
    backends = {b.name: b for b in available_backends()}
    if name not in backends:
        raise CarveError(f"--backend {name}: not available in this carve (available: {', '.join(sorted(backends))})")
    return backends[name]
