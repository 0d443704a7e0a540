#!/usr/bin/env python3
"""The int8 peers: post-training static quantization of the exported fp32 models, from calibration images.

    build/bench-venv/bin/python bench/quantize.py --pt build/eval/models/yolo26n-shapes.pt --imgsz 320 \\
        --calib build/eval/calib

writes beside the checkpoint (bench/export.py's exports first, when missing), each skipped when it exists:
    <stem>.int8-qdq.onnx                          ONNX Runtime: quantize_static, QDQ, int8 activations (S8S8)
    <stem>.int8-qdq-u8.onnx                       the same with uint8 activations (U8S8; the CPU benchmark's)
    <stem>_int8_nncf_openvino_model/<stem>.xml    OpenVINO: NNCF post-training quantization (nncf.quantize)
    ultralytics/<stem>_int8.onnx                  Ultralytics' own exporter, format=onnx, quantize=8
    ultralytics/<stem>_int8_openvino_model/<stem>.xml            format=openvino, quantize=8 (NNCF)

Calibration: every image of --calib (PNG/JPEG, sorted by name) pre-processed as bench/peer.py does at run time
(LetterBox(imgsz, auto=False), BGR->RGB, /255), so the quantizers see exactly the tensors the peers are later fed.
The two direct quantizations keep YOLO26's end-to-end post-processing in float32: the nodes of the head module's
own forward (box decode, sigmoid, top-k, gathers: ONNX names /model.N/<op>, OpenVINO __module.model.N/<op>, N the
head), because one int8 scale cannot span box pixels and class scores at once; every convolution, the head's
included, and every other op the quantizer supports run in int8. ONNX Runtime: int8 weights per output channel
(symmetric), int8 activations per tensor (asymmetric), MinMax calibration (its defaults but per_channel=True, which
its documentation recommends for CNNs). onnxruntime-int8-u8 differs in one setting, uint8 activations: ONNX Runtime
1.32's CPU provider fuses only 12 of yolo26n's 102 QDQ convolutions into QLinearConv when the activations are int8
(the others run as DequantizeLinear -> float Conv -> QuantizeLinear, slower than the float32 model), all 102 and
the SiLUs (QLinearSigmoid, QLinearMul) when they are uint8; make eval measures the first, make bench both. NNCF: its defaults (preset PERFORMANCE: symmetric int8 weights per channel
and activations per tensor) with all calibration images (subset_size = their count).
Ultralytics' exports calibrate from a data yaml (<stem>-calib.yaml beside the checkpoint) whose train and val are the
same folder, through its own dataloader (which shuffles: torch.manual_seed(0) first, so that the order, which NNCF's
bias correction depends on, is the same every time), and choose their own settings (ONNX: only Conv/Gemm/MatMul
quantized; OpenVINO: NNCF preset MIXED, the head's decode ignored).

make eval builds these at 320 (build/eval/models/, emptied when the checkpoint or the calibration set change); the CPU
benchmark (bench/bench.py) builds the ONNX Runtime and NNCF ones at 640 in a folder of their own per checkpoint,
calibration set and input size (keyed_checkpoint: build/bench/int8/<stem>-<imgsz>-<key>/), so a model quantized
from other weights, other images or for another size is never picked up, and a change of any of them quantizes
anew without deleting the other folders.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
from pathlib import Path

os.environ.setdefault("YOLO_AUTOINSTALL", "false")
os.environ.setdefault("YOLO_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
PEERS = ("onnxruntime-int8", "onnxruntime-int8-u8", "openvino-int8", "ultralytics-onnx-int8",
         "ultralytics-openvino-int8")
ORT_PEERS = {"onnxruntime-int8": "int8", "onnxruntime-int8-u8": "uint8"}  # ONNX Runtime's: activation type


def artifact(pt: Path, peer: str) -> Path:
    """Where each int8 peer's model lives (beside the checkpoint)."""
    stem = pt.with_suffix("")
    ul = stem.parent / "ultralytics"
    return {
        "onnxruntime-int8": stem.parent / f"{stem.name}.int8-qdq.onnx",
        "onnxruntime-int8-u8": stem.parent / f"{stem.name}.int8-qdq-u8.onnx",
        "openvino-int8": stem.parent / f"{stem.name}_int8_nncf_openvino_model" / f"{stem.name}.xml",
        "ultralytics-onnx-int8": ul / f"{stem.name}_int8.onnx",
        "ultralytics-openvino-int8": ul / f"{stem.name}_int8_openvino_model" / f"{stem.name}.xml",
    }[peer]


