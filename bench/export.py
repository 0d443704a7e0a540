#!/usr/bin/env python3
"""Export one Ultralytics checkpoint to every peer's format with Ultralytics' own exporter.

    python3 bench/export.py --pt build/bench/work/yolo26n.pt --imgsz 640

writes beside the checkpoint (the exporter's own names):
    yolo26n.onnx                        ONNX (opset chosen by Ultralytics), for ONNX Runtime and OpenVINO
    yolo26n_openvino_model/             OpenVINO IR (fp32), for OpenVINO
    yolo26n_executorch_model/model.pte  ExecuTorch program lowered to the XNNPACK delegate

Each export is skipped when its artifact already exists. YOLO26's end-to-end head (one-to-one branch, decode, top-k)
is inside every exported graph (nms=False keeps it for ONNX and OpenVINO): the outputs are the (1, 300, 6 + extra)
rows, as in carve (segment: and the (1, 32, 160, 160) prototypes). Ultralytics' own ExecuTorch export drops the
end-to-end branch ("no top-k support"); this script lowers the same fused module Ultralytics exports, with the
end-to-end branch on, through torch.export + to_edge_transform_and_lower(XnnpackPartitioner): the convolutions run
in the XNNPACK delegate, the top-k and gathers in ExecuTorch's portable kernels. Ultralytics' auto-install is turned
off: the peers come from bench/requirements.txt (make bench installs them into build/bench-venv).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("YOLO_AUTOINSTALL", "false")
os.environ.setdefault("YOLO_OFFLINE", "1")

FORMATS = {
    "onnx": lambda stem: stem.with_suffix(".onnx"),
    "openvino": lambda stem: stem.parent / f"{stem.name}_openvino_model" / f"{stem.name}.xml",
    "executorch": lambda stem: stem.parent / f"{stem.name}_executorch_model" / "model.pte",
}


def artifact(pt: Path, fmt: str) -> Path:
    return FORMATS[fmt](pt.with_suffix(""))


def export(pt: Path, imgsz: int, formats: list[str]) -> dict[str, Path]:
    from ultralytics import YOLO

    out = {}
    for fmt in formats:
        path = artifact(pt, fmt)
        if not path.exists() and fmt == "executorch":
            export_executorch(pt, imgsz, path)
        elif not path.exists():
            # nms=False keeps the end-to-end head; simplify=False: onnxslim is not a bench dependency.
            kw = {"simplify": False} if fmt == "onnx" else {}
            YOLO(str(pt)).export(format=fmt, imgsz=imgsz, batch=1, device="cpu", half=False, nms=False, **kw)
        if not path.exists():
            sys.exit(f"bench/export.py: {pt}: the {fmt} export did not produce {path}")
        out[fmt] = path
    return out


def export_executorch(pt: Path, imgsz: int, path: Path) -> None:
    """The fused Ultralytics module in export mode, end-to-end head on, lowered to ExecuTorch + XNNPACK."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from ultralytics import YOLO
    from ultralytics.nn.modules import Detect

    model = YOLO(str(pt)).model.float()
    model.end2end = True  # before fuse(): fusing then drops the one-to-many branch, as the exporter does
    model = model.fuse().eval()
    for m in model.modules():
        if isinstance(m, Detect):
            m.export, m.format, m.dynamic = True, "executorch", False
    im = torch.zeros(1, 3, imgsz, imgsz)
    with torch.no_grad():
        model(im)  # builds the anchors for this input size, as the exporter's dry run does
        program = to_edge_transform_and_lower(torch.export.export(model, (im,)), partitioner=[XnnpackPartitioner()])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(program.to_executorch().buffer)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pt", type=Path, required=True, help="Ultralytics checkpoint (tools/oracle.py make-checkpoint)")
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--formats", default=",".join(FORMATS), help="comma-separated subset of " + ",".join(FORMATS))
    a = ap.parse_args()
    if not a.pt.is_file():
        sys.exit(f"bench/export.py: {a.pt}: no such checkpoint")
    for fmt, path in export(a.pt, a.imgsz, a.formats.split(",")).items():
        print(f"{fmt}: {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
