# rk_embed(OUT FILES): writes a C file with every file's bytes, looked up by base name through
#   const char *rk_embedded(const char *name, size_t *len);
function(rk_embed out files)
  set(script ${CMAKE_SOURCE_DIR}/cmake/embed_run.cmake)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} "-DFILES=${files}" -P ${script}
    DEPENDS ${files} ${script}
    COMMENT "Embedding templates and specs")
endfunction()