def calibration_images(calib: Path) -> list[Path]:
    files = sorted(p for p in calib.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES) if calib.is_dir() else []
    if not files:
        raise SystemExit(f"bench/quantize.py: {calib}: no calibration images (.png, .jpg, .jpeg, .bmp)")
    return files


def cache_key(pt: Path, calib: Path, imgsz: int) -> str:
    """16 hex digits of the sha256 of what the int8 models are a function of: the checkpoint's bytes, the input size,
    and every calibration image's name and bytes (in calibration_images' order)."""
    h = hashlib.sha256()
    h.update(hashlib.sha256(Path(pt).read_bytes()).digest())
    h.update(f"imgsz={imgsz}\n".encode())
    for f in calibration_images(calib):
        h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def keyed_checkpoint(pt: Path, calib: Path, imgsz: int, root: Path) -> Path:
    """A copy of the checkpoint in root/<stem>-<imgsz>-<cache_key>/, beside which build() puts the fp32 exports and
    the int8 models (their names do not say the size or the images, the folder does). The copy is written last, through
    a temporary name, so a folder with the checkpoint in it is one whose key is right."""
    pt = Path(pt)
    folder = Path(root) / f"{pt.stem}-{imgsz}-{cache_key(pt, calib, imgsz)}"
    copy = folder / pt.name
    if not copy.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (pt.name + ".partial")
        shutil.copyfile(pt, tmp)
        tmp.replace(copy)
    return copy


def calibration_tensors(calib: Path, imgsz: int) -> list:
    """The (1,3,imgsz,imgsz) float32 inputs of the calibration images, pre-processed as bench/peer.py does."""
    import cv2
    from ultralytics.data.augment import LetterBox

    import peer

    letterbox = LetterBox((imgsz, imgsz), auto=False, scaleup=True, center=True)
    out = []
    for f in calibration_images(calib):
        img = cv2.imread(str(f))
        if img is None:
            raise SystemExit(f"bench/quantize.py: {f}: cannot read the calibration image")
        out.append(peer.to_tensor(img, letterbox))
    return out


def head_decode_onnx(names: list[str]) -> list[str]:
    """The nodes of the detection head's own forward (/model.N/<op>, N the last module): the float post-processing."""
    idx = [int(m.group(1)) for n in names if (m := re.match(r"/model\.(\d+)/", n))]
    if not idx:
        raise ValueError("no /model.N/ node names: not an Ultralytics ONNX export")
    head = re.compile(rf"/model\.{max(idx)}/[^/]+$")
    return [n for n in names if head.match(n)]


def head_decode_openvino(names: list[str]) -> list[str]:
    """The same for an OpenVINO IR converted from TorchScript (__module.model.N/<op>...)."""
    idx = [int(m.group(1)) for n in names if (m := re.match(r"__module\.model\.(\d+)/", n))]
    if not idx:
        raise ValueError("no __module.model.N/ operation names: not an Ultralytics OpenVINO export")
    prefix = f"__module.model.{max(idx)}/"
    return [n for n in names if n.startswith(prefix)]


