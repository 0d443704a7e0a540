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
set_tests_properties(security_setup PROPERTIES FIXTURES_SETUP carve_security TIMEOUT 600)

# carve_security_test(<name> <command...>): a test of the fixture's packages.
function(carve_security_test name)
  add_test(NAME ${name} COMMAND ${ARGN} WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED carve_security TIMEOUT 300
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endfunction()

carve_security_test(security_asan_api ${carve_sec_work}/san/api_test)
carve_security_test(security_asan_concurrency ${carve_sec_work}/san/concurrency_test 1)
carve_security_test(security_concurrency ${carve_sec_work}/plain/concurrency_test)
carve_security_test(security_noalloc ${carve_sec_work}/plain/noalloc_test)
carve_security_test(security_asan_demo ${carve_sec_driver} demo --work ${carve_sec_work})
carve_security_test(security_valgrind_demo ${carve_sec_driver} valgrind --work ${carve_sec_work})
carve_security_test(security_fuzz_entry ${carve_sec_driver} fuzz --work ${carve_sec_work} --seconds 20)
file(GLOB carve_sec_regressions ${carve_sec}/regression/entry-*/input*)
if(carve_sec_regressions)
  carve_security_test(security_fuzz_regressions ${carve_sec_driver} replay --work ${carve_sec_work})
endif()

# The int8 demo model (issue 19: "the int8 packages are covered by the same fuzzers, ASan/UBSan run and
# no-allocation test"): `carve generate --precision int8` (portable, imgsz 64 as the fp32 package here;
# tests/int8/int8pkg.py's package, cached in CARVE_WORK/int8) built with the same harnesses in
# CARVE_WORK/security/san-int8 and plain-int8.
add_test(NAME security_setup_int8
         COMMAND ${carve_sec_driver} setup-int8 --work ${carve_sec_work} --int8-work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(security_setup_int8 PROPERTIES FIXTURES_SETUP carve_security_int8 TIMEOUT 600)
function(carve_security_int8_test name)
  add_test(NAME ${name} COMMAND ${ARGN} WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED carve_security_int8 TIMEOUT 300
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
endfunction()
carve_security_int8_test(security_asan_int8_api ${carve_sec_work}/san-int8/api_test)
carve_security_int8_test(security_asan_int8_concurrency ${carve_sec_work}/san-int8/concurrency_test 1)
carve_security_int8_test(security_int8_concurrency ${carve_sec_work}/plain-int8/concurrency_test)
carve_security_int8_test(security_int8_noalloc ${carve_sec_work}/plain-int8/noalloc_test)
carve_security_int8_test(security_asan_int8_demo ${carve_sec_driver} demo --work ${carve_sec_work} --variant int8)
carve_security_int8_test(security_valgrind_int8_demo ${carve_sec_driver} valgrind --work ${carve_sec_work}
                         --variant int8)
carve_security_int8_test(security_fuzz_int8_entry ${carve_sec_driver} fuzz --work ${carve_sec_work} --variant int8
                         --seconds 20)
if(carve_sec_regressions)
  carve_security_int8_test(security_fuzz_int8_regressions ${carve_sec_driver} replay --work ${carve_sec_work}
                           --variant int8)
endif()

# Per-task functions of segment and classify packages (masks, top-k, caller-owned scratch) under ASan + UBSan.
add_test(NAME security_setup_tasks COMMAND ${carve_sec_driver} setup-tasks --work ${carve_sec_work}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(security_setup_tasks PROPERTIES FIXTURES_SETUP carve_security_tasks TIMEOUT 600)
foreach(task seg cls)
  add_test(NAME security_asan_${task}_api COMMAND ${carve_sec_work}/san-${task}/task_api_test)
  set_tests_properties(security_asan_${task}_api PROPERTIES FIXTURES_REQUIRED carve_security_tasks TIMEOUT 300
                       ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
  # libFuzzer on the same functions (harness/fuzz_task.c), 15 s
  add_test(NAME security_fuzz_${task}
           COMMAND ${carve_sec_driver} fuzz-task --work ${carve_sec_work} --task ${task} --seconds 15
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(security_fuzz_${task} PROPERTIES FIXTURES_REQUIRED carve_security_tasks TIMEOUT 300)
endforeach()

# atheris (PyPI) fuzzers of the generator's readers: only CarveError may escape. An input that rewrites one
# entry of the demo checkpoint reads all of it through instrumented code: 2 s alone, over 20 s on a loaded
# machine, hence the 120 s per-input timeout (a hang still fails the test).
# The corpus (seeds written by the script, grown by each run) lives in the build folder; findings land in
# CARVE_WORK/security/findings-<target>.
foreach(target checkpoint manifest)
  file(MAKE_DIRECTORY ${carve_sec_work}/corpus-${target} ${carve_sec_work}/findings-${target})
  add_test(NAME security_fuzz_${target}
           COMMAND ${CARVE_PYTHON} ${carve_sec}/fuzz_${target}.py -max_total_time=20 -seed=1 -timeout=120
                   -rss_limit_mb=4096 -artifact_prefix=${carve_sec_work}/findings-${target}/
                   ${carve_sec_work}/corpus-${target}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(security_fuzz_${target} PROPERTIES TIMEOUT 300)
endforeach()

# libFuzzer + ASan + UBSan on the Exif orientation parser of runtime/carve_io.c (issue 18), 10 s; skipped without clang's libFuzzer.
add_test(NAME security_fuzz_exif COMMAND ${CARVE_PYTHON} ${carve_sec}/fuzz_exif.py ${carve_sec_work}/exif 10
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(security_fuzz_exif PROPERTIES TIMEOUT 300)
