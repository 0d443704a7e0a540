# carve_share_cores(): every test of the current directory gets OMP_NUM_THREADS=1 (unless it sets its own).
#
# ctest runs two tests at a time (CI: 2 cores). torch's OpenMP workers and OpenBLAS's threads spin while they wait,
# so a test that runs two of them while the other test holds a core gets slower instead of faster: yolo26n's
# checkpoint (tools/oracle.py make-checkpoint) takes 12.7 s on one thread and 38.9 s on two, two at a time; a pair
# of oracle tests 32 s against 39 s. torch and OpenBLAS read the variable when they start; carve's own thread pool
# (runtime/carve_pool.c) does not, and the tests that measure threads set their counts themselves.
function(carve_share_cores)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test ${tests})
    get_property(env TEST ${test} PROPERTY ENVIRONMENT)
    if(NOT env MATCHES "OMP_NUM_THREADS=")
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT "OMP_NUM_THREADS=1")
    endif()
  endforeach()
endfunction()
