# bitcheck (issue 16's proof harness, tools/bitcheck.py): the compare logic on small synthetic result folders
# (identical, one ulp off in one layer, a missing / failed entry, a changed JSON field, other weights, threads
# disagreeing). No packages are built; the harness's own `run` is used by hand (see the tool's --help).
add_test(NAME bitcheck_compare
         COMMAND ${CARVE_PYTHON} -m pytest -q -p no:cacheprovider ${CARVE_ROOT}/tests/bitcheck/test_bitcheck.py
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(bitcheck_compare PROPERTIES TIMEOUT 300)
