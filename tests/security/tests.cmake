# Security tests (issue 8; docs/security.md): hostile inputs to the generator and to a generated package.
# Included by the top-level CMakeLists.txt. Budget: about 6 minutes on 2 cores in all.
#
# A fixture (security_setup) generates the demo model at imgsz 64 and builds it twice with the harnesses of
# tests/security/harness: CARVE_WORK/security/san (ASan + UBSan, and the libFuzzer target when clang has it) and
# CARVE_WORK/security/plain (no sanitizers: malloc counting, valgrind).
set(carve_sec ${CARVE_ROOT}/tests/security)
set(carve_sec_work ${CARVE_WORK}/security)
set(carve_sec_driver ${CARVE_PYTHON} ${carve_sec}/run_security.py)

add_test(NAME security_setup COMMAND ${carve_sec_driver} setup --work ${carve_sec_work} WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(security_setup PROPERTIES FIXTURES_SETUP carve_security TIMEOUT 600 RESOURCE_LOCK cpu_heavy)

# name | command (all need the fixture)
set(carve_sec_tests
  "security_asan_api|${carve_sec_work}/san/api_test"
  "security_asan_concurrency|${carve_sec_work}/san/concurrency_test"
  "security_concurrency|${carve_sec_work}/plain/concurrency_test"
  "security_noalloc|${carve_sec_work}/plain/noalloc_test"
  "security_asan_demo|${CARVE_PYTHON};${carve_sec}/run_security.py;demo;--work;${carve_sec_work}"
  "security_valgrind_demo|${CARVE_PYTHON};${carve_sec}/run_security.py;valgrind;--work;${carve_sec_work}"
  "security_fuzz_entry|${CARVE_PYTHON};${carve_sec}/run_security.py;fuzz;--work;${carve_sec_work};--seconds;20"
)
file(GLOB carve_sec_regressions ${carve_sec}/regression/entry-*/input*)
if(carve_sec_regressions)
  list(APPEND carve_sec_tests
       "security_fuzz_regressions|${CARVE_PYTHON};${carve_sec}/run_security.py;replay;--work;${carve_sec_work}")
endif()
foreach(entry ${carve_sec_tests})
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(REMOVE_AT parts 0)
  add_test(NAME ${name} COMMAND ${parts} WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED carve_security TIMEOUT 300 RESOURCE_LOCK cpu_heavy
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endforeach()

# atheris (PyPI) fuzzers of the generator's readers: only CarveError may escape.
# The corpus (seeds written by the script, grown by each run) lives in the build folder; findings land in
# CARVE_WORK/security/findings-<target>.
foreach(target checkpoint manifest)
  file(MAKE_DIRECTORY ${carve_sec_work}/corpus-${target} ${carve_sec_work}/findings-${target})
  add_test(NAME security_fuzz_${target}
           COMMAND ${CARVE_PYTHON} ${carve_sec}/fuzz_${target}.py -max_total_time=20 -seed=1 -timeout=20
                   -rss_limit_mb=4096 -artifact_prefix=${carve_sec_work}/findings-${target}/
                   ${carve_sec_work}/corpus-${target}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(security_fuzz_${target} PROPERTIES TIMEOUT 300 RESOURCE_LOCK cpu_heavy)
endforeach()
