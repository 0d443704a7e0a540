"""<NAME>_XNN_HEAP_BYTES (generator/carve/backends/xnn_heap.py) reaches the xnnpack package and only it.

What the bound is worth is checked against XNNPACK itself by tests/firmware/xnn_heap.py (ctest
firmware_xnn_heap: the measured heap use of five task variants, each <= the bound). Here: the xnnpack
header declares the constant (an x86-64 value and a larger-or-equal one for other CPUs), the xnn_heap
buffer fields and <name>_xnn_heap_used; the portable header has none of them; every descriptor kind the
lowering emits has an allocation rule (an unknown kind is an error, never 0 bytes). The shipped demo model
at imgsz 64: no torch needed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generator"))

from carve.backends import xnn_heap  # noqa: E402
from carve.compiler import compile_model  # noqa: E402

MANIFEST = str(REPO / "manifests" / "yolo26n-shapes.yaml")
WEIGHTS = str(REPO / "assets" / "yolo26n-shapes.pt")


@pytest.fixture(scope="module")
def headers():
    return {be: compile_model(MANIFEST, be, WEIGHTS, 64).files["yolo26n_shapes.h"].decode()
            for be in ("xnnpack", "portable")}


def test_xnnpack_header_declares_the_heap(headers):
    h = headers["xnnpack"]
    values = [int(v) for v in re.findall(r"#define YOLO26N_SHAPES_XNN_HEAP_BYTES (\d+)u", h)]
    assert len(values) == 2, "an x86-64 value and one for other CPUs"
    x86, other = values
    assert 0 < x86 <= other and x86 % 64 == 0 and other % 64 == 0
    assert re.search(r"void\* xnn_heap;\s+size_t xnn_heap_bytes;", h)
    assert "size_t yolo26n_shapes_xnn_heap_used(const yolo26n_shapes* model);" in h


def test_portable_header_has_no_xnnpack_memory(headers):
    h = headers["portable"]
    assert "XNN_HEAP" not in h and "xnn_heap" not in h


def test_every_lowered_kind_has_a_rule():
    kinds = ("CONV", "DECONV", "MAXPOOL", "COPY", "ADD", "GAP", "FC", "SOFTMAX")
    fields = dict(kh=3, kw=3, stride=1, pad=1, groups=1, cin=8, cout=8, h=4, w=4)
    for pr in xnn_heap.PROFILES:
        for k in kinds:
            blocks = xnn_heap.op_allocations(k, fields, pr)
            assert blocks[0] == pr.operator_bytes and all(b > 0 for b in blocks)
        with pytest.raises(AssertionError, match="no allocation rule"):
            xnn_heap.op_allocations("RESHAPE", fields, pr)
