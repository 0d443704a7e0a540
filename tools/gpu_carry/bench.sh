#!/bin/bash
# On the GPU machine (see tools/gpu_carry/prepare_bench.sh): issue 20's speed table, every system on this one GPU.
#   bash DIR/bench.sh                      nvcc for CUDA_ARCH (default 90: H100 / H200), RUNS=100 per figure
#   CUDA_ARCH=native RUNS=50 bash DIR/bench.sh
#   EMULATE=/path/to/tests/cuda/cuda_emu.h bash DIR/bench.sh
#                                          no GPU: the packages built with the emulation header, 2 runs, PyTorch
#                                          on the CPU (tools/gpu_carry/test_bench.sh runs this)
#   RUNS_BATCH=30                          runs per figure of the packages of more than one image
#   TORCH=0                                carve only (no PyTorch rows)
#   TORCH_VARIANTS=fp16,fp16-channels-last PyTorch's variants (torch_bench.py --variants; default all three)
#   PKGS="fp16-b1 fp16-b32"                the packages of pkgs/ to build and time (default every one)
#   EXTRA=0                                each package's own row only (no fused, strict, no-tune, serial-head,
#                                          late-head, fused-attention rows)
#   NOPDL=1                                also the first batch's packages built with -DCARVE_CUDA_NO_PDL
#   STEP=build | STEP=run                  only the builds (e.g. while something else compiles), or only the rows
#                                          of the builds already there (default both)
# Steps: (1) every package in pkgs/ built with its bench_main (tools/gpu_carry/bench_main.cu), in parallel, and with
# NOPDL=1 the first batch's packages once more with -DCARVE_CUDA_NO_PDL (rows "carve <prec> no-PDL": plain launches
# instead of programmatic dependent launch, runtime/carve_cuda.h);
# (2) bench_main for each, each package's own row first (so that a run cut short by a time limit keeps the rows
# that matter), then PyTorch (3), then the other rows (TF32 packages four times: TF32, --strict-fp32, TF32 with --fused-conv, --no-tune; fp16
# packages three times: as generated, --fused-conv: carve's fused implicit-GEMM convolutions, rows "carve <prec>
# fused", --no-tune: no convolution timed at create, the cuBLAS path but for the fixed rule's shapes, rows "carve
# <prec> no-tune"; every other row with --tune, the packages' default on a GPU, also under the emulation; batch 1
# also with --serial-head: the head's branches in order instead of concurrent lanes, rows "carve <prec> serial-head",
# with --late-head: every head lane after the neck instead of the P3 / P4 lanes beside it, rows "carve <prec>
# late-head", and with --fused-attention: each attention layer one fused launch instead of the default's cuBLAS
# GEMMs, rows "carve <prec> fused-attention"; the serial-head, late-head, fused-attention and no-PDL rows take the
# paths the row "carve <prec>" timed, --tactics, so that they differ from it in their one feature);
# (3) torch_bench.py: Ultralytics' model
# eager and with a CUDA Graph, fp32 (TF32) / fp16 / fp16 channels-last, each batch; (4) bench_table.py.
# Output: $OUT/bench.jsonl (every figure), $OUT/table.md (the table), also printed; $OUT/profile.jsonl (each carve
# configuration's per-layer device times, without the graph) and $OUT/rows.tar (each configuration's raw rows of
# image 0, for tools/gpu_carry/rows.py).
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
export CPATH=$D/stb/include LIBRARY_PATH=$D/stb/lib LD_LIBRARY_PATH=$D/stb/lib PATH=$PATH:/usr/local/cuda/bin
export PYTHONPATH=$D/py${PYTHONPATH:+:$PYTHONPATH} YOLO_OFFLINE=1 YOLO_CONFIG_DIR=/tmp/yolo-config
IMGSZ=$(cat "$D/imgsz") FIRST=$(cat "$D/first_batch")
RUNS=${RUNS:-100} RUNS_BATCH=${RUNS_BATCH:-30} ARCH=${CUDA_ARCH:-90} EMULATE=${EMULATE:-}
[ -n "$EMULATE" ] && RUNS=${EMU_RUNS:-2} RUNS_BATCH=${EMU_RUNS:-2}  # EMU_RUNS=0: only the rows (--runs 0)
if [ -z "$EMULATE" ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
fi
: > "$OUT/bench.jsonl"
: > "$OUT/profile.jsonl"
rows=/tmp/bench-rows
rm -rf "$rows" && mkdir -p "$rows"
t0=$(date +%s)

# (1) build: a wrapper project per package (the package as a subdirectory + bench_main: wrap_build.sh); with NOPDL=1
# the first batch's packages also as "<name>-nopdl", compiled with -DCARVE_CUDA_NO_PDL (rows "carve <prec> no-PDL")
build() {  # build NAME PACKAGE_DIR [extra CUDA flags]: /tmp/bench-NAME/build/bench_main, in the background
  EMULATE=$EMULATE ARCH=$ARCH bash "$D/wrap_build.sh" "/tmp/bench-$1" "$2" "$D/bench_main.cu" yolo26n "$D/stb/lib" \
    "${3:-}" &
}
PKGS=${PKGS:-$(ls "$D/pkgs")} STEP=${STEP:-all} EXTRA=${EXTRA:-1} NOPDL=${NOPDL:-0}
BATCHES=$(for p in $PKGS; do echo "${p##*-b}"; done | sort -nu | paste -sd, -)  # PyTorch's: the packages'
builds=""
for p in $PKGS; do
  dir=$D/pkgs/$p
  [ -d "$dir" ] || { echo "bench.sh: PKGS: no package $dir"; exit 1; }
  [ -f "$dir/yolo26n_weights.bin" ] || cp "$D/pkgs/${p%-b*}-b$FIRST/yolo26n_weights.bin" "$dir/"
  [ "$STEP" = run ] || build "$p" "$dir"
  builds="$builds $p"
  if [ "$NOPDL" = 1 ] && [ "${p##*-b}" = "$FIRST" ]; then
    [ "$STEP" = run ] || build "$p-nopdl" "$dir" -DCARVE_CUDA_NO_PDL
    builds="$builds $p-nopdl"
  fi
done
wait
for p in $builds; do
  if [ "$(cat /tmp/bench-$p/rc 2>/dev/null)" != 0 ]; then
    echo "build of $p failed:"; tail -n 30 /tmp/bench-$p/cmake.log /tmp/bench-$p/build.log; exit 1
  fi
done
echo "built$builds in $(( $(date +%s) - t0 )) s"
[ "$STEP" = build ] && exit 0

# (2) carve: row ROW of package P (ROW "" is the package's own row: its tuned paths saved for the other rows)
row() {  # row PACKAGE MODE
  local p=$1 m=$2 prec=${1%-b*} label exe tactics tag runs
  label="carve $prec"
  exe=/tmp/bench-$p/build/bench_main
  if [ "$m" = --no-pdl ]; then label="carve $prec no-PDL"; exe=/tmp/bench-$p-nopdl/build/bench_main; m=""; fi
  [ "$m" = --strict-fp32 ] && label="carve strict-fp32"
  [ "$m" = --fused-conv ] && label="carve $prec fused"
  [ "$m" = --serial-head ] && label="carve $prec serial-head"
  [ "$m" = --late-head ] && label="carve $prec late-head"
  [ "$m" = --fused-attention ] && label="carve $prec fused-attention"
  [ "$m" = --no-tune ] && label="carve $prec no-tune"
  [ "$m" = --no-tune ] || m="$m --tune"
  tactics="$OUT/tactics-$p.bin"
  case "$label" in
    "carve $prec") m="$m --save-tactics $tactics" ;;
    *serial-head|*late-head|*fused-attention|*no-PDL) m="$m --tactics $tactics" ;;
  esac
  tag=$(echo "$label-b${p##*-b}" | tr ' ' '_')
  runs=$RUNS
  [ "${p##*-b}" = 1 ] || runs=$RUNS_BATCH
  "$exe" "$D/bus.png" --runs "$runs" --label "$label" $m --profile "$OUT/profile.jsonl" \
    --rows "$rows/$tag.f32" | tee -a "$OUT/bench.jsonl" ||
    echo "{\"system\": \"$label\", \"batch\": ${p##*-b}, \"error\": \"bench_main failed\"}" >> "$OUT/bench.jsonl"
}
for p in $PKGS; do row "$p" ""; done
echo "carve's own rows done at $(( $(date +%s) - t0 )) s"

