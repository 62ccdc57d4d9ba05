# rk_embed(OUT FILES): writes a C file with every file's bytes, looked up by base name through
#   const char *rk_embedded(const char *name, size_t *len);
function(rk_embed out files)
  set(script ${CMAKE_SOURCE_DIR}/cmake/embed_run.cmake)
  string(REPLACE ";" "|" joined "${files}")  # a list would be split into several arguments
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} "-DFILES=${joined}" -P ${script}
    DEPENDS ${files} ${script}
    COMMENT "Embedding templates and specs" VERBATIM)
endfunction()
