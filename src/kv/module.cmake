# The KV-cache transfer module (include/xfer_kv.h): built into libxfer from
# the same object library, plus its demo and benchmark programs.
target_sources(xfer_obj PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/kv_layout.c ${CMAKE_CURRENT_LIST_DIR}/kv_wire.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_inbox.c ${CMAKE_CURRENT_LIST_DIR}/kv_core.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_send.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_peers.c ${CMAKE_CURRENT_LIST_DIR}/kv_stack.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_decoder.c ${CMAKE_CURRENT_LIST_DIR}/kv_dec_ctl.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_dec_lease.c ${CMAKE_CURRENT_LIST_DIR}/kv_prefiller.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_pf_ctl.c ${CMAKE_CURRENT_LIST_DIR}/kv_pf_jobs.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_pf_req.c ${CMAKE_CURRENT_LIST_DIR}/kv_pf_submit.c)

install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/xfer_kv.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Demo and benchmark (examples/pd_*.c): two processes, prefill and decode.
# The model stand-in is compiled for speed: it is the "compute" being timed.
add_library(pd_common STATIC ${CMAKE_CURRENT_SOURCE_DIR}/examples/pd_ctl.c
  ${CMAKE_CURRENT_SOURCE_DIR}/examples/pd_model.c)
target_include_directories(pd_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/examples
  ${CMAKE_CURRENT_SOURCE_DIR}/include)
set_source_files_properties(${CMAKE_CURRENT_SOURCE_DIR}/examples/pd_model.c PROPERTIES
  COMPILE_OPTIONS "-O3;-ffast-math")
target_link_libraries(pd_common PUBLIC m)
foreach(prog pd_demo pd_bench)
  string(REPLACE "_" "-" exe ${prog})
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/examples/${prog}.c)
    add_executable(${exe} ${CMAKE_CURRENT_SOURCE_DIR}/examples/${prog}.c)
    target_link_libraries(${exe} PRIVATE pd_common xfer)
    set_target_properties(${exe} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  endif()
endforeach()
