# int8 packages (issue 19). Included by the top-level CMakeLists.txt.
#
# int8_xnn_vs_portable: an int8 package of the trained demo model on the xnnpack backend against the portable
#   backend's (tests/int8/xnn_vs_portable.py): XNNPACK's int8 operators within one unit of arith.py on the same
#   inputs (xq8_tool, tests/runtime), every layer compared in units of its int8 scale, the same detections. The
#   quantized graph is tests/int8/handquant.py's (every convolution in int8) until the quantization pass is merged.
#   About 20 s on 2 cores (three packages built).
if(TARGET xq8_tool)
  add_test(NAME int8_xnn_vs_portable
           COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/int8/xnn_vs_portable.py --tool $<TARGET_FILE:xq8_tool>
                   --work ${CARVE_WORK}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(int8_xnn_vs_portable PROPERTIES TIMEOUT 600 RESOURCE_LOCK cpu_heavy)
endif()

# int8_vs_simulator: the portable int8 package of `carve generate --precision int8` (tests/int8/int8pkg.py: 32
#   rendered calibration images, imgsz 128, shared with the other int8 tests of this build folder) against the
#   quantization pass's simulator (generator/carve/quant/simulate.py) on the package's own letterboxed input, on the
#   4 sample images: every int8 layer bit-identical, the rows within float32 tolerance, the same detections; the
#   simulated graph proven to be the package's (it emits the package's files byte for byte).
add_test(NAME int8_vs_simulator
         COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/int8/vs_simulator.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(int8_vs_simulator PROPERTIES TIMEOUT 600 RESOURCE_LOCK cpu_heavy)
