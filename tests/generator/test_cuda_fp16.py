"""--precision fp16 (issue 20), generator side: what an fp16 cuda package holds (every task), and what is refused.

Building and running fp16 packages is tests/cuda/cuda_f16.py (emulated, against Ultralytics), their kernels
tests/cuda/test_f16.cu, nvcc tests/cuda/nvcc_packages.py.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))

from carve import compiler  # noqa: E402
from carve.errors import CarveError  # noqa: E402

MANIFEST = REPO / "manifests" / "yolo26n-shapes.yaml"
PT = REPO / "assets" / "yolo26n-shapes.pt"
IMGSZ = 64


@pytest.fixture(scope="module")
def packages():
    out = {}
    for precision in ("fp32", "fp16"):
        for head in ("e2e", "nms"):
            out[precision, head] = compiler.compile_model(str(MANIFEST), "cuda", str(PT), IMGSZ,
                                                          {"precision": precision, "head": head}).files
    out["fp16", "file"] = compiler.compile_model(str(MANIFEST), "cuda", str(PT), IMGSZ,
                                                 {"precision": "fp16", "weights_format": "file"}).files
    return out


def _define(text: str, name: str) -> int:
    m = re.search(rf"^#define {name} (\d+)u", text, re.M)
    assert m, f"{name} not defined"
    return int(m.group(1))


@pytest.mark.parametrize("head", ["e2e", "nms"])
def test_fp16_package(packages, head):
    f32, f16 = packages["fp32", head], packages["fp16", head]
    h32, h16 = f32["yolo26n_shapes.h"].decode(), f16["yolo26n_shapes.h"].decode()
    cu = f16["yolo26n_shapes.cu"].decode()
    # weights: stored as the checkpoint's halves (about half the bytes), held as halves on the device
    blob32 = f32["yolo26n_shapes_weights.bin"]
    assert 0.45 * len(blob32) < len(f16["yolo26n_shapes_weights.bin"]) < 0.52 * len(blob32)
    assert _define(h16, "YOLO26N_SHAPES_WEIGHT_BYTES") * 2 == _define(h32, "YOLO26N_SHAPES_WEIGHT_BYTES")
    assert "halves[i] = __float2half(chunk[i]);" in cu
    # the arena: the plan's activations as halves, then the float32 staging area
    half_bytes, f32_floats = _define(cu, "F16_HALF_BYTES"), _define(cu, "F16_F32_FLOATS")
    arena16, arena32 = _define(h16, "YOLO26N_SHAPES_ARENA_BYTES"), _define(h32, "YOLO26N_SHAPES_ARENA_BYTES")
    assert half_bytes % 256 == 0 and arena32 / 2 <= half_bytes < arena32 / 2 + 256
    assert arena16 >= half_bytes + 4 * f32_floats and f32_floats >= IMGSZ * IMGSZ * 3
    # the half runtime and the input's cast
    assert "runtime/carve_cuda_f16.cu" in f16 and "runtime/carve_cuda_f16.cu" not in f32
    assert '#include "carve_cuda_f16.h"' in cu and "typedef __half act_t;" in cu
    assert cu.count("carve_cu_f32_to_f16(&m->cu, input_f32(m, b), input_dev(m, b), INPUT_FLOATS)") == 1  # input_done
    assert "return F(m, 0) + b * INPUT_FLOATS;" in cu  # input_f32: image b's float32 input in the staging area
    assert cu.count("TRY(input_done(m, ") == 1  # only a host tensor's upload is cast
    # the letterbox (run_image, run_images, enqueue) and a device tensor's layout change write the halves in place
    assert cu.count("YOLO26N_SHAPES_INPUT_H, input_dev(m, ") >= 1
    assert "carve_cu_nchw_to_nhwc_batch(&m->cu, tensors, BATCH," in cu or "_enqueue_tensors" not in cu
    # the head reads the half maps in place (no float32 copies, no casts), its rows in float32 in the staging area
    assert "carve_cu_f16_to_f32_view" not in cu and cu.count("const carve_cu_level_h levels[3] = {") == 1
    levels = re.search(r"const carve_cu_level_h levels\[3\] = \{[^}]*\n((?:\s*\{A\(m, .*\},\n){3})\s*\};", cu)
    assert levels, "the head's levels: three rows of arena views"
    post = "carve_cu_nms_postprocess" if head == "nms" else "carve_cu_e2e_postprocess_task"
    assert re.search(rf"{post}\(&m->cu, levels, 3,[^;]*F\(m, F16_ROWS_OFF\)", cu, re.S)
    # the staging area: the float32 input or the rows, whichever is larger (one image's)
    rows = math.prod(int(re.search(rf"^#define YOLO26N_SHAPES_{n} (\d+) ", h16, re.M).group(1))
                     for n in ("MAX_DETECTIONS", "ROW_LEN"))
    assert f32_floats == max(-(-rows // 16) * 16, IMGSZ * IMGSZ * 3)
    assert "--precision fp16" in cu.splitlines()[0] and "--precision" not in f32["yolo26n_shapes.cu"].decode()
    # the fp32 package keeps its float32 source
    assert "typedef float act_t;" in f32["yolo26n_shapes.cu"].decode()


def test_fp16_weights_file(packages):
    files = packages["fp16", "file"]
    cu = files["yolo26n_shapes.cu"].decode()
    assert "CARVE_WEIGHTS_F16" in cu and "yolo26n_shapes.weights" in files
    payload = files["yolo26n_shapes.weights"][64:]
    assert payload == packages["fp16", "e2e"]["yolo26n_shapes_weights.bin"]


def test_fp16_weights_are_the_checkpoints_halves():
    """The halves stored are the checkpoint's own (a checkpoint saved by Ultralytics is float16: no rounding at
    generation, no warning); the device's halves are the fold's float32 rounded once, at create."""
    r = compiler.compile_model(str(MANIFEST), "cuda", str(PT), IMGSZ, {"precision": "fp16"})
    assert r.summary["precision"] == "fp16" and r.summary["warnings"] == []
    stored = np.frombuffer(r.files["yolo26n_shapes_weights.bin"], dtype="<f2").astype(np.float32)
    assert np.isfinite(stored).all() and stored.std() > 0


@pytest.mark.parametrize("backend", ["portable", "xnnpack"])
def test_cpu_backends_refuse_fp16(tmp_path, backend):
    out = tmp_path / "pkg"
    p = subprocess.run([sys.executable, "-m", "carve", "generate", str(MANIFEST), "--backend", backend,
                        "--checkpoint", str(PT), "--imgsz", str(IMGSZ), "--precision", "fp16", "--out", str(out)],
                       cwd=REPO / "generator", capture_output=True, text=True)
    assert p.returncode != 0 and not out.exists()
    assert f"--precision fp16: backend '{backend}'" in p.stderr and "int8" in p.stderr


def test_fp16_refusals():
    with pytest.raises(CarveError, match="calibration images are for --precision int8 .the precision is fp16"):
        compiler.precision_options({"precision": "fp16", "calib": "/tmp"})
    with pytest.raises(CarveError, match="not one of fp32, int8, fp16"):
        compiler.precision_options({"precision": "fp8"})



def test_fp16_segment_package(seg_cls_checkpoints):
    """Segment in half: the prototypes' transposed convolution by its half overload, the prototypes widened to
    float32 into the staging area after the head (on the run's stream, after the lanes' join), fetched from there."""
    manifest = REPO / "manifests" / "yolo26n-seg.yaml"
    files = compiler.compile_model(str(manifest), "cuda", str(seg_cls_checkpoints["segment"]), 64,
                                   {"precision": "fp16"}).files
    cu, h = files["yolo26n_seg.cu"].decode(), files["yolo26n_seg.h"].decode()
    assert "typedef __half act_t;" in cu and "runtime/carve_cuda_f16.cu" in files
    assert cu.count("TRY(carve_cu_deconv2d(") == 1
    rows = math.prod(int(re.search(rf"^#define YOLO26N_SEG_{n} (\d+) ", h, re.M).group(1))
                     for n in ("MAX_DETECTIONS", "ROW_LEN"))
    protos = math.prod(int(re.search(rf"^#define YOLO26N_SEG_{n} (\d+)", h, re.M).group(1))
                       for n in ("PROTO_H", "PROTO_W", "NUM_PROTOS"))
    # the staging area: the float32 input, or the rows then the prototypes (16-float aligned)
    assert _define(cu, "F16_PROTOS_OFF") == -(-rows // 16) * 16
    assert _define(cu, "F16_F32_FLOATS") == max(-(-rows // 16) * 16 + protos, 64 * 64 * 3)
    head = cu[cu.index("TRY(lanes_join(m, "):]
    cast = f"TRY(carve_cu_f16_to_f32(&m->cu, (const uint16_t*)A(m, S_OUTPUT1), F(m, F16_PROTOS_OFF), BATCH * {protos}));"
    assert cu.count(cast) == 1 and head.index("carve_cu_e2e_postprocess_task(") < head.index(cast)
    assert "cudaMemcpyAsync(m->host_protos, protos_dev(m, 0), BATCH * PROTO_FLOATS * sizeof(float)," in cu
    assert "return m->f32 + (size_t)BATCH * F16_PROTOS_OFF + b * PROTO_FLOATS;" in cu  # protos_dev


def test_fp16_classify_package(seg_cls_checkpoints):
    """Classify in half: pooling and linear layer in half, the softmax's probabilities in float32 in the staging
    area, where the fetch and the last layer's callback read them; the device pre-processing writes halves."""
    manifest = REPO / "manifests" / "yolo26n-cls.yaml"
    files = compiler.compile_model(str(manifest), "cuda", str(seg_cls_checkpoints["classify"]), 64,
                                   {"precision": "fp16"}).files
    cu = files["yolo26n_cls.cu"].decode()
    assert "typedef __half act_t;" in cu and "runtime/carve_cuda_f16.cu" in files
    assert cu.count("TRY(carve_cu_global_avgpool(") == 1 and cu.count("TRY(carve_cu_linear(") == 1
    assert cu.count("TRY(carve_cu_softmax(&m->cu, BATCH, 1000, A(m, S_MODEL_10_LINEAR), F(m, F16_ROWS_OFF)));") == 1
    assert "cudaMemcpyAsync(m->host_out, probs_dev(m, 0), BATCH * YOLO26N_CLS_NUM_CLASSES * sizeof(float)," in cu
    assert "return m->f32 + (size_t)BATCH * F16_ROWS_OFF + b * YOLO26N_CLS_NUM_CLASSES;" in cu  # probs_dev
    assert "TRY(rows_done(m, 10, 1, YOLO26N_CLS_NUM_CLASSES));" in cu
    assert re.search(r"carve_cu_classify_preprocess\(&m->cu, [^;]*input_dev\(m, 0\)", cu, re.S)
    assert _define(cu, "F16_F32_FLOATS") == max(1008, 64 * 64 * 3)
