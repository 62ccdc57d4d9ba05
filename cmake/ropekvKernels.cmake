# ropekv_add_kernels(<name> SPECS <file>... [FILTER <text>] [COMPILE] [BUNDLE <dir>] [TARGETS <target>...])
#
# Makes a target <name> that, at build time, runs
#     ropekv-gen --spec <file>... [--filter <text>] emit --out <binary dir>/<name>
# (one .hip source per variant and manifest.json, deterministic), again whenever a spec file or
# ropekv-gen changes. Relative spec paths are taken from the current source directory.
#   FILTER   only variants whose key contains <text> (ropekv-gen --filter)
#   COMPILE  also compile every variant with its target's compiler, as `ropekv-gen build --strict`
#            does (hiprtc or clang-22 for AMD, nvrtc for NVIDIA, $CXX for host): a spec that does not
#            compile, or spills, fails the build. Needs those compilers on the build machine.
#   BUNDLE   also build every variant's code ahead of time into <dir> (relative: to the current binary
#            directory), as `ropekv-gen build --bundle <dir>` does: a read-only cache layer
#            ($ROPEKV_CACHE_RO, ropekv_options.cache_ro) with which a machine without any compiler runs
#            them. Needs the target's compiler on the build machine (host: a C++ compiler; NVIDIA: nvrtc;
#            AMD: hiprtc for the targets it builds), not its GPU.
#   TARGETS  with COMPILE or BUNDLE, only these targets (rows of specs/archs.lua: sm_90, gfx942, host, ...)
# The variable <name>_DIR is set to the output directory. Example:
#     find_package(ropekv CONFIG REQUIRED)
#     ropekv_add_kernels(my_kernels SPECS specs/my_model.lua COMPILE TARGETS sm_90)
# Included by ropekvConfig.cmake; a build of ropekv itself can include it too (ropekv::ropekv-gen is
# then its own CLI).
function(ropekv_add_kernels name)
  cmake_parse_arguments(PARSE_ARGV 1 RK "COMPILE" "FILTER;BUNDLE" "SPECS;TARGETS")
  if(RK_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "ropekv_add_kernels(${name}): unknown arguments: ${RK_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT RK_SPECS)
    message(FATAL_ERROR "ropekv_add_kernels(${name}): SPECS <file>... is required")
  endif()
  if(RK_TARGETS AND NOT RK_COMPILE AND NOT RK_BUNDLE)
    message(FATAL_ERROR "ropekv_add_kernels(${name}): TARGETS is only meaningful with COMPILE or BUNDLE")
  endif()
  if(NOT TARGET ropekv::ropekv-gen)
    message(FATAL_ERROR "ropekv_add_kernels(${name}): no ropekv::ropekv-gen target (find_package(ropekv) first)")
  endif()

  set(specs "")
  set(args "")
  foreach(spec IN LISTS RK_SPECS)
    get_filename_component(spec "${spec}" ABSOLUTE)
    list(APPEND specs "${spec}")
    list(APPEND args --spec "${spec}")
  endforeach()
  if(DEFINED RK_FILTER)
    list(APPEND args --filter "${RK_FILTER}")
  endif()

  set(out ${CMAKE_CURRENT_BINARY_DIR}/${name})
  add_custom_command(
    OUTPUT ${out}/manifest.json
    COMMAND ${CMAKE_COMMAND} -E rm -rf ${out}
    COMMAND ropekv::ropekv-gen ${args} emit --out ${out}
    DEPENDS ${specs} $<TARGET_FILE:ropekv::ropekv-gen>
    COMMENT "ropekv-gen emit: ${name}"
    VERBATIM)
  set(outputs ${out}/manifest.json)

  if(RK_COMPILE)
    set(build_args "")
    foreach(t IN LISTS RK_TARGETS)
      list(APPEND build_args --target ${t})
    endforeach()
    add_custom_command(
      OUTPUT ${out}.compiled
      COMMAND ropekv::ropekv-gen ${args} build ${build_args} --strict
      COMMAND ${CMAKE_COMMAND} -E touch ${out}.compiled
      DEPENDS ${specs} $<TARGET_FILE:ropekv::ropekv-gen>
      COMMENT "ropekv-gen build --strict: ${name}"
      VERBATIM)
    list(APPEND outputs ${out}.compiled)
  endif()

  if(RK_BUNDLE)
    get_filename_component(bundle "${RK_BUNDLE}" ABSOLUTE BASE_DIR ${CMAKE_CURRENT_BINARY_DIR})
    set(bundle_args "")
    foreach(t IN LISTS RK_TARGETS)
      list(APPEND bundle_args --target ${t})
    endforeach()
    add_custom_command(
      OUTPUT ${bundle}/ropekv-bundle.txt
      COMMAND ${CMAKE_COMMAND} -E rm -rf ${bundle}
      COMMAND ropekv::ropekv-gen ${args} build ${bundle_args} --bundle ${bundle}
      DEPENDS ${specs} $<TARGET_FILE:ropekv::ropekv-gen>
      COMMENT "ropekv-gen build --bundle: ${name}"
      VERBATIM)
    list(APPEND outputs ${bundle}/ropekv-bundle.txt)
  endif()

  add_custom_target(${name} ALL DEPENDS ${outputs})
  set(${name}_DIR ${out} PARENT_SCOPE)
endfunction()
