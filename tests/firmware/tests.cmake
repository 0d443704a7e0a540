# Firmware-ready packages (issue 7): standalone builds, weight formats, caller-owned memory, --imgsz H W,
# cross-compiles, determinism, banners and the ABI check. Included by the top-level CMakeLists.txt.
# Area CI budget: <= 6 minutes on 2 cores (each test prints its time).
set(CARVE_FW ${CARVE_ROOT}/tests/firmware)

# Generator side: determinism, banners with the options, ABI checks (and that a mismatch fails to compile),
# the weights file layout, --imgsz H W, f16 range refusal.
add_test(NAME firmware_generate
         COMMAND ${CARVE_PYTHON} -m pytest -q -p no:cacheprovider ${CARVE_FW}/test_generate.py
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_generate PROPERTIES TIMEOUT 600 ENVIRONMENT "CARVE_WORK=${CARVE_WORK}")

# A package copied out of the repository builds with its own CMakeLists.txt, from a parent project
# (add_subdirectory + carve::<name>) and with its README's plain cc command; each demo runs once.
add_test(NAME firmware_standalone
         COMMAND ${CARVE_PYTHON} ${CARVE_FW}/standalone.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_standalone PROPERTIES TIMEOUT 900)

# --weights-format file: runtime checks (f16 widening of all 65536 halves vs numpy, CRC-32 vs zlib), the file read
# from a path and from the caller's buffer gives the linked blob's detections, and every damaged file (magic,
# version, truncated / padded / empty, payload bit, another model or checkpoint, missing) gets its named status.
add_test(NAME firmware_weights_file
         COMMAND ${CARVE_PYTHON} ${CARVE_FW}/weights_file.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_weights_file PROPERTIES TIMEOUT 900)

# --weights-dtype f16 (lossless): the f16 packages of the trained demo model (xnnpack blob, portable file) bit-identical
# to the f32 ones (every dump, the JSON); carve_weights_expand vs the generator (3 backends, chunks, -ffp-contract=fast);
# a float32 checkpoint: warning, and Ultralytics' fp16-weight bound. About a minute.
add_test(NAME firmware_f16
         COMMAND ${CARVE_PYTHON} ${CARVE_FW}/f16.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_f16 PROPERTIES TIMEOUT 900)

# Caller-owned memory: create_with + runs + destroy call no allocator (-Wl,--wrap=malloc,...), same rows as create,
# bad buffers refused.
add_test(NAME firmware_no_malloc
         COMMAND ${CARVE_PYTHON} ${CARVE_FW}/no_malloc.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_no_malloc PROPERTIES TIMEOUT 900)

# The same for an int8 package (issue 19): the int8 demo model, portable (--precision int8, weights linked), the
# package shared with the int8 tests (tests/int8/int8pkg.py; the quantization pass runs here if no int8 test made it
# first).
add_test(NAME firmware_no_malloc_int8
         COMMAND ${CARVE_PYTHON} ${CARVE_FW}/no_malloc.py --work ${CARVE_WORK} --int8 portable
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_no_malloc_int8 PROPERTIES TIMEOUT 900)

# xnnpack create_with with XNNPACK's memory in the caller's xnn_heap (yolo26n at 320, -seg/-pose/-obb at 160, -cls
# at 96): the whole process's allocator interposed, 0 calls and 0 frees in create_with + runs + destroy, outputs equal
# create's, heap use <= <NAME>_XNN_HEAP_BYTES (ratio printed), exactly that use before a PROT_NONE page works,
# one byte short -> CARVE_ERR_OUT_OF_MEMORY, two contexts, bad heaps refused, XNNPACK initialized first by other
# code -> CARVE_ERR_UNSUPPORTED. About 25 s with the checkpoints cached (shared with the oracle tests).
add_test(NAME firmware_xnn_heap
         COMMAND ${CARVE_PYTHON} ${CARVE_FW}/xnn_heap.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_xnn_heap PROPERTIES TIMEOUT 600)

# --imgsz H W: a non-square yolo26n against Ultralytics, layer by layer and end to end (letterbox included).
add_test(NAME firmware_oracle_yolo26n_256x384
         COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/oracle/run_oracle.py --scale n --imgsz 256 384 --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_oracle_yolo26n_256x384 PROPERTIES TIMEOUT 1800)

# Cross-compiles: portable for a Cortex-M7 (built); xnnpack and portable for aarch64 Linux, linked against Debian's
# arm64 libraries (tools/arm64_sysroot.sh, unpacked under build/.cache), run under qemu-aarch64 and compared layer
# by layer with the x86-64 xnnpack package (about 50 s each); aarch64-xnnpack-int8: the shared int8 package of the
# demo model (tests/int8/int8pkg.py) built for aarch64 and run under qemu-aarch64 -cpu max and cortex-a53 (the
# NEON variants of carve_q8conv and carve_q8_run_pool) against its x86-64 build, layer by layer (about 20 s once the
# package exists). Skipped (exit 77): the portable targets while --backend portable is not in this carve; the
# aarch64 targets when the arm64 packages cannot be downloaded.
foreach(target aarch64-xnnpack aarch64-xnnpack-int8 aarch64-portable cortex-m7)
  add_test(NAME firmware_cross_${target}
           COMMAND ${CARVE_PYTHON} ${CARVE_FW}/cross.py --work ${CARVE_WORK} --target ${target}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(firmware_cross_${target} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endforeach()

# A portable package run bare-metal on an emulated Cortex-M7 (qemu-system-arm, machine mps2-an500; startup, linker
# script and semihosting in tests/firmware/m7): yolo26n-shapes at 320 in static buffers, assets/shapes-3.png linked
# in, its detections against the same harness built for the host (bit for bit with the runtime's portable kernels,
# under qemu-x86_64 on a CPU without AVX2; natively: int8 bit for bit, fp32 within 1e-4) and the package's demo.
# int8: the quantization pass's calibration and rewrite with no op kept in float32 (--quant all: for the demo model
# the same package as --precision int8, which keeps none, without the minutes of its sensitivity analysis; about
# 50 s); int8_pass: --precision int8 --calib itself (about 4 minutes: `make test-full` only). Skipped (exit 77) when
# qemu-system-arm is absent or this carve has no --precision.
set(carve_qemu_m7 fp32=fp32 int8=all)
if(CARVE_ORACLE_FULL)
  list(APPEND carve_qemu_m7 int8_pass=pass)
endif()
foreach(variant ${carve_qemu_m7})
  string(REPLACE "=" ";" parts ${variant})
  list(GET parts 0 name)
  list(GET parts 1 quant)
  set(precision int8)
  if(quant STREQUAL "fp32")
    set(precision fp32)
    set(quant auto)
  endif()
  add_test(NAME firmware_qemu_m7_${name}
           COMMAND ${CARVE_PYTHON} ${CARVE_FW}/qemu_m7.py --work ${CARVE_WORK} --precision ${precision} --quant ${quant}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(firmware_qemu_m7_${name} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endforeach()
