#!/bin/sh
# Checks tools/gpu_carry/prepare_bench.sh + bench.sh without a GPU (about 3 minutes on 2 cores; not in CI):
# a carry at 64x64 with batches 1 and 2, built with the emulation header, PyTorch eager on the CPU, then the
# table must hold carve TF32, carve strict-fp32, carve fp16, carve fp16 --head nms and PyTorch rows for both
# batches, and the fused-convolution rows of TF32 and fp16 (--fused-conv), which must report fewer launches per forward
# (graph_nodes) than the same package without it, the no-tune rows (no convolution timed at create, where the other
# rows, run with --tune, report some timed), and the serial-head rows (--serial-head) as many as the lanes (all in
# series: graph_depth, the lanes fewer), the late-head rows (--late-head) as many launches as the package's own
# and none fewer in series (only the lanes' edges differ), the fused-attention rows (--fused-attention) 8 fewer
# (yolo26n's 2 attention layers: 1 launch with the pe instead of the default GEMM path's 4 and the pe's); every profile
# line its layers' times inside the marked graph (graph_layers) and the table the Detect target's line; a batch's layers run once for all its images, so batch 2 must
# add fewer launches than a second batch-1 forward would; rows.py --same: the serial-head and late-head rows bit for
# bit their package's. Speed figures are the emulator's and mean nothing.
#   tools/gpu_carry/test_bench.sh CHECKPOINT [DIR]     (CHECKPOINT: a yolo26n .pt; DIR default build/bench_test)
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
CK=$1 DIR=${2:-$here/build/bench_test}
"$here/tools/gpu_carry/prepare_bench.sh" "$DIR" "$CK" 64 "1 2"
out=$DIR/out-emulated
rm -rf "$out"
EMULATE="$here/tests/cuda/cuda_emu.h" OUT="$out" bash "$DIR/bench.sh"
for row in "| carve tf32 | 1 |" "| carve strict-fp32 | 1 |" "| carve tf32 | 2 |" "| carve strict-fp32 | 2 |" \
           "| carve tf32 fused | 1 |" "| carve tf32 fused | 2 |" "| carve fp16 | 1 |" "| carve fp16 fused | 1 |" \
           "| carve fp16 | 2 |" "| carve fp16 fused | 2 |" "| carve fp16 serial-head | 1 |" "| carve tf32 serial-head | 1 |" \
           "| carve fp16 fused-attention | 1 |" "| carve tf32 fused-attention | 1 |" \
           "| carve fp16 late-head | 1 |" "| carve tf32 late-head | 1 |" \
           "| carve fp16 no-tune | 1 |" "| carve tf32 no-tune | 2 |" \
           "| carve fp16nms | 1 |" "| carve fp16nms | 2 |" \
           "| pytorch eager fp32-tf32 | 1 |" "| pytorch eager fp32-tf32 | 2 |" \
           "- Detect layer with the e2e head under 60 us (carve fp16, inside the graph" \
           "  - the early fork (carve fp16 against carve fp16 late-head): Detect "; do
  grep -qF -- "$row" "$out/table.md" || { echo "test_bench: FAIL: no row '$row' in $out/table.md"; exit 1; }
done
python3 - "$out/bench.jsonl" <<'PY' || exit 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"system": "carve')]
nodes = {(r["system"], r["batch"]): r["graph_nodes"] for r in rows if "error" not in r}
for prec, b in (("tf32", 1), ("tf32", 2), ("fp16", 1), ("fp16", 2)):
    plain, fused = nodes.get((f"carve {prec}", b)), nodes.get((f"carve {prec} fused", b))
    print(f"launches per forward, carve {prec} batch {b}: {plain}, fused {fused}")
    if plain is None or fused is None or fused >= plain:
        sys.exit(f"test_bench: FAIL: carve {prec} batch {b}: fused launches {fused} not below {plain}")
for prec, b in (("tf32", 1), ("tf32", 2), ("fp16", 1), ("fp16", 2)):  # --tune timed convolutions, --no-tune none
    tuned = [r for r in rows if r["system"] == f"carve {prec}" and r["batch"] == b]
    plain = [r for r in rows if r["system"] == f"carve {prec} no-tune" and r["batch"] == b]
    if not tuned or not plain or tuned[0]["convs_gemm"] + tuned[0]["convs_fused"] == 0 or \
            plain[0]["convs_gemm"] + plain[0]["convs_fused"] != 0:
        sys.exit(f"test_bench: FAIL: carve {prec} batch {b}: tuned {tuned[:1]}, no-tune {plain[:1]}")
profiles = [json.loads(l) for l in open(sys.argv[1].replace("bench.jsonl", "profile.jsonl")) if l.startswith("{")]
for p in profiles:  # the marked graph's per-layer times (options.graph_layer_ms), one per layer
    g = p.get("graph_layers")
    if not g or len(g) != len(p["layers"]) or min(g) < 0 or p.get("graph_marked_ms", 0) <= 0:
        sys.exit(f"test_bench: FAIL: {p['system']} batch {p['batch']}: graph_layers {g}")
depth = {(r["system"], r["batch"]): r.get("graph_depth") for r in rows if "error" not in r}
for prec in ("tf32", "fp16"):  # the lanes' fork and join are graph edges: as many nodes as the serial head, fewer
    if nodes[(f"carve {prec}", 1)] != nodes[(f"carve {prec} serial-head", 1)]:  # in series
        sys.exit(f"test_bench: FAIL: carve {prec}: lanes change the launch count")
    lanes, serial = depth[(f"carve {prec}", 1)], depth[(f"carve {prec} serial-head", 1)]
    print(f"launches in series, carve {prec} batch 1: {lanes} with the lanes, {serial} serial-head")
    if serial != nodes[(f"carve {prec}", 1)] or not lanes or lanes >= serial:
        sys.exit(f"test_bench: FAIL: carve {prec}: graph_depth {lanes} with the lanes, {serial} serial")
for prec in ("tf32", "fp16"):  # the early fork changes edges only: the late head, the same launches, none fewer
    late = (f"carve {prec} late-head", 1)                                      # in series
    if nodes[late] != nodes[(f"carve {prec}", 1)] or depth[late] < depth[(f"carve {prec}", 1)]:
        sys.exit(f"test_bench: FAIL: carve {prec} late-head: {nodes[late]} launches, {depth[late]} in series")
for prec in ("tf32", "fp16"):  # the fused attention: 4 launches fewer in each of yolo26n's 2 attention layers
    fused = nodes[(f"carve {prec} fused-attention", 1)]
    if fused + 8 != nodes[(f"carve {prec}", 1)]:
        sys.exit(f"test_bench: FAIL: carve {prec} fused-attention: {fused} launches")
for prec in ("tf32", "fp16"):  # batched layers: a second image costs only its e2e head's launches
    one, two = nodes[(f"carve {prec}", 1)], nodes[(f"carve {prec}", 2)]
    if not two < 1.5 * one:
        sys.exit(f"test_bench: FAIL: carve {prec}: batch 2 takes {two} launches, batch 1 {one}")
PY
python3 "$DIR/rows.py" "$out/rows.tar" --same ||
  { echo "test_bench: FAIL: a scheduling-only row (serial-head, late-head) is not its package's bit for bit"; exit 1; }
echo "test_bench: ok (the script runs up to the GPU step; figures are the emulator's)"
