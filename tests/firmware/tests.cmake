# Firmware-ready packages (issue 7): standalone builds, weight formats, caller-owned memory, --imgsz H W,
# cross-compiles, determinism, banners and the ABI check. Included by the top-level CMakeLists.txt.
# Area CI budget: <= 6 minutes on 2 cores (each test prints its time).
set(CARVE_FW ${CARVE_ROOT}/tests/firmware)

# Generator side: determinism, banners with the options, ABI checks (and that a mismatch fails to compile),
# the weights file layout, --imgsz H W, f16 range refusal.
add_test(NAME firmware_generate
         COMMAND ${CARVE_PYTHON} -m pytest -q -p no:cacheprovider ${CARVE_FW}/test_generate.py
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_generate PROPERTIES TIMEOUT 600 ENVIRONMENT "CARVE_WORK=${CARVE_WORK}")

# A package copied out of the repository builds with its own CMakeLists.txt, from a parent project
# (add_subdirectory + carve::<name>) and with its README's plain cc command; each demo runs once.
add_test(NAME firmware_standalone
         COMMAND ${CARVE_PYTHON} ${CARVE_FW}/standalone.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(firmware_standalone PROPERTIES TIMEOUT 900 RESOURCE_LOCK cpu_heavy)
