# carve_test_env(): the environment every test of the current directory runs in (appended to its own).
#
# * OMP_NUM_THREADS=1 (unless the test sets it). ctest runs two tests at a time (CI: 2 cores). torch's OpenMP
#   workers and OpenBLAS's threads spin while they wait, so a test that runs two of them while the other test holds
#   a core gets slower instead of faster: yolo26n's checkpoint (tools/oracle.py make-checkpoint) takes 12.7 s on
#   one thread and 38.9 s on two, two at a time; a pair of oracle tests 32 s against 39 s. torch and OpenBLAS read
#   the variable when they start; carve's own thread pool (runtime/carve_pool.c) does not, and the tests that
#   measure threads set their counts themselves.
# * A compiler cache, when ccache is installed (tools/install.sh --test): about 70 tests build a generated package
#   with CMake, each compiling the same runtime files (carve_attention.c alone takes 4 s at -O3) with one of a few
#   flag sets. CMAKE_<LANG>_COMPILER_LAUNCHER (read from the environment by CMake when it configures a new build
#   folder) puts ccache in front of the package builds' compilers; the cache lives in the build folder
#   (.cache/ccache) and starts empty with it. CCACHE_BASEDIR makes the paths below the build folder relative, so
#   two packages with the same runtime files and flags share entries wherever they sit (system headers keep
#   their absolute paths: a base directory above them would make their relative paths depend on the package's
#   depth). A test builds what it builds either way; only a second compile of the same preprocessed source with
#   the same flags and compiler is read back (ccache's own check), and failed compiles are never cached.
find_program(CARVE_CCACHE ccache)
set(carve_test_env_list "")
if(CARVE_CCACHE)
  foreach(lang C CXX CUDA)
    list(APPEND carve_test_env_list "CMAKE_${lang}_COMPILER_LAUNCHER=${CARVE_CCACHE}")
  endforeach()
  list(APPEND carve_test_env_list "CCACHE_DIR=${CMAKE_BINARY_DIR}/.cache/ccache" "CCACHE_BASEDIR=${CMAKE_BINARY_DIR}"
       "CCACHE_NOHASHDIR=1" "CCACHE_SLOPPINESS=include_file_mtime,include_file_ctime" "CCACHE_MAXSIZE=2G")
endif()

function(carve_test_env)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test ${tests})
    get_property(env TEST ${test} PROPERTY ENVIRONMENT)
    set(add ${carve_test_env_list})
    if(NOT env MATCHES "OMP_NUM_THREADS=")
      list(APPEND add "OMP_NUM_THREADS=1")
    endif()
    if(add)
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT ${add})
    endif()
  endforeach()
endfunction()
