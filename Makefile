# carve: the two commands of the README, and a few helpers. Everything real lives in
# tools/ and CMakeLists.txt; this file only strings the steps together.
BUILD ?= build
JOBS ?= 2
# The demo model is the trained, shipped assets/yolo26n-shapes.pt (tools/train_demo.py, docs/demo-model.md): no
# torch needed. Any other MODEL (e.g. `make demo MODEL=yolo26n`) gets a random-weight checkpoint built by the test
# tooling with Ultralytics (realistic BN statistics, meaningless detections) and runs on Ultralytics' bus.jpg.
MODEL ?= yolo26n-shapes
ifeq ($(MODEL),yolo26n-shapes)
DEMO_PT ?= assets/yolo26n-shapes.pt
IMAGE ?= assets/shapes-3.png
DEMO_DEPS = install
else
DEMO_PT ?= $(BUILD)/work/demo/$(MODEL).pt
IMAGE ?= $(shell python3 -c "import ultralytics, os; print(os.path.join(os.path.dirname(ultralytics.__file__), 'assets', 'bus.jpg'))" 2>/dev/null)
DEMO_DEPS = install-test $(DEMO_PT)
endif
# BACKEND=portable builds the plain C11 package (no XNNPACK, no threads) instead.
BACKEND ?= xnnpack
PKG ?= generated/$(MODEL)-$(BACKEND)
# --threads 0: the CPUs this process may run on (the portable package runs on one thread)
DEMO_THREADS = $(if $(filter portable,$(BACKEND)),1,0)
DEMO_EXE = $(PKG)/build/$(subst -,_,$(MODEL))_demo

.PHONY: demo test install install-test clean help bench

help:
	@echo "make demo   install what is missing, generate $(MODEL) for $(BACKEND), build it, run it on a sample image"
	@echo "make test   install what is missing and run the whole test suite through ctest"
	@echo "make test-full  the same with every scale of every task in every test, the oracles at full input size (slow)"
	@echo "make fuzz   long fuzzing runs (FUZZ_SECONDS each, default 600): checkpoint reader, manifest loader, package entry points, seg/cls functions"
	@echo "make cuda-check  on a machine with an NVIDIA GPU: the cuda package against the CPU package (CUDA_MODEL=yolo26n)"
	@echo "make bench  carve fp32/int8 against ONNX Runtime, OpenVINO (fp32, default, int8), ExecuTorch and PyTorch; writes docs/performance.md (slow)"
	@echo "make bench-threads  carve, ONNX Runtime and OpenVINO idle, over-asked and beside a busy process; docs/performance.md"
	@echo "make eval   accuracy (COCO mAP) of carve fp32/int8, Ultralytics and the int8 peers on 500 held-out images (slow)"

install:
	@sh tools/install.sh
install-test:
	@sh tools/install.sh --test

# Random-weight checkpoints for MODEL other than yolo26n-shapes, built from the Ultralytics yaml.
$(BUILD)/work/demo/%.pt:
	@mkdir -p $(dir $@)
	python3 tools/oracle.py make-checkpoint --cfg $*.yaml --out $@

demo: $(DEMO_DEPS)
	./carve generate manifests/$(MODEL).yaml --backend $(BACKEND) --weights $(DEMO_PT) --out $(PKG) --force
	cmake -S $(PKG) -B $(PKG)/build -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(PKG)/build -j $(JOBS)
	@mkdir -p $(BUILD)/demo
	$(DEMO_EXE) $(IMAGE) --out $(BUILD)/demo/$(MODEL)-annotated.png --threads $(DEMO_THREADS) --runs 5
	@echo "annotated image: $(BUILD)/demo/$(MODEL)-annotated.png"

test: install-test
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(BUILD) -j $(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Every task (detect, segment, pose, obb, classify) and scale at the manifests' full input sizes, in its own build
# folder. Outside the CI budget; `make test` runs n of every task and l of segment (CMakeLists.txt).
.PHONY: test-full
test-full: install-test
	cmake -S . -B $(BUILD)/full -DCMAKE_BUILD_TYPE=Release -DCARVE_ORACLE_FULL=ON \
	  "-DCARVE_ORACLE_TASKS=detect;segment;pose;obb;classify" > /dev/null
	cmake --build $(BUILD)/full -j $(JOBS)
	ctest --test-dir $(BUILD)/full --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) generated/*-xnnpack generated/*-portable generated/*-cuda

# Long fuzzing runs (docs/security.md); `make test` runs each fuzzer for 20 s only. Corpora grow in
# $(BUILD)/security-fuzz/ and are reused by the next run; findings land there as crash-*/oom-*/timeout-*.
FUZZ_SECONDS ?= 600
FUZZ_WORK = $(BUILD)/security-fuzz
.PHONY: fuzz fuzz-checkpoint fuzz-manifest fuzz-entry fuzz-task
fuzz: fuzz-checkpoint fuzz-manifest fuzz-entry fuzz-task
fuzz-checkpoint fuzz-manifest: fuzz-%: install-test
	@mkdir -p $(FUZZ_WORK)/$* $(FUZZ_WORK)/findings-$*
	python3 tests/security/fuzz_$*.py -max_total_time=$(FUZZ_SECONDS) -timeout=120 -rss_limit_mb=4096 \
	  -artifact_prefix=$(FUZZ_WORK)/findings-$*/ $(FUZZ_WORK)/$*