def quantize_onnxruntime(onnx_fp32: Path, out: Path, tensors: list, activations: str = "int8") -> Path:
    """quantize_static, QDQ; activations "int8" (S8S8) or "uint8" (U8S8)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, \
        quantize_static

    model = onnx.load(str(onnx_fp32))
    name = model.graph.input[0].name
    exclude = head_decode_onnx([n.name for n in model.graph.node])
    del model

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(tensors)

        def get_next(self):
            x = next(self.it, None)
            return None if x is None else {name: x}

    tmp = out.with_name(out.name + ".partial")
    quantize_static(str(onnx_fp32), str(tmp), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8 if activations == "int8" else QuantType.QUInt8,
                    weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=exclude)
    tmp.replace(out)
    return out


def quantize_openvino(xml_fp32: Path, out: Path, tensors: list) -> Path:
    import logging

    import nncf
    import openvino as ov

    nncf.set_log_level(logging.WARNING)  # not a line for each operation it leaves alone

    model = ov.Core().read_model(str(xml_fp32))
    ignored = nncf.IgnoredScope(names=head_decode_openvino([op.get_friendly_name() for op in model.get_ordered_ops()]),
                                validate=False)
    q = nncf.quantize(model, nncf.Dataset(tensors), subset_size=len(tensors), ignored_scope=ignored)
    tmp = out.parent.with_name(out.parent.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ov.save_model(q, str(tmp / out.name), compress_to_fp16=False)
    shutil.rmtree(out.parent, ignore_errors=True)
    tmp.replace(out.parent)
    return out


def quantize_ultralytics(pt: Path, fmt: str, out: Path, calib: Path, imgsz: int) -> Path:
    """Ultralytics' own int8 export of a copy of the checkpoint in <dir>/ultralytics/ (its ONNX int8 export deletes
    the fp32 .onnx it starts from, so it must not share bench/export.py's folder)."""
    from ultralytics import YOLO

    work = out.parent if fmt == "onnx" else out.parent.parent
    work.mkdir(parents=True, exist_ok=True)
    copy = work / pt.name
    shutil.copyfile(pt, copy)
    data = work / f"{pt.stem}-calib.yaml"
    model = YOLO(str(copy))
    names = list(model.names.values())
    folder = calib.resolve()
    data.write_text(f"path: {folder}\ntrain: {folder}\nval: {folder}\nnames:\n"
                    + "".join(f"  {i}: {n}\n" for i, n in enumerate(names)))
    import torch

    torch.manual_seed(0)  # its calibration loader shuffles from torch's seed: the same order every time
    model.export(format=fmt, imgsz=imgsz, batch=1, device="cpu", quantize=8, data=str(data), nms=False,
                           fraction=1.0, **({"simplify": False} if fmt == "onnx" else {}))
    if not out.exists():
        raise SystemExit(f"bench/quantize.py: Ultralytics' {fmt} int8 export did not produce {out}")
    return out


def build(pt: Path, imgsz: int, calib: Path, peers=PEERS, log=print) -> dict[str, Path]:
    """The int8 models of `peers` (cached: an existing file is kept)."""
    todo = [p for p in peers if not artifact(pt, p).exists()]
    fp32 = export.export(pt, imgsz, ["onnx", "openvino"]) if {*ORT_PEERS, "openvino-int8"} & set(todo) else {}
    tensors = calibration_tensors(calib, imgsz) if todo else []
    for p in todo:
        out = artifact(pt, p)
        log(f"quantizing {p} with {len(tensors)} calibration images from {calib} -> {out}")
        if p in ORT_PEERS:
            quantize_onnxruntime(fp32["onnx"], out, tensors, ORT_PEERS[p])
        elif p == "openvino-int8":
            quantize_openvino(fp32["openvino"], out, tensors)
        else:
            quantize_ultralytics(pt, p.split("-")[1], out, calib, imgsz)
    return {p: artifact(pt, p) for p in peers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pt", type=Path, required=True, help="Ultralytics checkpoint (its exports go beside it)")
    ap.add_argument("--imgsz", type=int, required=True)
    ap.add_argument("--calib", type=Path, required=True, help="folder of calibration images")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS))
    a = ap.parse_args()
    if not a.pt.is_file():
        sys.exit(f"bench/quantize.py: {a.pt}: no such checkpoint")
    for p, path in build(a.pt, a.imgsz, a.calib, a.peers.split(",")).items():
        print(f"{p}: {path}")


if __name__ == "__main__":
    main()
