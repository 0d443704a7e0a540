# Portable backend (issue 7): included by the top-level CMakeLists.txt.
#
# portable_kernels: carve_pt_run against plain loops (test_kernels.c), odd sizes, groups, padding.
# portable_vs_xnnpack_<task>: for scales of the task (below), the portable package against the xnnpack package
#   of the same checkpoint, layer by layer and final output, at reduced sizes (tests/portable/compare_backends.py;
#   checkpoints are shared with the oracle tests in ${CARVE_WORK}/checkpoints).
# oracle_yolo26n_portable: yolo26n at 640 through the portable package against Ultralytics.
add_executable(portable_kernels ${CARVE_ROOT}/tests/portable/test_kernels.c ${CARVE_ROOT}/runtime/carve_portable.c
               ${CARVE_ROOT}/runtime/carve_post.c ${CARVE_ROOT}/runtime/carve_rt.c)  # carve_rt.c: the (serial) parallel loop
target_include_directories(portable_kernels PRIVATE ${CARVE_ROOT}/runtime)
target_compile_definitions(portable_kernels PRIVATE CARVE_RT_NO_THREADS)
target_link_libraries(portable_kernels PRIVATE m)
set_target_properties(portable_kernels PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(portable_kernels PRIVATE -Wall -Wextra -Werror)
add_test(NAME portable_kernels COMMAND $<TARGET_FILE:portable_kernels>)
set_tests_properties(portable_kernels PROPERTIES TIMEOUT 120)

# The scales of each task: the top-level CMakeLists.txt's carve_scales_<task> (`make test`: n of every task and l of
# segment; `make test-full`: all five), at compare_backends.py's sizes (n 160: an odd 5x5 P5; l 64: even).
foreach(task detect segment pose obb classify)
  string(REPLACE ";" "," scales "${carve_scales_${task}}")
  add_test(NAME portable_vs_xnnpack_${task}
           COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/portable/compare_backends.py --task ${task} --scales ${scales}
                   --work ${CARVE_WORK}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(portable_vs_xnnpack_${task} PROPERTIES TIMEOUT 900)
endforeach()

# yolo26n at its full 640 through the portable package against Ultralytics (layer by layer vs the fp64 model, end to
# end on bus.jpg and zidane.jpg): tests/oracle/run_oracle.py --backend portable. About 20 s of CPU.
add_test(NAME oracle_yolo26n_portable
         COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/oracle/run_oracle.py --scale n --backend portable --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(oracle_yolo26n_portable PROPERTIES TIMEOUT 1800)
