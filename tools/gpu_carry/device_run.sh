#!/bin/bash
# The whole GPU check of issue 20 in one command, for the `device` tool's one prepared call (run from the
# repository root on the GPU machine, the carry made by tools/gpu_carry/prepare_bench.sh):
#   OUT=$OUT bash build/bench_carry/device_run.sh            (device tool: carry ["build/bench_carry"], timeout 600 s)
# Steps, each under its own time limit so that a slow one leaves the others' results in $OUT:
#   1. the builds, side by side: bench.sh's packages (STEP=build) and tests/cuda/gpu_kernel_tests.sh's kernel tests
#      (GKT_STEP=build) for CARVE_CUDA_ARCH (default sm_90) (200 s);
#   2. bench.sh's rows (STEP=run, BENCH_TIMEOUT, default 280 s): the speed table ($OUT/table.md, bench.jsonl,
#      profile.jsonl with each convolution's timed paths, rows.tar, the tactic files), its log in $OUT/bench.log;
#      bench.sh's variables (PKGS, EXTRA, NOPDL, TORCH, TORCH_VARIANTS, RUNS) pass through; then rows.py --same
#      (printed, $OUT/rows_same.txt): the serial-head, late-head and no-PDL rows bit for bit their package's (a race
#      between the lanes on the GPU shows there);
#   3. the kernel tests' runs and bench_igemm (GKT=0: skipped) (120 s) ($OUT/kernel_tests.log);
#   4. ncu.sh on NCU_CONFIGS (default fp16-b1; NCU=0: skipped) (90 s): each kernel's time ($OUT/ncu.txt);
#   5. with EVAL=DIR (a carry of tools/gpu_carry/prepare_eval.sh, named in the device tool's carry too): the accuracy
#      gate, DIR/eval_device.sh (120 s), into $OUT/eval/ (then, here: eval_score.py DIR on the unpacked eval/);
#   6. with DETAIL="PACKAGE REGEX [COUNT] [TAG]" (e.g. "fp16-b1 e2e_head 1 head"): ncu_detail.sh on those launches
#      (90 s): the details page and the per-source-line counts (detail-TAG.txt, lines-TAG.txt in more.tar).
# Every step's limit is cut to what is left of DEADLINE (default 570 s) from the start, so that the command ends
# inside the device tool's 600 s. Prints $OUT/table.md and each step's exit status and time.
set -u
D=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$D/out}
mkdir -p "$OUT"
export PATH=$PATH:/usr/local/cuda/bin OUT
export CARVE_CUDA_ARCH=${CARVE_CUDA_ARCH:-sm_90}
t0=$(date +%s)
at() { echo "$1 at $(( $(date +%s) - t0 )) s"; }
limit() {  # limit SECONDS: SECONDS, or less where the whole run's DEADLINE (default 570 s) comes first
  local left=$(( ${DEADLINE:-570} - ($(date +%s) - t0) ))
  echo $(( left < $1 ? left : $1 ))
}
gkt=${GKT:-1} kt=-1
if [ "$gkt" != 0 ] && [ -f tests/cuda/gpu_kernel_tests.sh ]; then
  GKT_STEP=build timeout 200 sh tests/cuda/gpu_kernel_tests.sh /tmp/gkt > "$OUT/kernel_tests_build.log" 2>&1 &
  gkt_pid=$!
fi
STEP=build timeout 200 bash "$D/bench.sh" > "$OUT/bench_build.log" 2>&1
build=$?
[ "$gkt" != 0 ] && [ -n "${gkt_pid:-}" ] && { wait "$gkt_pid"; kt=$?; }
at "builds: bench rc $build, kernel tests rc $kt,"
STEP=run timeout "$(limit "${BENCH_TIMEOUT:-280}")" bash "$D/bench.sh" > "$OUT/bench.log" 2>&1
bench=$?
[ -s "$OUT/table.md" ] || python3 "$D/bench_table.py" "$OUT/bench.jsonl" "$OUT/profile.jsonl" > "$OUT/table.md" 2>&1
at "bench.sh: rc $bench"
if [ -s "$OUT/rows.tar" ]; then
  python3 "$D/rows.py" "$OUT/rows.tar" --same > "$OUT/rows_same.txt" 2>&1
  at "rows.py --same: rc $?"
  cat "$OUT/rows_same.txt"
fi
if [ "$gkt" != 0 ] && [ "$kt" = 0 ] && [ "$(limit 120)" -gt 10 ]; then
  GKT_STEP=run timeout "$(limit 120)" sh tests/cuda/gpu_kernel_tests.sh /tmp/gkt > "$OUT/kernel_tests.log" 2>&1
  at "gpu_kernel_tests.sh: rc $?"
fi
if [ "${NCU:-1}" != 0 ] && [ "$(limit 90)" -gt 30 ]; then
  # shellcheck disable=SC2086
  NCU_TIMEOUT=$(( $(limit 90) - 10 )) timeout "$(limit 90)" bash "$D/ncu.sh" ${NCU_CONFIGS:-fp16-b1} > "$OUT/ncu.log" 2>&1
  at "ncu.sh: rc $?"
fi
if [ -n "${EVAL:-}" ] && [ "$(limit 120)" -gt 30 ]; then
  [ -d "$EVAL/stb" ] || cp -r "$D/stb" "$EVAL/"  # prepare_eval.sh's own, or this carry's (the same files)
  OUT=$OUT/eval timeout "$(limit 120)" bash "$EVAL/eval_device.sh" > "$OUT/eval.log" 2>&1
  at "eval_device.sh: rc $?"
fi
if [ -n "${DETAIL:-}" ] && [ "$(limit 90)" -gt 30 ]; then
  # shellcheck disable=SC2086
  NCU_TIMEOUT=$(( $(limit 90) - 10 )) timeout "$(limit 90)" bash "$D/ncu_detail.sh" $DETAIL > "$OUT/detail.log" 2>&1
  at "ncu_detail.sh $DETAIL: rc $?"
fi
# the device tool brings back at most 8 files: the figures as they are, the rest (logs, rows, tactics) in one tar
(cd "$OUT" && rest=$(ls | grep -vxF -e table.md -e bench.jsonl -e profile.jsonl -e kernel_tests.log -e ncu.txt) &&
  [ -n "$rest" ] && tar cf more.tar $rest && rm -rf $rest)
cat "$OUT/table.md" 2>/dev/null || tar xOf "$OUT/more.tar" bench.log | tail -30