# (3) PyTorch (TORCH=0: not run)
if [ "${TORCH:-1}" != 0 ]; then
  if [ -n "$EMULATE" ]; then torch_args="--dry-run"; else torch_args=""; fi
  python3 "$D/torch_bench.py" --weights "$D/yolo26n.pt" --imgsz "$IMGSZ" --batches "$BATCHES" --runs "$RUNS" \
    ${TORCH_VARIANTS:+--variants "$TORCH_VARIANTS"} $torch_args | tee -a "$OUT/bench.jsonl"
  echo "pytorch done at $(( $(date +%s) - t0 )) s"
fi

# (2, continued) the other rows of each package
if [ "$EXTRA" != 0 ]; then
  for p in $PKGS; do
    case "${p%-b*}" in *nms) continue ;; esac  # --head nms: its own row only (the network is the fp16 package's)
    modes=("--fused-conv" "--no-tune")
    [ "${p%-b*}" = tf32 ] && modes=("--strict-fp32" "--fused-conv" "--no-tune")
    [ "${p##*-b}" = 1 ] && modes+=("--serial-head")  # the head's branches in order: what the lanes gain
    [ "${p##*-b}" = 1 ] && modes+=("--late-head")  # every head lane after the neck: what the early fork gains
    [ "${p##*-b}" = 1 ] && modes+=("--fused-attention")  # the attention's fused launch against its GEMMs
    [ -x "/tmp/bench-$p-nopdl/build/bench_main" ] && modes+=("--no-pdl")
    for m in "${modes[@]}"; do row "$p" "$m"; done
  done
fi
(cd "$rows" && tar cf "$OUT/rows.tar" ./*.f32)
echo "carve done at $(( $(date +%s) - t0 )) s"

# (4) the table
python3 "$D/bench_table.py" "$OUT/bench.jsonl" "$OUT/profile.jsonl" | tee "$OUT/table.md"
