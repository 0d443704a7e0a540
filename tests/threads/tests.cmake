# threads (issue 17): a generated xnnpack package's thread count (the 0 default = the CPUs this process may run on,
# clamping with a notice, --oversubscribe, taskset) and byte-identical outputs for 1..8 threads beside a busy
# process. The pool's own tests (runtime_pool, runtime_pool_taskset, runtime_pool_tsan, runtime_pool_xnnpack) are in
# tests/runtime/CMakeLists.txt. About 30 s on 2 cores.
add_test(NAME threads_package
         COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/threads/threads.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(threads_package PROPERTIES TIMEOUT 600 PROCESSORS 2)  # 1..8 threads: both cores
