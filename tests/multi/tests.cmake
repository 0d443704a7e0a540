# Several models in one program (issue 16, item 6), included by the top-level CMakeLists.txt.
# yolo26n-shapes (detect) and a random-weight yolo26n-cls in one program, built from the package of both models
# (its CMakeLists.txt, its README's cc line) and from two separate packages (add_subdirectory, docs/firmware.md's
# cc line): bit-identical to each package alone; two runtime ABIs (an edited copy) or two backends refused at
# configure / compile time, naming both packages. About 2 minutes on 2 cores (the cls checkpoint cached in
# CARVE_WORK/checkpoints). `carve generate A.yaml B.yaml` refusals: tests/generator/test_multi.py.
add_test(NAME multi_model
         COMMAND ${CARVE_PYTHON} ${CARVE_ROOT}/tests/multi/multi_model.py --work ${CARVE_WORK}
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(multi_model PROPERTIES TIMEOUT 900)
