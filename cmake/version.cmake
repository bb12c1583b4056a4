# The version has one source: XFER_VERSION_MAJOR/MINOR/PATCH in
# include/xfer.h. Read before project() so that project(VERSION) uses it;
# python/xfer/_version.py must say the same (the wheel's version comes from
# there), or configuring stops here rather than shipping two versions.
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../include/xfer.h _xfer_defs
  REGEX "^#define XFER_VERSION_(MAJOR|MINOR|PATCH) [0-9]+$")
foreach(_part MAJOR MINOR PATCH)
  string(REGEX MATCH "XFER_VERSION_${_part} ([0-9]+)" _m "${_xfer_defs}")
  if(NOT _m)
    message(FATAL_ERROR "include/xfer.h lacks #define XFER_VERSION_${_part} N")
  endif()
  set(_xfer_${_part} ${CMAKE_MATCH_1})
endforeach()
set(XFER_VERSION "${_xfer_MAJOR}.${_xfer_MINOR}.${_xfer_PATCH}")

file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../python/xfer/_version.py _xfer_py
  REGEX "^__version__ = ")
if(NOT _xfer_py STREQUAL "__version__ = \"${XFER_VERSION}\"")
  message(FATAL_ERROR "python/xfer/_version.py says '${_xfer_py}', include/xfer.h says "
    "${XFER_VERSION}: make them agree")
endif()
