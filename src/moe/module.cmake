# The MoE dispatch/combine module (include/xfer_moe.h): the protocol with
# remote ranks (host proxy) and the CPU path, built into libxfer from the same
# object library, on the public API only. The GPU kernels are a separate
# shared object (src/moe/cuda), built where nvcc exists.
target_sources(xfer_obj PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/moe_config.c ${CMAKE_CURRENT_LIST_DIR}/moe_route.c
  ${CMAKE_CURRENT_LIST_DIR}/moe_plan.c ${CMAKE_CURRENT_LIST_DIR}/moe_module.c
  ${CMAKE_CURRENT_LIST_DIR}/moe_proxy.c ${CMAKE_CURRENT_LIST_DIR}/moe_cpu.c)
# The combine sums in a fixed order with one rounding per operation, so that
# its bits match the reference and the GPU kernel: no fused multiply-add.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/moe_cpu.c PROPERTIES
  COMPILE_OPTIONS "-ffp-contract=off")

install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/xfer_moe.h DESTINATION include)

# libxfer_moe_cuda.so: the GPU kernels and the same-host (CUDA IPC) path,
# next to libxfer.so in the build directory. Built where nvcc exists (sm_90
# code plus PTX, the runtime linked statically); python/xfer/moe.py loads it
# with ctypes and says why when it is missing. Not under the sanitizers.
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER AND NOT XFER_SANITIZE)
  enable_language(CUDA)
  add_library(xfer_moe_cuda SHARED ${CMAKE_CURRENT_LIST_DIR}/cuda/moe_host.cu
    ${CMAKE_CURRENT_LIST_DIR}/cuda/moe_kernels.cu)
  set_target_properties(xfer_moe_cuda PROPERTIES CUDA_ARCHITECTURES 90 CUDA_RUNTIME_LIBRARY Static
    CUDA_STANDARD 17 CUDA_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
    LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  target_include_directories(xfer_moe_cuda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include
    ${CMAKE_CURRENT_LIST_DIR} ${CMAKE_CURRENT_LIST_DIR}/cuda)
  target_link_libraries(xfer_moe_cuda PRIVATE xfer ${CMAKE_DL_LIBS})
endif()
