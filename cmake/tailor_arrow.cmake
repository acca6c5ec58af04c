# Finds Apache Arrow and Parquet in the project's Python environment: the
# pyarrow wheel ships libarrow, libparquet and their headers, as the torch
# wheel ships LibTorch. Defines TAILOR_ARROW_FOUND, and the imported target
# `tailor_arrow` for the one module that links them (dsl/table_module.cpp).
# Without pyarrow the module is not built and Parquet/Arrow data is refused
# with the reason when a job reads it.
set(TAILOR_VENV "${PROJECT_SOURCE_DIR}/.venv" CACHE PATH "The Python environment that holds LibTorch (scripts/setup)")
set(TAILOR_ARROW_FOUND FALSE)
if(EXISTS "${TAILOR_VENV}/bin/python")
  execute_process(
    COMMAND "${TAILOR_VENV}/bin/python" -c
      "import pyarrow; print(pyarrow.get_include()); print(pyarrow.get_library_dirs()[0]); print(pyarrow.__version__)"
    OUTPUT_VARIABLE _arrow_info ERROR_QUIET RESULT_VARIABLE _arrow_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
if(DEFINED _arrow_rc AND _arrow_rc EQUAL 0)
  string(REPLACE "\n" ";" _arrow_info "${_arrow_info}")
  list(GET _arrow_info 0 _arrow_include)
  list(GET _arrow_info 1 _arrow_libdir)
  list(GET _arrow_info 2 TAILOR_ARROW_VERSION)
  # The wheel has only versioned names (libarrow.so.2500): link those files.
  file(GLOB _arrow_lib "${_arrow_libdir}/libarrow.so.[0-9]*")
  file(GLOB _parquet_lib "${_arrow_libdir}/libparquet.so.[0-9]*")
  list(FILTER _arrow_lib INCLUDE REGEX "libarrow\\.so\\.[0-9]+$")
  list(FILTER _parquet_lib INCLUDE REGEX "libparquet\\.so\\.[0-9]+$")
  if(_arrow_lib AND _parquet_lib AND EXISTS "${_arrow_include}/parquet/arrow/reader.h")
    add_library(tailor_arrow INTERFACE IMPORTED GLOBAL)
    target_include_directories(tailor_arrow SYSTEM INTERFACE "${_arrow_include}")
    target_link_libraries(tailor_arrow INTERFACE ${_parquet_lib} ${_arrow_lib})
    # Where the module finds them once installed: the environment's real
    # folder (.venv is a link in the source tree; see tailor_torch.cmake).
    file(REAL_PATH "${_arrow_libdir}" TAILOR_ARROW_LIBDIR)
    set(TAILOR_ARROW_FOUND TRUE)
    message(STATUS "Tailor: Arrow and Parquet ${TAILOR_ARROW_VERSION} from ${TAILOR_ARROW_LIBDIR}")
  endif()
endif()
if(NOT TAILOR_ARROW_FOUND)
  message(STATUS "Tailor: no pyarrow in ${TAILOR_VENV}: Parquet and Arrow data will be refused (scripts/setup installs it)")
endif()
