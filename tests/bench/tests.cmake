# bench (issue 6, issue 19 item 4): a smoke test of the benchmark harness's own parts (the FMA and int8 peak
# microbenchmarks, the report's arithmetic, the int8 targets' verdicts, the box matching of the agreement column); the
# benchmark itself (`make bench`) is not part of CI.
add_test(NAME bench_harness
         COMMAND ${CARVE_PYTHON} -m pytest -q -p no:cacheprovider ${CARVE_ROOT}/tests/bench/test_bench.py
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(bench_harness PROPERTIES TIMEOUT 600)

# The accuracy harness (issue 19, item 3: bench/eval.py) on its own: ground truth in COCO terms round-trips, the ground
# truth scored as detections gives mAP 1.0 and worse boxes less, the render cache, the package sync, the verdicts and
# a refused `--precision int8` reported as "not available". A few seconds; `make eval` itself is not part of CI.
add_test(NAME bench_eval_harness
         COMMAND ${CARVE_PYTHON} -m pytest -q -p no:cacheprovider ${CARVE_ROOT}/tests/bench/test_eval.py
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(bench_eval_harness PROPERTIES TIMEOUT 120)
