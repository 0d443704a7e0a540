# bench (issue 6): a smoke test of the benchmark harness's own parts (the FMA peak microbenchmark and the report's
# arithmetic); the benchmark itself (`make bench`) is not part of CI.
add_test(NAME bench_harness
         COMMAND ${CARVE_PYTHON} -m pytest -q -p no:cacheprovider ${CARVE_ROOT}/tests/bench/test_bench.py
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(bench_harness PROPERTIES TIMEOUT 600)
