# cmake --install: what a C/C++ consumer needs (docs/install.md), under the prefix:
#   include/ropekv.h, include/ropekv_version.h
#   lib/libropekv.so (+ SONAME links), lib/libropekv_static.a     self-contained: Lua included
#   bin/ropekv-gen                                                 the CLI
#   lib/cmake/ropekv/    find_package(ropekv CONFIG): ropekv::ropekv, ropekv::ropekv_static,
#                        ropekv::ropekv-gen, and ropekv_add_kernels() (ropekvKernels.cmake)
#   lib/pkgconfig/       ropekv.pc (the shared library), ropekv-static.pc (the archive)
# Everything is relocatable: the files find the prefix from their own location.
install(TARGETS ropekv ropekv_static ropekv-gen EXPORT ropekvTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(RK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ropekv)
install(EXPORT ropekvTargets NAMESPACE ropekv:: DESTINATION ${RK_CMAKE_DIR})
include(CMakePackageConfigHelpers)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ropekvConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_SOURCE_DIR}/cmake/ropekvConfig.cmake ${CMAKE_SOURCE_DIR}/cmake/ropekvKernels.cmake
              ${CMAKE_BINARY_DIR}/ropekvConfigVersion.cmake DESTINATION ${RK_CMAKE_DIR})

# pkg-config files: the prefix is found from the .pc file's directory (${pcfiledir}), so the install
# may be moved or made with `cmake --install --prefix`.
string(REGEX REPLACE "[^/]+" ".." RK_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
foreach(pc ropekv ropekv-static)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()
