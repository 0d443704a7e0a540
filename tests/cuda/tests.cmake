# Tests of the cuda backend (issue 5), included by the top-level CMakeLists.txt.
# Runs on machines without a GPU: the .cu sources build with the host emulation header
# tests/cuda/cuda_emu.h (g++ -x c++ -include cuda_emu.h -DCARVE_CUDA_EMULATION), and nvcc
# (when installed) only compiles them for the architectures below.
# Blocks: "runtime" (cuda-rt: emulator, kernels, nvcc of runtime/*.cu) and "generated packages"
# (cuda-gen) are kept apart to ease merges.

enable_language(CXX)

set(CARVE_CUDA_DIR ${CARVE_ROOT}/tests/cuda)
# The architectures every .cu is compiled for (runtime and generated packages): sm_XX.
set(CARVE_CUDA_ARCHITECTURES 75 80 86 89 90)
find_program(CARVE_NVCC nvcc HINTS /usr/local/cuda/bin)

# Compile options of a .cu built for the host through the emulation header.
set(CARVE_CUDA_EMU_OPTIONS -x c++ -include ${CARVE_CUDA_DIR}/cuda_emu.h -DCARVE_CUDA_EMULATION
    -Wall -Wextra -Werror -UNDEBUG)

# carve_cuda_emu_target(<target>): C++17 settings of an emulated .cu target.
function(carve_cuda_emu_target target)
  set_target_properties(${target} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF
                                             LINKER_LANGUAGE CXX)
  target_compile_options(${target} PRIVATE ${CARVE_CUDA_EMU_OPTIONS})
endfunction()

# ---- runtime (cuda-rt) ------------------------------------------------------------------

# Emulator self-test: barriers, shared memory, warp functions, atomics, launch errors,
# graphs, host GEMM.
set_source_files_properties(${CARVE_CUDA_DIR}/test_emu.cu PROPERTIES LANGUAGE CXX)
add_executable(test_cuda_emu ${CARVE_CUDA_DIR}/test_emu.cu)
carve_cuda_emu_target(test_cuda_emu)
add_test(NAME cuda_emu COMMAND $<TARGET_FILE:test_cuda_emu>)
set_tests_properties(cuda_emu PROPERTIES TIMEOUT 120)
