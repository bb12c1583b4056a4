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
