# The KV-cache transfer module (include/xfer_kv.h): built into libxfer from
# the same object library, plus its demo and benchmark programs.
target_sources(xfer_obj PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/kv_layout.c ${CMAKE_CURRENT_LIST_DIR}/kv_wire.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_core.c ${CMAKE_CURRENT_LIST_DIR}/kv_send.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_peers.c ${CMAKE_CURRENT_LIST_DIR}/kv_stack.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_decoder.c ${CMAKE_CURRENT_LIST_DIR}/kv_dec_ctl.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_dec_lease.c ${CMAKE_CURRENT_LIST_DIR}/kv_prefiller.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_pf_ctl.c ${CMAKE_CURRENT_LIST_DIR}/kv_pf_jobs.c
  ${CMAKE_CURRENT_LIST_DIR}/kv_pf_req.c ${CMAKE_CURRENT_LIST_DIR}/kv_pf_submit.c)

install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/include/xfer_kv.h DESTINATION include)
