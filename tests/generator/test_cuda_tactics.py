"""The cuda backend's tactic slots (generator/carve/backends/cuda_tactics.py), generator side: which convolutions
name a slot of the runtime's tactic table, that equal shapes share one and different shapes do not, and the rendered
k_conv descriptors, table and create-time tuning. Timing the paths is the runtime's (tests/cuda/test_igemm.cu,
test_tactics) and a package's (tests/cuda/cuda_vs_xnnpack.py --tune)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

from carve import compiler  # noqa: E402
from carve.backends import cuda_tactics  # noqa: E402

MANIFEST = REPO / "manifests" / "yolo26n.yaml"
IMGSZ = 96


def _conv(**kw) -> dict:
    c = dict(kh=3, kw=3, stride=1, pad=1, groups=1, cin=16, cout=16, h=8, w=8, in_stride=16, out_stride=16,
             res_stride=0, act=1)
    c.update(kw)
    return c


def test_assign_shares_slots_by_shape():
    convs = [_conv(), _conv(groups=16), _conv(cin=3, in_stride=3), _conv(), _conv(out_stride=32), _conv(act=0),
             _conv(res_stride=16), _conv()]
    slots = cuda_tactics.assign(convs, direct=lambda c: c["cin"] <= 4)
    assert [c["slot"] for c in convs] == [1, 0, 0, 1, 2, 3, 4, 1]
    assert slots == 4
    assert cuda_tactics.assign([], direct=lambda c: False) == 0
    # a depthwise conv paired with its 1x1 (carve_cu_conv2d_dwpw) takes the pair's slot: the two shapes' key
    convs = [_conv(groups=16, pw=1), _conv(), _conv(groups=16, pw=3), _conv(), _conv(groups=16, pw=5), _conv(cout=8)]
    assert cuda_tactics.assign(convs, direct=lambda c: False) == 4
    assert [c["slot"] for c in convs] == [1, 2, 1, 2, 3, 4]


def test_rendered_slots_and_tuning(irsim_yolo26n_pt):
    pytest.importorskip("torch")
    files = compiler.compile_model(str(MANIFEST), "cuda", str(irsim_yolo26n_pt), IMGSZ).files
    cu, h = files["yolo26n.cu"].decode(), files["yolo26n.h"].decode()
    slots = int(re.search(r"^#define TACTIC_SLOTS (\d+)", cu, re.M).group(1))
    rows = re.findall(r"\{\.kh = (\d+), \.kw = \d+, \.stride = (\d+), .*?\.groups = (\d+), \.cin = (\d+), .*"
                      r"\.slot = (\d+)\},", cu)
    assert rows and int(re.search(r"^#define YOLO26N_NUM_CONVS (\d+)", h, re.M).group(1)) == len(rows)
    used = sorted({int(r[4]) for r in rows} - {0})
    assert used == list(range(1, slots + 1)) and 0 < slots < len(rows)  # equal shapes share (the head's levels)
    paired = {int(i) for i in re.findall(r"carve_cu_conv2d_dwpw\([^,]+, &k_conv\[(\d+)\]", cu)}
    assert len(paired) == 6  # the class branches' depthwise convs: their pair's slot (two launches or one)
    for i, (kh, stride, groups, cin, slot) in enumerate(rows):
        one_path = (groups != "1" and i not in paired) or int(cin) <= 4  # depthwise alone, the stem's direct kernel
        assert (slot == "0") == one_path, (kh, stride, groups, cin, slot)
    # create tunes (options.conv_tune) after the weights, before anything runs; the lanes share the table
    init = cu[cu.index("static carve_status init("):]
    init = init[:init.index("\n}\n")]
    assert init.index("carve_cu_ctx_set_tactics(&m->cu, &m->tactics)") < init.index("lanes_init(") \
        < init.index("bind_weights(") < init.index("tune(m)")
    assert "int conv_tune;" in h and "yolo26n_conv_path(" in h
