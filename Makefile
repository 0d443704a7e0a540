# carve: the two commands of the README, and a few helpers. Everything real lives in
# tools/ and CMakeLists.txt; this file only strings the steps together.
BUILD ?= build
JOBS ?= 2
MODEL ?= yolo26n
IMAGE ?= $(shell python3 -c "import ultralytics, os; print(os.path.join(os.path.dirname(ultralytics.__file__), 'assets', 'bus.jpg'))" 2>/dev/null)
DEMO_PT ?= $(BUILD)/work/demo/$(MODEL).pt
PKG ?= generated/$(MODEL)-xnnpack

.PHONY: demo test install install-test clean help

help:
	@echo "make demo   install what is missing, generate $(MODEL) for xnnpack, build it, run it on a sample image"
	@echo "make test   install what is missing and run the whole test suite through ctest"

install:
	@sh tools/install.sh
install-test:
	@sh tools/install.sh --test

# Until a trained demo model ships, the demo checkpoint is built by the test
# tooling with Ultralytics from its yaml (random weights, realistic BN statistics).
$(DEMO_PT):
	@mkdir -p $(dir $@)
	python3 tools/oracle.py make-checkpoint --cfg $(MODEL).yaml --out $@

demo: install-test $(DEMO_PT)
	./carve generate manifests/$(MODEL).yaml --backend xnnpack --weights $(DEMO_PT) --out $(PKG) --force
	cmake -S $(PKG) -B $(PKG)/build -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(PKG)/build -j $(JOBS)
	@mkdir -p $(BUILD)/demo
	$(PKG)/build/$(MODEL)_demo $(IMAGE) --out $(BUILD)/demo/$(MODEL)-annotated.png --threads 2 --runs 5
	@echo "annotated image: $(BUILD)/demo/$(MODEL)-annotated.png"

test: install-test
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > /dev/null
	cmake --build $(BUILD) -j $(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD) generated/*-xnnpack
