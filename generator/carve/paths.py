"""Where carve's data lives: ``templates/``, ``runtime/`` and ``manifests/``.

An installed carve (a wheel: pyproject.toml, tools/carve_build.py) carries them inside the package,
beside this file; a source checkout keeps them at the repository root, two levels above
``generator/carve/``. The package's own copy wins when both exist.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parents[1]  # the repository root when running from a checkout


def data_dir(name: str) -> Path:
    """``templates``, ``runtime`` or ``manifests``: the installed package's copy, else the checkout's."""
    inside = PACKAGE / name
    return inside if inside.is_dir() else CHECKOUT / name
