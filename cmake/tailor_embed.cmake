# tailor_embed_text(OUTPUT out.cpp SYMBOLS name=file ...): writes a .cpp that
# defines `extern const char name[]` holding each file's bytes (NUL
# terminated). Regenerated at build time when a source file changes.
function(tailor_embed_text)
  cmake_parse_arguments(E "" "OUTPUT" "SYMBOLS" ${ARGN})
  set(files)
  set(args)
  foreach(pair ${E_SYMBOLS})
    string(REPLACE "=" ";" parts "${pair}")
    list(GET parts 1 file)
    list(APPEND files ${file})
    list(APPEND args "${pair}")
  endforeach()
  string(REPLACE ";" "|" joined "${args}")
  add_custom_command(
    OUTPUT ${E_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${E_OUTPUT} "-DSYMBOLS=${joined}" -P ${PROJECT_SOURCE_DIR}/cmake/tailor_embed_run.cmake
    DEPENDS ${files} ${PROJECT_SOURCE_DIR}/cmake/tailor_embed_run.cmake
    COMMENT "Embedding ${files}"
    VERBATIM)
endfunction()
