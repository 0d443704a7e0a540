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
