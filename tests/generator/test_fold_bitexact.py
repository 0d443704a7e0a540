"""fold_bn gives the very weights of Ultralytics' fused model (bit for bit), so the generated C and
PyTorch start from the same numbers and differ only by arithmetic order."""

import copy
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "generator"))

torch = pytest.importorskip("torch")
pytest.importorskip("ultralytics")

from carve.checkpoint import read_checkpoint  # noqa: E402
from carve.frontend.yolo26 import build_graph  # noqa: E402
from carve.manifest import load_architecture, load_manifest  # noqa: E402
from carve.passes import optimize  # noqa: E402


def test_folded_weights_are_bit_identical_to_ultralytics_fuse(tmp_path):
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(0)
    model = DetectionModel("yolo26n.yaml", verbose=False)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # non-trivial BN: random gamma, beta, running statistics
        for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
            bn.weight.copy_(torch.rand(bn.weight.shape, generator=g) + 0.5)
            bn.bias.copy_(torch.randn(bn.bias.shape, generator=g))
            bn.running_mean.copy_(torch.randn(bn.bias.shape, generator=g))
            bn.running_var.copy_(torch.rand(bn.bias.shape, generator=g) * 3 + 0.01)
    pt = tmp_path / "n.pt"
    torch.save({"model": copy.deepcopy(model).half(), "ema": None, "train_args": {"task": "detect"}}, pt)

    man = load_manifest(ROOT / "manifests" / "yolo26n.yaml")
    graph = optimize(build_graph(man, load_architecture(man), read_checkpoint(pt)))

    ref = copy.deepcopy(model).half().float()  # the checkpoint's values, as Ultralytics loads them
    ref.model[-1].end2end = True
    sd = {k: v.numpy() for k, v in ref.fuse(verbose=False).state_dict().items()}
    convs = [op for op in graph.ops if op.kind == "conv2d"]
    assert len(convs) > 100
    for op in convs:
        key = f"{op.name}.conv.weight" if f"{op.name}.conv.weight" in sd else f"{op.name}.weight"
        assert np.array_equal(graph.weights[op.params["weight"]], sd[key]), key
        assert np.array_equal(graph.weights[op.params["bias"]], sd[key[: -len("weight")] + "bias"]), key
