"""The YOLO26 frontend (carve.frontend.yolo26.build_graph) on real Ultralytics checkpoints.

Oracles are Ultralytics' own modules: the fused end-to-end model's parameter count, the
layer output shapes (forward hooks, NCHW transposed to NHWC) at imgsz 640 and 320, every
Conv2d's kernel/stride/padding/groups/channels and every Conv's activation class. Broken
checkpoints (a tensor of the wrong shape, a missing tensor, another scale, an unsupported
activation) are refused with a CarveError naming the key.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

import irsim  # noqa: E402
from carve import ir, passes  # noqa: E402
from carve.checkpoint import ModuleInfo, read_checkpoint  # noqa: E402
from carve.errors import CarveError  # noqa: E402
from carve.frontend.yolo26 import build_graph  # noqa: E402
from carve.manifest import load_architecture, load_manifest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("ultralytics")


@pytest.fixture(scope="module")
def n(tmp_path_factory):
    """(checkpoint, manifest, arch, Ultralytics model loaded back from the file, end2end)."""
    path = tmp_path_factory.mktemp("ir") / "yolo26n.pt"
    irsim.save_checkpoint(irsim.build_yolo26("n", seed=0), path)
    man = load_manifest(REPO / "manifests" / "yolo26n.yaml")
    model = torch.load(str(path), map_location="cpu", weights_only=False)["model"].float().eval()
    model.model[-1].end2end = True
    return read_checkpoint(path), man, load_architecture(man), model


@pytest.fixture(scope="module")
def s_ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("ir_s") / "yolo26s.pt"
    irsim.save_checkpoint(irsim.build_yolo26("s", seed=0), path)
    return read_checkpoint(path)


def _graph(n, imgsz=None, ckpt=None):
    ck, man, arch, _ = n
    return build_graph(man, arch, ckpt or ck, imgsz)


# ---------------------------------------------------------------------------
# Structure
# ---------------------------------------------------------------------------

def test_graph_validates_and_shapes_are_consistent(n):
    """SSA / topological order / weights (ir.validate) before and after optimize, and every op's
    recorded output shapes are what its OPS shape rule infers."""
    for g in (_graph(n), passes.optimize(_graph(n))):
        ir.validate(g)
        for op in g.ops:
            inferred = ir.OPS[op.kind].infer(op, [g.tensors[t].shape for t in op.inputs])
            assert [g.tensors[t].shape for t in op.outputs] == [tuple(s) for s in inferred], op.name
        assert g.input == "images" and g.tensors[g.input].shape == (640, 640, 3)
        assert set(g.outputs) == {"output0"}


def test_one_ir_layer_per_ultralytics_layer(n):
    _, _, _, model = n
    g = _graph(n)
    assert [layer.index for layer in g.layers] == list(range(len(model.model)))
    for layer, mod in zip(g.layers, model.model):
        assert layer.type.replace("nn.", "") == type(mod).__name__
        f = mod.f if isinstance(mod.f, list) else [mod.f]
        assert list(layer.sources) == f


def test_parameter_count_equals_ultralytics_fused_end2end(n):
    _, _, _, model = n
    import copy
    fused = copy.deepcopy(model).fuse(verbose=False)
    theirs = sum(p.numel() for p in fused.parameters())
    ours = sum(w.size for w in passes.optimize(_graph(n)).weights.values())
    assert ours == theirs


def test_every_conv_mirrors_its_ultralytics_conv2d(n):
    """kernel, stride, padding, groups and channels of each conv2d op equal those of the Conv2d at
    the op's module path (``<path>.conv`` for an Ultralytics Conv, ``<path>`` for a bare Conv2d)."""
    _, _, _, model = n
    g = _graph(n)
    convs = [op for op in g.ops if op.kind == "conv2d"]
    for op in convs:
        mod = model.get_submodule(op.name)
        c = mod.conv if hasattr(mod, "conv") else mod
        assert isinstance(c, torch.nn.Conv2d), op.name
        a = op.attrs
        assert (a["kernel"], (a["stride"],) * 2, (a["pad"],) * 2, a["groups"], a["cin"], a["cout"]) == \
            (tuple(c.kernel_size), tuple(c.stride), tuple(c.padding), c.groups, c.in_channels, c.out_channels), op.name
        assert ("bias" in op.params) == (c.bias is not None), op.name
    # every Conv2d on the end-to-end inference path (all but the one-to-many head) is in the graph
    head = f"model.{len(model.model) - 1}"
    theirs = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)
              and not name.startswith((f"{head}.cv2.", f"{head}.cv3."))}
    ours = [op.name + ".conv" if hasattr(model.get_submodule(op.name), "conv") else op.name for op in convs]
    assert len(ours) == len(set(ours)) and set(ours) == theirs


