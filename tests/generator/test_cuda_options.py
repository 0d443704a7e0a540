"""The cuda backend renders every weight format and dtype (issue 7), generator side only.

For blob / c-array / file x f32 / f16, ``compile_model(..., "cuda", ...)`` gives: the weight source of the
format (``.S`` + ``.bin``, ``_weights.c``, or ``<name>.weights`` with nothing linked), the stored payload (f16:
the checkpoint's halves and the table of pieces that rebuild the f32 blob from them), for file a header whose CRC-32 and size are the ones compiled
into ``<name>.cu``'s ``k_weights_expect``, ``runtime/carve_weights.c`` where it is needed, and the
``create_with`` API with its size constants in the header. Building and running these packages is
tests/cuda/cuda_options.py (emulated) and tests/cuda/nvcc_packages.py (nvcc).
"""

from __future__ import annotations

import re
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "generator"))
sys.path.insert(0, str(HERE))

from carve import compiler  # noqa: E402
from carve.errors import CarveError  # noqa: E402

pytest.importorskip("torch")

MANIFEST = REPO / "manifests" / "yolo26n.yaml"
IMGSZ = 64


@pytest.fixture(scope="module")
def weights(irsim_yolo26n_pt):
    return irsim_yolo26n_pt  # conftest.py: irsim's yolo26n, seed 0


@pytest.fixture(scope="module")
def packages(weights):
    return {(fmt, dtype): compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ,
                                                 {"weights_format": fmt, "weights_dtype": dtype}).files
            for fmt in ("blob", "c-array", "file") for dtype in ("f32", "f16")}


def _define(header: str, name: str) -> int:
    m = re.search(rf"^#define {name} (\d+)u", header, re.M)
    assert m, f"{name} not defined"
    return int(m.group(1))


