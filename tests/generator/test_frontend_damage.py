"""Damaged checkpoint attributes reach the frontend only as CarveErrors.

The pickle is untrusted, so every module attribute the frontend reads (BatchNorm eps, Upsample
mode and scale factor, the head's nc and max_det, ...) and every field of the checkpoint's yaml
and names may hold anything. The attributes read are recorded from a real build of the demo model
(not typed in); each is then replaced, one at a time, by values of the wrong type or range, and
``build_graph`` must either succeed or raise CarveError: never another exception, never NaN
weights. Torch-free (the shipped demo checkpoint).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.checkpoint import read_checkpoint  # noqa: E402
from carve.errors import CarveError  # noqa: E402
from carve.frontend.yolo26 import build_graph  # noqa: E402
from carve.manifest import load_architecture, load_manifest  # noqa: E402

MANIFEST = load_manifest(REPO / "manifests" / "yolo26n-shapes.yaml")
ARCH = load_architecture(MANIFEST)
WEIRD = ["abc", None, [], [1, 2], {}, -1, 0, 10**12, 1.5, float("nan"), float("inf"), True, (3,), "1e-3"]


class Recording(dict):
    """A dict that records which keys are read."""

    def __init__(self, data, path, log):
        super().__init__(data)
        self._path, self._log = path, log

    def __getitem__(self, k):
        self._log.add((self._path, k))
        return super().__getitem__(k)

    def get(self, k, default=None):
        self._log.add((self._path, k))
        return super().get(k, default)

    def __contains__(self, k):
        self._log.add((self._path, k))
        return super().__contains__(k)


@pytest.fixture(scope="module")
def base():
    return read_checkpoint(REPO / "assets" / "yolo26n-shapes.pt")


@pytest.fixture(scope="module")
def read_attrs(base):
    log: set = set()
    ck = copy.copy(base)
    ck.modules = {p: copy.copy(mi) for p, mi in base.modules.items()}
    for p, mi in ck.modules.items():
        mi.attrs = Recording(mi.attrs, p, log)
    ck.yaml = Recording(base.yaml, "<yaml>", log)
    build_graph(MANIFEST, ARCH, ck, 64)
    # only keys that exist: a missing key falls back to a default the frontend owns
    return sorted((p, k) for p, k in log if (p == "<yaml>" and k in base.yaml) or
                  (p != "<yaml>" and k in base.modules[p].attrs))


def _variant(base, path, key, value):
    ck = copy.copy(base)
    if path == "<yaml>":
        ck.yaml = dict(base.yaml, **{key: value})
    else:
        ck.modules = dict(base.modules)
        mi = copy.copy(base.modules[path])
        mi.attrs = dict(mi.attrs, **{key: value})
        ck.modules[path] = mi
    return ck


def test_the_frontend_reads_attributes(read_attrs):
    keys = {k for _, k in read_attrs}
    assert {"eps", "scale_factor", "mode", "nc"} <= keys, keys  # the recording works


def test_every_read_attribute_damaged(base, read_attrs):
    escaped = []
    for path, key in read_attrs:
        for value in WEIRD:
            try:
                g = build_graph(MANIFEST, ARCH, _variant(base, path, key, value), 64)
            except CarveError:
                continue
            except Exception as exc:  # noqa: BLE001 (the point of the test)
                escaped.append(f"{path}.{key} = {value!r}: {type(exc).__name__}: {exc}")
                continue
            bad = [n for n, w in g.weights.items() if not np.isfinite(w).all()]
            if bad:
                escaped.append(f"{path}.{key} = {value!r}: non-finite weights {bad[:3]}")
    assert not escaped, "\n".join(escaped[:20])


@pytest.mark.parametrize("names", [{0: "a"}, {"x": 1}, {}, None])
def test_damaged_names(base, names):
    ck = copy.copy(base)
    ck.names = names
    try:
        build_graph(MANIFEST, ARCH, ck, 64)
    except CarveError:
        pass
