# The raw libibverbs RC backend (src/backend/ibv), compiled into xfer_obj.
# It needs rdma-core's headers (Debian: libibverbs-dev) to build and nothing
# to run: libibverbs is loaded with dlopen where it is installed. Without the
# headers ibv_none.c stands in: "ibverbs" finds no provider and "auto" uses
# libfabric. The wire format and the handshake state machine build always
# (the fuzzers and tests/test_ibv_link.c drive them without a device).
option(XFER_WITH_IBVERBS "Build the raw libibverbs backend when its headers exist" ON)
find_path(IBVERBS_INCLUDE_DIR infiniband/verbs.h)
set(XFER_IBV_SOURCES ibv_wire.c ibv_link.c)
if(XFER_WITH_IBVERBS AND IBVERBS_INCLUDE_DIR)
  set(XFER_HAVE_IBVERBS ON)
  list(APPEND XFER_IBV_SOURCES ibv_loader.c ibv_open.c ibv_conn.c ibv_post.c ibv_poll.c ibv_mr.c
    ibv_errno.c)
  target_include_directories(xfer_obj PRIVATE ${IBVERBS_INCLUDE_DIR})
  target_compile_definitions(xfer_obj PRIVATE XFER_HAVE_IBVERBS)
  message(STATUS "raw ibverbs backend: built (headers in ${IBVERBS_INCLUDE_DIR})")
else()
  list(APPEND XFER_IBV_SOURCES ibv_none.c)
  message(STATUS "raw ibverbs backend: not built (no infiniband/verbs.h)")
endif()
list(TRANSFORM XFER_IBV_SOURCES PREPEND ${CMAKE_CURRENT_LIST_DIR}/)
target_sources(xfer_obj PRIVATE ${XFER_IBV_SOURCES})