@pytest.mark.parametrize("fmt", ["blob", "c-array", "file"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_cuda_weight_formats(packages, fmt, dtype):
    files = packages[fmt, dtype]
    header, cu = files["yolo26n.h"].decode(), files["yolo26n.cu"].decode()
    f32_blob = packages["blob", "f32"]["yolo26n_weights.bin"]
    # f16: the checkpoint's halves (backends/f16.py; the same bytes in every format), half the f32 blob and a little
    # (each convolution's BatchNorm parameters)
    payload = f32_blob if dtype == "f32" else packages["blob", "f16"]["yolo26n_weights.bin"]
    assert dtype == "f32" or 0.45 * len(f32_blob) < len(payload) < 0.52 * len(f32_blob)
    assert _define(header, "YOLO26N_WEIGHT_BYTES") == len(f32_blob)
    assert _define(header, "YOLO26N_WEIGHT_STORAGE_BYTES") == len(payload)
    linked = {"yolo26n_weights.S", "yolo26n_weights.bin", "yolo26n_weights.c"} & set(files)
    needs_weights_rt = fmt == "file" or dtype == "f16"
    assert ("runtime/carve_weights.c" in files) == needs_weights_rt
    assert ('#include "carve_weights.h"' in cu) == needs_weights_rt
    if fmt == "blob":
        assert linked == {"yolo26n_weights.S", "yolo26n_weights.bin"}
        assert files["yolo26n_weights.bin"] == payload
    elif fmt == "c-array":
        assert linked == {"yolo26n_weights.c"}
        c_type = "float" if dtype == "f32" else "uint16_t"
        assert f"const {c_type}* const yolo26n_weights" in files["yolo26n_weights.c"].decode()
    else:
        assert not linked and "k_weights_expect" in cu and "weights_path" in header
        data = files["yolo26n.weights"]
        magic, version, code, size, crc = struct.unpack_from("<8sIIQI", data)
        assert (magic, version, code, size) == (b"CARVEWTS", 1, {"f32": 1, "f16": 2}[dtype], len(payload))
        assert data[64:] == payload and crc == zlib.crc32(payload)
        assert f"0x{crc:08x}u" in cu and f"{len(payload)}u," in cu
        assert _define(header, "YOLO26N_WEIGHTS_FILE_BYTES") == len(data)
        assert "CMakeLists.txt" in files and "YOLO26N_WEIGHTS_FILE" in files["CMakeLists.txt"].decode()
    if dtype == "f16":  # rebuilt on the host by carve_weights_expand (tests/cuda/cuda_options.py runs it)
        assert "static const carve_weights_piece k_weight_pieces[NUM_WEIGHT_PIECES]" in cu
        assert "carve_weights_expand(stored, " in cu
    # create_with and its compile-time sizes
    assert "carve_status yolo26n_create_with(const yolo26n_options* options, const yolo26n_buffers* buffers," in header
    assert _define(header, "YOLO26N_BLAS_WORKSPACE_BYTES") == 32 << 20
    assert _define(header, "YOLO26N_CONTEXT_BYTES") % 64 == 0
    assert _define(header, "YOLO26N_DEVICE_SCRATCH_BYTES") % 256 == 0
    assert f"--weights-format {fmt} --weights-dtype {dtype}" in header.splitlines()[0]


def test_cuda_options_deterministic(weights, packages):
    again = compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ,
                                   {"weights_format": "file", "weights_dtype": "f16"}).files
    assert again == packages["file", "f16"]


# ---- --batch (issue 20) ---------------------------------------------------------------------------------


def test_cuda_batch_sizes(weights):
    """--batch N: the header's batch constants and an arena of N slices; batch 1 keeps the single-image arena."""
    one = compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ, {"batch": 1}).files
    four = compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ, {"batch": 4}).files
    h1, h4 = one["yolo26n.h"].decode(), four["yolo26n.h"].decode()
    assert re.search(r"^#define YOLO26N_BATCH 1\b", h1, re.M) and re.search(r"^#define YOLO26N_BATCH 4\b", h4, re.M)
    per_image = _define(h1, "YOLO26N_IMAGE_ARENA_BYTES")
    assert _define(h1, "YOLO26N_ARENA_BYTES") == per_image
    assert _define(h4, "YOLO26N_IMAGE_ARENA_BYTES") == per_image and _define(h4, "YOLO26N_ARENA_BYTES") == 4 * per_image
    assert _define(h4, "YOLO26N_CONTEXT_BYTES") > _define(h1, "YOLO26N_CONTEXT_BYTES")  # 4 images' host rows
    banner = [f["yolo26n.cu"].decode().splitlines()[0] for f in (one, four)]  # "// Generated by carve ... (...)"
    assert "Generated by carve" in banner[1] and "--batch 4)" in banner[1] and "--batch" not in banner[0]
    for h in (h1, h4):  # the batch / asynchronous API of detect with the e2e head
        assert "yolo26n_run_images(" in h and "yolo26n_enqueue_tensors(" in h and "yolo26n_pinned_bytes(" in h
    # one launch per layer op for the whole batch: the one-image plan scaled (storage offsets x BATCH), the
    # convolutions' descriptors carry the image count, the pixel-wise calls BATCH x the pixels; no per-image loop
    # but the head's
    cu1, cu4 = one["yolo26n.cu"].decode(), four["yolo26n.cu"].decode()
    assert re.search(r"^#define S_\w+ +\(\(size_t\)BATCH \* \d+u\)", cu4, re.M)
    assert not re.search(r"^#define S_\w+ +\(", cu1, re.M)  # batch 1: plain offsets
    for cu in (cu1, cu4):
        assert re.search(r"\.batch = BATCH, \.slot = \d+\},", cu)  # k_conv
        assert "m->img" not in cu and "carve_cu_maxpool2d_chain(&m->cu, BATCH, " in cu
        # the attention with its pe: the image count from the pe's k_conv descriptor (its .batch = BATCH above);
        # layer 22's on lane 0's context (the neck runs beside the head's early lanes)
        assert len(re.findall(r"carve_cu_attention_pe\(&m->cu, [^;]*&k_conv\[\d+\]", cu)) == 1
        assert len(re.findall(r"carve_cu_attention_pe\(&m->lanes\[0\]\.cu, [^;]*&k_conv\[\d+\]", cu)) == 1
    # the head once for the batch too (carve_cu_e2e_postprocess_batch), no per-image loop anywhere in the forward
    assert len(re.findall(r"carve_cu_e2e_postprocess_batch\(&m->cu, levels, 3, 80, 0, \d+, CARVE_E2E_DETECT, BATCH,",
                          cu4)) == 1
    assert "carve_cu_e2e_postprocess_batch(" not in cu1 and "carve_cu_e2e_postprocess_task(&m->cu, levels" in cu1
    assert "carve_cu_e2e_batch_scratch_bytes(ANCHORS, YOLO26N_NUM_CLASSES, YOLO26N_MAX_DETECTIONS, BATCH)" in cu4
    for cu in (cu1, cu4):
        assert "// image b: its pixels of each level" not in cu


