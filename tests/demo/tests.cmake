# The generated demo as a user meets it (issue 18, items 5 and 7). Included by the top-level CMakeLists.txt.
# Each test builds one small package (about 10 s on 2 cores) and runs its demo a few times.
set(CARVE_DEMO_TESTS ${CARVE_ROOT}/tests/demo)

# On the shipped demo model (no torch needed), one package built by demo_frictions_setup:
#   demo_frictions_moved   a --weights-format file package moved to another folder, or its demo shipped with the
#                          weights beside it, finds them; without them it fails naming each path it looked at;
#   demo_frictions_images  images that are not images, truncated or in a format stb_image does not read: the reason;
#   demo_frictions_out     --out picks PNG / JPEG / BMP / TGA by extension and refuses others before anything runs;
#                          --out / --coco with --input, --coco without an image id: refused.
add_test(NAME demo_frictions_setup
         COMMAND ${CARVE_PYTHON} ${CARVE_DEMO_TESTS}/frictions.py --work ${CARVE_WORK} --part setup
         WORKING_DIRECTORY ${CARVE_ROOT})
set_tests_properties(demo_frictions_setup PROPERTIES FIXTURES_SETUP carve_demo_frictions TIMEOUT 600)
foreach(part moved images out)
  add_test(NAME demo_frictions_${part}
           COMMAND ${CARVE_PYTHON} ${CARVE_DEMO_TESTS}/frictions.py --work ${CARVE_WORK} --part ${part}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(demo_frictions_${part} PROPERTIES FIXTURES_REQUIRED carve_demo_frictions TIMEOUT 600)
endforeach()

# --coco FILE for every task: loaded by pycocotools' COCO.loadRes, equal to the demo's --json (masks decode to the
# same pixels, the strings pycocotools encodes), and scored by COCOeval at AP >= 0.99 against Ultralytics' own
# predictions; classify also --out (the top classes drawn) and --conf.
foreach(task detect segment pose obb classify)
  add_test(NAME demo_coco_${task}
           COMMAND ${CARVE_PYTHON} ${CARVE_DEMO_TESTS}/coco.py --task ${task} --work ${CARVE_WORK}
           WORKING_DIRECTORY ${CARVE_ROOT})
  set_tests_properties(demo_coco_${task} PROPERTIES TIMEOUT 600)
endforeach()
