# tailor_add_library(NAME SOURCES ...): a component library with includes
# rooted at the repository root and the project's warning flags.
function(tailor_add_library name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PRIVATE tailor_warnings)
endfunction()

# tailor_add_test(NAME LABEL SOURCES ... LIBS ...): one gtest binary per
# module. Torch-free binaries register each test with ctest so failures are
# reported individually; torch binaries register once (0.7 s start-up each).
# Every test's environment: no test reads or writes the user's calibration
# store (platform/calibration_store.h), which would calibrate the plans of
# the tests after it; a test of the store names a file of its own.
set(TAILOR_TEST_ENVIRONMENT "TAILOR_CALIBRATION=none")
# Nor the user's cache folder (~/.cache/tailor/tokens): the runners the
# tests start cache their data in the build folder (each test's temporary
# data file used to leave an entry there that no job could read again;
# `tailor cache show`). A property of its own, one value, as
# gtest_discover_tests passes a list property's items as separate arguments.
set(TAILOR_TEST_CACHE "TAILOR_CACHE_DIR=set:${CMAKE_BINARY_DIR}/test-cache")

# The same for a directory's scripted tests (add_test): called at the end of
# each tests/ CMakeLists.txt that adds any.
function(tailor_isolate_scripted_tests)
  get_property(scripted DIRECTORY PROPERTY TESTS)
  foreach(t IN LISTS scripted)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${TAILOR_TEST_ENVIRONMENT})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT_MODIFICATION ${TAILOR_TEST_CACHE})
  endforeach()
endfunction()

function(tailor_add_test name)
  cmake_parse_arguments(T "" "LABEL" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main tailor_warnings)
  target_compile_definitions(${name} PRIVATE
    TAILOR_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    TAILOR_BINARY_DIR="${CMAKE_BINARY_DIR}")
  # The tests' own code is glue around the libraries (built -O2): -O1
  # compiles it a third faster (docs/testing.md). Torch test binaries share
  # runner_test's precompiled header, built with the same flags.
  target_compile_options(${name} PRIVATE $<$<CONFIG:RelWithDebInfo,Release>:-O1>)
  if(T_LABEL STREQUAL "torch" OR T_LABEL STREQUAL "interop")
    add_test(NAME ${name} COMMAND ${name})
    # Busy-waiting OpenMP threads stall when ctest runs other work beside
    # them on 2 cores (docs/libtorch.md, "OpenMP and fresh pages").
    set_tests_properties(${name} PROPERTIES LABELS ${T_LABEL}
      ENVIRONMENT "OMP_WAIT_POLICY=PASSIVE;${TAILOR_TEST_ENVIRONMENT}" ENVIRONMENT_MODIFICATION ${TAILOR_TEST_CACHE})
  else()
    include(GoogleTest)
    gtest_discover_tests(${name} PROPERTIES LABELS ${T_LABEL} ENVIRONMENT "${TAILOR_TEST_ENVIRONMENT}"
      ENVIRONMENT_MODIFICATION "${TAILOR_TEST_CACHE}" DISCOVERY_TIMEOUT 30)
  endif()
endfunction()