def test_cuda_batch_fp16(weights):
    """--batch with --precision fp16: the float32 staging area batched too (F() scales one image's offsets); the head
    reads image 0's half maps (image b's follow them)."""
    files = compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ, {"batch": 3, "precision": "fp16"}).files
    h, cu = files["yolo26n.h"].decode(), files["yolo26n.cu"].decode()
    assert _define(h, "YOLO26N_ARENA_BYTES") == 3 * _define(h, "YOLO26N_IMAGE_ARENA_BYTES")
    assert "return m->f32 + (size_t)BATCH * off;" in cu and "m->arena + (size_t)BATCH * F16_HALF_BYTES" in cu
    assert "BATCH == 1" not in cu
    assert cu.count("carve_cu_e2e_postprocess_batch(&m->cu, levels,") == 1  # on the batch's half maps, in place
    head = cu[cu.index("const carve_cu_level_h levels[3] = {"):cu.index("carve_cu_e2e_postprocess_batch(&m->cu")]
    assert "image 0's" in head and "+ b * " not in head and "carve_cu_f16_to_f32_view" not in cu
    # the attention's scratch for the batch (per head when that launches less); layer 22's again in lane 0's slice
    assert cu.count("carve_cu_attention_scratch_floats(BATCH, ") == 3
    lane = cu[cu.index("static size_t lane_scratch_bytes(int lane) {"):]
    assert lane[:lane.index("\n}\n")].count("carve_cu_attention_scratch_floats(BATCH, ") == 1


def test_cuda_batch_classify(seg_cls_checkpoints):
    """--batch N for classify: the classify batch API, the head's pool, linear layer (one GEMM) and softmax once for
    the batch, N images' probabilities in the host copy; fp16: the float32 probabilities of every image in the
    staging area."""
    manifest = REPO / "manifests" / "yolo26n-cls.yaml"
    for precision in ("fp32", "fp16"):
        files = compiler.compile_model(str(manifest), "cuda", str(seg_cls_checkpoints["classify"]), IMGSZ,
                                       {"batch": 3, "precision": precision}).files
        h, cu = files["yolo26n_cls.h"].decode(), files["yolo26n_cls.cu"].decode()
        assert re.search(r"^#define YOLO26N_CLS_BATCH 3\b", h, re.M)
        for api in ("run_images", "run_tensors", "batch_probs", "enqueue_images", "enqueue_tensors", "device_probs",
                    "pinned_probs", "pinned_top", "staging_image"):
            assert f"yolo26n_cls_{api}(" in h and f"yolo26n_cls_{api}(" in cu
        assert "_detection" not in h and "ROWS_PER_IMAGE" not in h
        assert cu.count("TRY(carve_cu_global_avgpool(&m->cu, BATCH, ") == 1
        assert cu.count("TRY(carve_cu_linear(&m->cu, BATCH, ") == 1
        assert cu.count("TRY(carve_cu_softmax(&m->cu, BATCH, ") == 1
        assert "float host_out[BATCH * YOLO26N_CLS_NUM_CLASSES];" in cu
        assert "m->host_out, probs_dev(m, 0), BATCH * YOLO26N_CLS_NUM_CLASSES * sizeof(float)," in cu
        staging = "m->f32 + (size_t)BATCH * F16_ROWS_OFF" if precision == "fp16" else "m->arena + OUTPUT0_OFF"
        assert staging in cu[cu.index("static inline const float* probs_dev("):]