fuzz-entry: install-test
	python3 tests/security/run_security.py setup --work $(FUZZ_WORK)/entry
	python3 tests/security/run_security.py fuzz --work $(FUZZ_WORK)/entry --seconds $(FUZZ_SECONDS)
fuzz-task: install-test
	python3 tests/security/run_security.py setup-tasks --work $(FUZZ_WORK)/entry
	python3 tests/security/run_security.py fuzz-task --work $(FUZZ_WORK)/entry --task seg --seconds $(FUZZ_SECONDS)
	python3 tests/security/run_security.py fuzz-task --work $(FUZZ_WORK)/entry --task cls --seconds $(FUZZ_SECONDS)

# On a machine with an NVIDIA GPU and the CUDA toolkit (not CI): builds the real cuda package of CUDA_MODEL with nvcc,
# runs it and the xnnpack package on the same input, prints per-layer differences and the latency with and without
# the CUDA Graph (tools/cuda_check.py, docs/backends/cuda.md).
CUDA_MODEL ?= yolo26n
.PHONY: cuda-check
cuda-check: install-test
	PATH="$$PATH:/usr/local/cuda/bin" python3 tools/cuda_check.py --model $(CUDA_MODEL) --work $(BUILD)/work

# CPU benchmark (bench/, docs/performance.md). Not part of CI. The peers (bench/requirements.txt) go into a venv that
# sees the system's torch and ultralytics, so installing them changes nothing for the tests. BENCH_ARGS is passed
# to bench/bench.py, e.g. `make bench BENCH_ARGS="--models yolo26n --threads 2"`. The int8 systems (carve
# --precision int8, OpenVINO + NNCF, ONNX Runtime static QDQ; issue 19 item 4) run on the trained yolo26n-shapes at
# 640, calibrated on 32 rendered images; the int8 package and peer models are cached in build/bench/ (the first run
# quantizes: several minutes; docs/quantization.md "Speed: make bench").
BENCH_VENV = $(BUILD)/bench-venv
BENCH_ARGS ?=
$(BENCH_VENV)/.installed: bench/requirements.txt
	python3 -m venv --system-site-packages $(BENCH_VENV)
	PIP_CACHE_DIR=$(BUILD)/.cache/pip $(BENCH_VENV)/bin/pip install -q --disable-pip-version-check -r bench/requirements.txt
	@touch $@

bench: install-test $(BENCH_VENV)/.installed
	PATH="$(abspath $(BENCH_VENV))/bin:$$PATH" JOBS=$(JOBS) $(BENCH_VENV)/bin/python bench/bench.py $(BENCH_ARGS)

# Threads under contention (issue 17, bench/threads.py): yolo26n at 640, carve / ONNX Runtime / OpenVINO idle at 1-2
# threads, at 3, 4, 8 threads, and beside a CPU-bound process; prints the table, writes it into docs/performance.md.
# THREADS_ARGS is passed on, e.g. `make bench-threads THREADS_ARGS="--before ../carve-old --runs 50"`.
THREADS_ARGS ?=
.PHONY: bench-threads
bench-threads: install-test $(BENCH_VENV)/.installed
	PATH="$(abspath $(BENCH_VENV))/bin:$$PATH" JOBS=$(JOBS) $(BENCH_VENV)/bin/python bench/threads.py --docs $(THREADS_ARGS)

# Accuracy on real detections (issue 19 item 3, bench/eval.py, docs/quantization.md "Accuracy: make eval"): the demo
# model on 500 held-out images (seed 3000), COCO mAP50-95 / mAP50 (pycocotools) of Ultralytics, carve's packages
# (fp32; int8 once the generator takes --precision int8) and the peers (ONNX Runtime, OpenVINO, their int8
# quantizations from 200 calibration images). Uses the bench venv (the peers, NNCF). Not part of CI. EVAL_ARGS is
# passed on, e.g. `make eval EVAL_ARGS="--systems carve-fp32-xnnpack,carve-int8-xnnpack"`. Writes build/eval/.
EVAL_ARGS ?=
.PHONY: eval
eval: install-test $(BENCH_VENV)/.installed
	PATH="$(abspath $(BENCH_VENV))/bin:$$PATH" JOBS=$(JOBS) $(BENCH_VENV)/bin/python bench/eval.py $(EVAL_ARGS)