def test_head_attrs_follow_the_detect_module(n):
    _, _, _, model = n
    head = model.model[-1]
    (e2e,) = [op for op in _graph(n).ops if op.kind == "e2e_detect"]
    assert e2e.attrs["nc"] == head.nc and e2e.attrs["k"] == head.max_det
    assert list(e2e.attrs["strides"]) == [int(s) for s in head.stride]


# ---------------------------------------------------------------------------
# Layer output shapes vs Ultralytics
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("imgsz", [640, 320])
def test_layer_output_shapes_match_ultralytics(n, imgsz):
    _, _, _, model = n
    g = _graph(n, imgsz)
    outs = irsim.layer_outputs(model, torch.zeros(1, 3, imgsz, imgsz))
    assert len(outs) == len(g.layers)
    for layer in g.layers:
        ours = g.tensors[layer.output].shape
        t = outs[layer.index]
        # feature maps: NCHW -> (h, w, c); the head's rows (1, k, 6) are stored as (1, k, 6)
        theirs = tuple(t.shape) if t.dim() == 3 else tuple(t.permute(0, 2, 3, 1).shape[1:])
        assert ours == theirs, f"layer {layer.index} {layer.type}: IR {ours}, Ultralytics {tuple(t.shape)}"
    # and the optimised graph keeps the layer outputs' names and shapes
    opt = passes.optimize(g)
    for a, b in zip(g.layers, opt.layers):
        assert a.output == b.output and opt.tensors[b.output].shape == g.tensors[a.output].shape


# ---------------------------------------------------------------------------
# Broken checkpoints
# ---------------------------------------------------------------------------

def _with_tensors(ck, change):
    tensors = dict(ck.tensors)
    change(tensors)
    return dataclasses.replace(ck, tensors=tensors)


def _shape_in(text, word):
    m = re.search(word + r" \(([\d, ]+)\)", text)
    assert m, f"no '{word} (...)' in {text!r}"
    return tuple(int(x) for x in m.group(1).split(","))


@pytest.mark.parametrize("key,bad", [
    ("model.23.one2one_cv3.0.0.0.conv.weight", lambda s: (s[0], 3) + s[2:]),   # DWConv given a full conv
    ("model.0.conv.weight", lambda s: (s[0] + 1,) + s[1:]),
    ("model.10.m.0.attn.qkv.bn.running_var", lambda s: (s[0] * 2,)),
    ("model.23.one2one_cv2.2.2.bias", lambda s: (s[0] + 4,)),
], ids=["dwconv", "first-conv", "bn-var", "head-bias"])
def test_wrong_shape_names_key_expected_and_found(n, key, bad):
    ck = n[0]
    expected = tuple(ck.tensors[key].shape)
    found = bad(expected)
    broken = _with_tensors(ck, lambda t: t.__setitem__(key, np.zeros(found, np.float32)))
    with pytest.raises(CarveError) as info:
        _graph(n, ckpt=broken)
    err = info.value
    assert err.message.startswith(f"{key}: ")
    assert _shape_in(err.message, "expected") == expected
    assert _shape_in(err.message, "found") == found
    assert err.location == ck.path


