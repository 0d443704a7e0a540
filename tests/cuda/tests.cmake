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

# The device runtime (runtime/carve_cuda_*.cu) built for the host, and its tests: each
# kernel against the CPU runtime (the kernel families (carve_epilogue.h, carve_attention.h, carve_layout.h, ...) / carve_pre / carve_post / carve_mask) or a loop.
file(GLOB CARVE_CUDA_RUNTIME_SOURCES CONFIGURE_DEPENDS ${CARVE_ROOT}/runtime/carve_cuda_*.cu)
set_source_files_properties(${CARVE_CUDA_RUNTIME_SOURCES} PROPERTIES LANGUAGE CXX)
add_library(carve_cuda_emu STATIC ${CARVE_CUDA_RUNTIME_SOURCES})
carve_cuda_emu_target(carve_cuda_emu)
target_include_directories(carve_cuda_emu PUBLIC ${CARVE_ROOT}/runtime)
target_link_libraries(carve_cuda_emu PUBLIC carve_runtime)

# carve_cuda_kernel_test(<name>): tests/cuda/test_<name>.cu as ctest cuda_<name>.
function(carve_cuda_kernel_test name)
  set_source_files_properties(${CARVE_CUDA_DIR}/test_${name}.cu PROPERTIES LANGUAGE CXX)
  add_executable(test_cuda_${name} ${CARVE_CUDA_DIR}/test_${name}.cu)
  carve_cuda_emu_target(test_cuda_${name})
  target_link_libraries(test_cuda_${name} PRIVATE carve_cuda_emu)
  add_test(NAME cuda_${name} COMMAND $<TARGET_FILE:test_cuda_${name}>)
  set_tests_properties(cuda_${name} PROPERTIES TIMEOUT 300)
endfunction()

carve_cuda_kernel_test(topk)  # top-k vs a sort, gather, e2e of the four tasks vs the CPU
carve_cuda_kernel_test(ops)   # op kernels vs the CPU runtime / loops on odd, strided shapes
carve_cuda_kernel_test(pre)   # letterbox / classify pre-processing bit-exact vs carve_pre.c
carve_cuda_kernel_test(nms)   # --head nms: device NMS vs carve_nms_postprocess (ties, all / none suppressed, graphs)
carve_cuda_kernel_test(f16)   # --precision fp16: half conversions, casts, conv / moves / add / attention vs double loops
carve_cuda_kernel_test(igemm) # the fused implicit-GEMM conv (wmma TF32 / fp16 + epilogue, one launch) vs double loops
carve_cuda_kernel_test(select64) # the fused e2e head's radix select vs a sort (includes carve_cuda_topk.cu)

# Every kernel begins with CARVE_CU_KERNEL_ENTRY() (programmatic dependent launch: runtime/carve_cuda.h).
add_test(NAME cuda_kernel_entry COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/check_kernel_entry.py)

# nvcc: the runtime .cu files compile for every architecture, warnings as errors (skipped,
# with a message, where nvcc is not installed). `make test` (CI time) compiles them for the two architectures that
# together compile every branch of the code (runtime/carve_cuda.h, carve_cuda_igemm.h test __CUDA_ARCH__ at 700,
# 800 and 900): sm_75 (wmma fp16, no cp.async, no TF32, no programmatic dependent launch) and sm_90 (TF32,
# cp.async: the >= 800 code, and programmatic dependent launch); sm_80, sm_86 and sm_89 compile sm_90's code
# without the launch attribute, which sm_75 compiles. `make test-full` compiles every architecture above.
if(CARVE_ORACLE_FULL)
  set(carve_cuda_runtime_archs ${CARVE_CUDA_ARCHITECTURES})
else()
  set(carve_cuda_runtime_archs 75 90)
endif()
string(REPLACE ";" " " carve_cuda_archs "${carve_cuda_runtime_archs}")
add_test(NAME cuda_nvcc_runtime
         COMMAND sh ${CARVE_CUDA_DIR}/nvcc_check.sh "${CARVE_NVCC}" ${CARVE_ROOT}/runtime
                 ${CMAKE_BINARY_DIR}/cuda_nvcc "${carve_cuda_archs}" ${CARVE_CUDA_RUNTIME_SOURCES})
