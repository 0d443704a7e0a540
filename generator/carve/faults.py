"""Failure injection points (tests only).

The pipeline and the package writer call ``point(stage)`` at the start of every stage that can
fail: ``read``, ``build``, ``optimize``, ``check``, ``plan``, ``emit`` (compiler.py), then
``write:<relative path>`` for each file, ``chmod``, ``keep-build``, ``park-old`` and ``rename``
(cli.write_package). A test sets ``hook`` to a function that raises at the stage it wants to fail
(tests/generator/test_atomic_generation.py) and checks that nothing half-written is left. With no
hook, ``point`` does nothing.
"""

from __future__ import annotations

from typing import Callable

hook: Callable[[str], None] | None = None


def point(stage: str) -> None:
    if hook is not None:
        hook(stage)
