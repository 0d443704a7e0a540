# int8 packages (issue 19). Included by the top-level CMakeLists.txt.
#
# The packages come from `carve generate --precision int8` on 32 images rendered by tools/train_demo.py (seed 5,
# used by no other image set) at imgsz 128, made once per build folder and shared by these tests and by
# firmware_no_malloc_int8 (tests/int8/int8pkg.py: CARVE_WORK/int8, regenerated when the sources change). The first
# test to need one pays for the quantization pass (about 5 s at 128); each test then takes seconds (measured on the
# 2-core machine: all int8 tests, the security ones included, 83 s from an empty build folder, 43 s with the packages
# made, 21 s of it the fuzzer).
#
# int8_xnn_vs_portable: the xnnpack int8 package against the portable one (tests/int8/xnn_vs_portable.py): no int8
#   op on an XNNPACK operator; per operator on the simulator's inputs, the dense convolutions (carve_q8conv,
#   q8conv_tool) bit for bit; end to end on the 4 sample images every layer and the rows bit-identical, the same
#   bytes on 1 and 3 threads, the same rows with --caller-memory.
if(TARGET q8conv_tool)
  add_test(NAME int8_xnn_vs_portable
           COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/int8/xnn_vs_portable.py
                   --q8conv-tool $<TARGET_FILE:q8conv_tool> --work ${CARVE_WORK}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(int8_xnn_vs_portable PROPERTIES TIMEOUT 600)
endif()

# int8_vs_simulator: the portable int8 package against the quantization pass's simulator (generator/carve/quant/
#   simulate.py) on the package's own letterboxed input, on the 4 sample images: every int8 layer bit-identical,
#   the rows within float32 tolerance, the same detections; the simulated graph proven to be the package's (it
#   emits the package's files byte for byte).
add_test(NAME int8_vs_simulator
         COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/int8/vs_simulator.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(int8_vs_simulator PROPERTIES TIMEOUT 600)

# int8_regenerate: `carve generate --precision int8` run again (a new process, the calibration folder copied to
#   another path, another output folder) gives the shared portable package's bytes, every file (C, weights,
#   runtime, README, CMakeLists.txt, quant.json), and no file holds either folder's path.
add_test(NAME int8_regenerate
         COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/int8/regenerate.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(int8_regenerate PROPERTIES TIMEOUT 600)