set_tests_properties(cuda_nvcc_runtime PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
# The kernel tests through nvcc's front end and device compile (-cuda: no host compile or link; sm_90, seconds): CI
# runs them built by the host compiler, so a test that only nvcc refuses (test_nms's std::min of a list without
# <algorithm>, 2026-11-28) failed only on the GPU.
add_test(NAME cuda_nvcc_kernel_tests
         COMMAND env NVCC_FRONT=1 sh ${CARVE_CUDA_DIR}/nvcc_check.sh "${CARVE_NVCC}"
                 "${CARVE_ROOT}/runtime ${CARVE_CUDA_DIR}" ${CMAKE_BINARY_DIR}/cuda_nvcc_front "90"
                 ${CARVE_CUDA_DIR}/test_topk.cu ${CARVE_CUDA_DIR}/test_ops.cu ${CARVE_CUDA_DIR}/test_pre.cu
                 ${CARVE_CUDA_DIR}/test_nms.cu ${CARVE_CUDA_DIR}/test_f16.cu ${CARVE_CUDA_DIR}/test_igemm.cu
                 ${CARVE_CUDA_DIR}/test_select64.cu ${CARVE_CUDA_DIR}/bench_igemm.cu)
set_tests_properties(cuda_nvcc_kernel_tests PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)

# The same kernel tests with AddressSanitizer + UBSan on the emulated kernels: device
# buffers are host allocations here, so an out-of-bounds index in a kernel is reported; and the threads of each
# block in reverse order (CARVE_EMU_THREAD_ORDER), so that a missing barrier changes a result.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
check_cxx_source_compiles("int main() { return 0; }" CARVE_CXX_HAS_ASAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(CARVE_CXX_HAS_ASAN)
  set(CARVE_CUDA_ASAN -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_library(carve_cuda_emu_asan STATIC ${CARVE_CUDA_RUNTIME_SOURCES})
  carve_cuda_emu_target(carve_cuda_emu_asan)
  target_compile_options(carve_cuda_emu_asan PRIVATE ${CARVE_CUDA_ASAN})
  target_include_directories(carve_cuda_emu_asan PUBLIC ${CARVE_ROOT}/runtime)
  target_link_libraries(carve_cuda_emu_asan PUBLIC carve_runtime)
  foreach(name emu topk ops pre nms f16 igemm select64)
    add_executable(test_cuda_${name}_asan ${CARVE_CUDA_DIR}/test_${name}.cu)
    carve_cuda_emu_target(test_cuda_${name}_asan)
    target_compile_options(test_cuda_${name}_asan PRIVATE ${CARVE_CUDA_ASAN})
    if(NOT CARVE_ORACLE_FULL)  # `make test`: the largest shapes in the plain build only (test_igemm.cu)
      target_compile_definitions(test_cuda_${name}_asan PRIVATE CARVE_TEST_REDUCED=1)
    endif()
    target_link_options(test_cuda_${name}_asan PRIVATE -fsanitize=address,undefined)
    target_link_libraries(test_cuda_${name}_asan PRIVATE carve_cuda_emu_asan)
    add_test(NAME cuda_${name}_asan COMMAND $<TARGET_FILE:test_cuda_${name}_asan>)
    # the kernels' threads in reverse order here (the plain tests: threadIdx order), so that a read of another
    # thread's write with no barrier between them fails one of the two (tests/cuda/cuda_emu.h)
    set_tests_properties(cuda_${name}_asan PROPERTIES TIMEOUT 300
                         ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;CARVE_EMU_THREAD_ORDER=reverse")
  endforeach()
endif()

# ---- generated packages (cuda-gen) ------------------------------------------------------
# The generated cuda package of every variant, built on the host with the emulation header, against the
# xnnpack package of the same checkpoint, layer by layer and final (tests/cuda/cuda_vs_xnnpack.py): one test
# per task (n, s at 96x96; m, l, x at 64x64: emulated kernels run on one CPU core), and yolo26n at its full
# 640x640 through the package's own CMake emulation option. Checkpoints are shared with the oracle tests
# (${CARVE_WORK}/checkpoints); the runtimes are compiled once (${CARVE_WORK}/runtimes).
# The scales of each task are the top-level CMakeLists.txt's carve_scales_<task> (`make test`: n of every task and
# l of segment; `make test-full`: all five): about 17 s of fixed cost a variant.
foreach(task detect segment pose obb classify)
  string(REPLACE ";" "," scales "${carve_scales_${task}}")
  add_test(NAME cuda_pkg_${task}
           COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_vs_xnnpack.py --task ${task} --scales ${scales}
                   --imgsz 96 --imgsz-large 64 --work ${CARVE_WORK}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(cuda_pkg_${task} PROPERTIES TIMEOUT 1800)
endforeach()
# --head nms (issue 18): the device NMS (runtime/carve_cuda_nms.cu) against the CPU one, yolo26n of each box task at
# 320 (the random checkpoints' one-to-many head keeps tens of boxes there).
foreach(task detect segment pose obb)
  add_test(NAME cuda_pkg_nms_${task}
           COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_vs_xnnpack.py --task ${task} --scales n --imgsz 320 --head nms
                   --work ${CARVE_WORK}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(cuda_pkg_nms_${task} PROPERTIES TIMEOUT 900)
endforeach()
# --precision fp16 (issue 20): the trained demo model as an fp16 cuda package (e2e and --head nms) under emulation,
# layer by layer against PyTorch float32 within 3x PyTorch float16's own drift, and run_image's detections against
# Ultralytics' predictor (tests/cuda/cuda_f16.py).
add_test(NAME cuda_f16_shapes
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_f16.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_f16_shapes PROPERTIES TIMEOUT 900)
# segment and classify (their heads' transposed convolution, pooling, linear layer and softmax in half) with random
# weights at 160, layer by layer within the same bounds, the prototypes widened to float32; classify's run_image
# against Ultralytics' predictor (about 2 minutes with the checkpoints made, 20 s without).
add_test(NAME cuda_f16_seg_cls
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_f16.py --work ${CARVE_WORK} --heads "" --random-tasks segment,classify
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_f16_seg_cls PROPERTIES TIMEOUT 900)
if(CARVE_ORACLE_FULL)  # make test-full: detect, pose and obb with random weights, layer by layer (about 4 minutes)
  add_test(NAME cuda_f16_tasks
           COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_f16.py --work ${CARVE_WORK} --heads "" --random-tasks detect,pose,obb
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(cuda_f16_tasks PROPERTIES TIMEOUT 1800)
endif()
# The fused implicit-GEMM convolutions (runtime/carve_cuda_igemm.h, options.fused_conv, the demo's --fused-conv):
# yolo26n at 96 in TF32 against xnnpack within the TF32 bound, with fewer launches per forward than the cuBLAS path
# (about 20 s); the trained demo model as an fp16 package with --fused-conv, e2e head, within cuda_f16.py's bounds
# (about 60 s).
add_test(NAME cuda_pkg_fused
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_vs_xnnpack.py --task detect --scales n --imgsz 96 --fused-conv --tune
                 --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_pkg_fused PROPERTIES TIMEOUT 900)
add_test(NAME cuda_f16_fused
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_f16.py --work ${CARVE_WORK} --heads e2e --fused-conv
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_f16_fused PROPERTIES TIMEOUT 900)
add_test(NAME cuda_pkg_yolo26n_640
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_vs_xnnpack.py --task detect --scales n --imgsz 640 --cmake
                 --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_pkg_yolo26n_640 PROPERTIES TIMEOUT 1200)

# The package options (issue 7) under emulation, yolo26n at 64x64: --weights-format file (good file, and
# damaged magic / version / size / CRC / model each refused with its status), --weights-dtype f16 (rebuilt on
# the host from the checkpoint's halves: bit-identical to the f32 package), and
# create_with (no malloc / cudaMalloc / cublasCreate, counted with --wrap and by the emulator; dumps identical
# to create's; also for yolo26n-seg and yolo26n-cls). tests/cuda/cuda_options.py, tests/cuda/options_main.cu.
add_test(NAME cuda_options
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_options.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_options PROPERTIES TIMEOUT 600)

# --batch and the asynchronous API (issue 20), yolo26n fp32 (TF32) at 96x96 and fp16 at 64x64: a --batch 2 package's
# rows of each image (run_tensors, enqueue_tensors from device memory with pinned results, run_images /
# enqueue_images, fused convolutions) bit-identical to the --batch 1 package's on that image alone; graph nodes
# per forward of batch 2 at most 4 above batch 1's (the attention per head); --batch refusals.
# tests/cuda/cuda_batch.py, batch_main.cu.
add_test(NAME cuda_batch
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/cuda_batch.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_batch PROPERTIES TIMEOUT 600)

# nvcc: one generated package per task for every architecture above, and the option variants of
# nvcc_packages.py --options (weights file, f16), -Werror (skipped without nvcc).
# `make test` (CI time) compiles only the option variants (every task is among them), for the newest architecture
# (generated packages hold no device code of their own: no header they include defines a kernel; the runtime's
# kernels, where the architectures differ, are compiled by cuda_nvcc_runtime above); `make test-full` also the
# plain package of each task, for every architecture.
string(REPLACE ";" "," carve_cuda_archs_csv "${CARVE_CUDA_ARCHITECTURES}")
list(GET CARVE_CUDA_ARCHITECTURES -1 carve_cuda_arch_last)
if(CARVE_ORACLE_FULL)
  set(carve_cuda_option_archs ${carve_cuda_archs_csv})
  set(carve_cuda_package_tasks "")  # nvcc_packages.py's default: every task
else()
  set(carve_cuda_option_archs "${carve_cuda_arch_last}")
  set(carve_cuda_package_tasks --tasks=)
endif()
add_test(NAME cuda_nvcc_packages
         COMMAND ${CARVE_PYTHON} ${CARVE_CUDA_DIR}/nvcc_packages.py --work ${CARVE_WORK} ${carve_cuda_package_tasks}
                 --archs ${carve_cuda_option_archs} --option-archs ${carve_cuda_option_archs}
                 $<$<BOOL:${CARVE_NVCC}>:--nvcc=${CARVE_NVCC}>
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(cuda_nvcc_packages PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
