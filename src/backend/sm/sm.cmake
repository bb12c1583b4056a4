# xfer's own same-host backend, compiled into xfer_obj (headers named from src/).
set(XFER_SM_SOURCES sm_conn.c sm_keys.c sm_nic.c sm_rx.c sm_setup.c sm_tx.c sm_wire.c)
list(TRANSFORM XFER_SM_SOURCES PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
target_sources(xfer_obj PRIVATE ${XFER_SM_SOURCES})

