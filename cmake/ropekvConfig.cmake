# find_package(ropekv CONFIG): the installed ropekv (docs/install.md).
#   ropekv::ropekv          libropekv.so and include/ropekv.h
#   ropekv::ropekv_static   libropekv_static.a (Lua included; links Threads, dl and m)
#   ropekv::ropekv-gen      the CLI
#   ropekv_add_kernels()    emits (and compiles) kernels for the consumer's spec files at build time
include(CMakeFindDependencyMacro)
find_dependency(Threads)
include(${CMAKE_CURRENT_LIST_DIR}/ropekvTargets.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/ropekvKernels.cmake)