def test_cuda_batch_segment(seg_cls_checkpoints):
    """--batch N for segment: the detection batch API plus each image's prototypes and masks; the prototypes'
    transposed convolution over the batch's rows (its scratch too), every image's prototypes in the host copy (fp16:
    widened for the batch in one launch)."""
    manifest = REPO / "manifests" / "yolo26n-seg.yaml"
    for precision in ("fp32", "fp16"):
        files = compiler.compile_model(str(manifest), "cuda", str(seg_cls_checkpoints["segment"]), IMGSZ,
                                       {"batch": 2, "precision": precision}).files
        h, cu = files["yolo26n_seg.h"].decode(), files["yolo26n_seg.cu"].decode()
        for api in ("run_images", "enqueue_images", "batch_rows", "batch_protos", "device_protos",
                    "batch_mask_scratch_bytes", "batch_mask"):
            assert f"yolo26n_seg_{api}(" in h and f"yolo26n_seg_{api}(" in cu
        assert cu.count("TRY(carve_cu_deconv2d(&m->lanes[") == 1 and ", BATCH * 8, 8, 64, 64, 2, " in cu
        assert cu.count("carve_cu_deconv2d_scratch_floats(BATCH * 8, 8, 2, 64)") == 2  # the scratch, the lane's
        assert "float host_protos[BATCH * PROTO_FLOATS];" in cu
        assert "m->host_protos, protos_dev(m, 0), BATCH * PROTO_FLOATS * sizeof(float)," in cu
        if precision == "fp16":
            assert re.search(r"carve_cu_f16_to_f32\(&m->cu, \(const uint16_t\*\)A\(m, S_OUTPUT1\), "
                             r"F\(m, F16_PROTOS_OFF\), BATCH \* \d+\)", cu)


def test_cuda_batch_nms(weights):
    """--batch N with --head nms: the NMS once for the batch (carve_cu_nms_postprocess_batch, fp16 on the half
    maps), each image's row count in the scratch's tail after the conf (sized for the batch) and in the pinned
    results after the rows, the counts' accessors and options.enqueue_conf; batch 1 keeps the one-image call and
    has the asynchronous API too."""
    for precision in ("fp32", "fp16"):
        files = compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ,
                                       {"batch": 3, "head": "nms", "precision": precision}).files
        h, cu = files["yolo26n.h"].decode(), files["yolo26n.cu"].decode()
        for api in ("run_images", "enqueue_tensors", "batch_rows", "device_row_counts", "pinned_row_counts"):
            assert f"yolo26n_{api}(" in h and f"yolo26n_{api}(" in cu
        assert "#define YOLO26N_HEAD_NMS 1" in h and "float enqueue_conf;" in h
        rows = "F(m, F16_ROWS_OFF)" if precision == "fp16" else "A(m, OUTPUT0_OFF)"
        assert re.search(r"carve_cu_nms_postprocess_batch\(&m->cu, levels, 3, 80, 0, CARVE_E2E_DETECT, m->nms_param,"
                         rf"\s+0\.7, 0, 84, BATCH, m->scratch, {re.escape(rows)},", cu)  # k: min(300, anchors)
        assert "carve_cu_nms_postprocess(" not in cu
        assert "carve_cu_nms_batch_scratch_bytes(ANCHORS, YOLO26N_MAX_DETECTIONS, BATCH)" in cu
        assert "(sizeof(float) + BATCH * sizeof(uint32_t) + CARVE_CU_NMS_PARAM_BYTES - 1)" in cu
        assert "uint32_t num_rows[BATCH];" in cu and "*rows = m->num_rows[image];" in cu
        assert "m->pinned + PINNED_COUNTS_OFF, m->nms_param + 1, BATCH * sizeof(uint32_t)," in cu
        assert "TRY(upload_conf(m, m->enqueue_conf));" in cu
    one = compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ, {"head": "nms"}).files
    h1, cu1 = one["yolo26n.h"].decode(), one["yolo26n.cu"].decode()
    assert "carve_cu_nms_postprocess(&m->cu, levels," in cu1 and "carve_cu_nms_postprocess_batch(" not in cu1
    assert "yolo26n_enqueue_images(" in h1 and "yolo26n_device_row_counts(" in h1
    e2e = compiler.compile_model(str(MANIFEST), "cuda", str(weights), IMGSZ, {}).files["yolo26n.h"].decode()
    assert "#define YOLO26N_HEAD_NMS 0" in e2e and "row_counts(" not in e2e and "enqueue_conf" not in e2e


@pytest.mark.parametrize("backend, options, message", [
    ("xnnpack", {"batch": 2}, "backend 'xnnpack' runs one image per run"),
    ("portable", {"batch": 2}, "backend 'portable' runs one image per run"),
    ("cuda", {"batch": 0}, "expected an integer from 1 to 1024"),
    ("cuda", {"batch": True}, "expected an integer from 1 to 1024"),
])
def test_cuda_batch_refused(weights, backend, options, message):
    with pytest.raises(CarveError, match=re.escape(message)):
        compiler.compile_model(str(MANIFEST), backend, str(weights), IMGSZ, options)