@pytest.mark.parametrize("key", ["model.10.m.0.attn.qkv.conv.weight", "model.4.cv1.bn.bias",
                                 "model.23.one2one_cv3.2.2.weight"])
def test_missing_tensor_is_named(n, key):
    ck = n[0]
    broken = _with_tensors(ck, lambda t: t.pop(key))
    with pytest.raises(CarveError) as info:
        _graph(n, ckpt=broken)
    assert info.value.message.startswith(f"{key}: tensor missing")
    assert _shape_in(info.value.message, "expected shape") == tuple(ck.tensors[key].shape)
    assert info.value.location == ck.path


def test_other_scale_is_refused(n, s_ckpt):
    _, man, arch, _ = n
    assert s_ckpt.yaml.get("scale") == "s"
    with pytest.raises(CarveError) as info:
        build_graph(man, arch, s_ckpt)
    err = info.value
    assert err.location == s_ckpt.path
    assert "'s'" in err.message and "'n'" in err.message and man.path in err.message


def test_other_scale_builds_with_its_own_manifest(s_ckpt):
    """The positive control of the refusal above: the s checkpoint with manifests/yolo26s.yaml."""
    man = load_manifest(REPO / "manifests" / "yolo26s.yaml")
    g = build_graph(man, load_architecture(man), s_ckpt, 64)
    used = {w for op in g.ops for w in op.params.values()}
    assert used <= set(s_ckpt.tensors)


def test_scale_mismatch_without_yaml_is_caught_by_shapes(n, s_ckpt):
    """Even with the embedded yaml gone, an s checkpoint cannot pass for an n: a shape differs."""
    broken = dataclasses.replace(s_ckpt, yaml=None)
    with pytest.raises(CarveError) as info:
        _graph(n, ckpt=broken)
    assert "expected" in info.value.message and "found" in info.value.message


# ---------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------

def test_activation_follows_the_pickled_act(n):
    """Each Conv's act attr is 'silu' for nn.SiLU and 'none' for nn.Identity, as in the model."""
    from ultralytics.nn.modules.conv import Conv

    ck, _, _, model = n
    g = _graph(n)
    by_name = {op.name: op for op in g.ops}
    seen = set()
    for name, mod in model.named_modules():
        if isinstance(mod, Conv) and name in by_name:
            expect = {"SiLU": "silu", "Identity": "none"}[type(mod.act).__name__]
            assert by_name[name].attrs["act"] == expect, name
            seen.add(expect)
    assert seen == {"silu", "none"}
    # the documented examples
    assert ck.modules["model.9.cv1.act"].type.endswith("Identity")
    assert by_name["model.9.cv1"].attrs["act"] == "none"
    assert ck.modules["model.0.act"].type.endswith("SiLU")
    assert by_name["model.0"].attrs["act"] == "silu"
    # plain Conv2d (head outputs) have none
    assert by_name["model.23.one2one_cv2.0.2"].attrs["act"] == "none"


def _with_module(ck, path, type_name):
    modules = dict(ck.modules)
    modules[path] = ModuleInfo(type=type_name, attrs={})
    return dataclasses.replace(ck, modules=modules)


def test_activation_is_read_from_the_checkpoint_not_assumed(n):
    ck = n[0]
    g = _graph(n, ckpt=_with_module(ck, "model.0.act", "torch.nn.modules.linear.Identity"))
    assert next(op for op in g.ops if op.name == "model.0").attrs["act"] == "none"
    g = _graph(n, ckpt=_with_module(ck, "model.9.cv1.act", "torch.nn.modules.activation.SiLU"))
    assert next(op for op in g.ops if op.name == "model.9.cv1").attrs["act"] == "silu"


def test_unsupported_activation_is_refused(n):
    ck = n[0]
    with pytest.raises(CarveError) as info:
        _graph(n, ckpt=_with_module(ck, "model.3.act", "torch.nn.modules.activation.ReLU"))
    assert info.value.message.startswith("model.3.act: activation ReLU is not supported")
    assert info.value.location == ck.path
