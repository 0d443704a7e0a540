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
