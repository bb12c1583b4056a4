# Install rules. Every destination is relative (GNUInstallDirs), so
# `cmake --install build --prefix P` with DESTDIR puts everything under
# $DESTDIR/P, whatever prefix the build was configured with; the CMake
# package and the .pc file find their prefix from where they are installed.

# An installed program finds libxfer through a RUNPATH relative to itself
# ($ORIGIN/../lib, or ../lib/<multiarch> where the libdir is such), so that
# a prefix outside the loader's search path needs no LD_LIBRARY_PATH.
# Distribution packages, which install into /usr, turn XFER_INSTALL_RPATH off.
function(xfer_install_programs)
  if(XFER_INSTALL_RPATH)
    file(RELATIVE_PATH _rel ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
    set_target_properties(${ARGN} PROPERTIES INSTALL_RPATH "$ORIGIN/${_rel}")
  endif()
  install(TARGETS ${ARGN} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()

function(xfer_install_library)
  if(SKBUILD)
    # The Python wheel (pyproject.toml, scikit-build-core installs only this
    # component): one regular file named by its SONAME inside the package,
    # where xfer/_lib.py looks first. A wheel cannot hold symlinks, so the
    # versioned name and the namelink are not copied.
    install(FILES $<TARGET_FILE:xfer> DESTINATION xfer/lib RENAME libxfer.so.0 COMPONENT python)
    return()
  endif()
  install(TARGETS xfer xfer_static EXPORT xferTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(FILES ${PROJECT_SOURCE_DIR}/include/xfer.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  # The reference pages xfer(7) points to, next to the licence.
  set(_docs LICENSE README.md docs/api.md docs/config.md docs/design.md
    docs/failure-semantics.md docs/kv.md docs/python.md)
  list(TRANSFORM _docs PREPEND ${PROJECT_SOURCE_DIR}/)
  install(FILES ${_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR})

  # CMake: find_package(xfer) -> xfer::xfer, xfer::xfer_static.
  install(EXPORT xferTargets NAMESPACE xfer:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xfer)
  include(CMakePackageConfigHelpers)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/xferConfig.cmake.in
    ${PROJECT_BINARY_DIR}/xferConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xfer)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/xferConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/xferConfig.cmake ${PROJECT_BINARY_DIR}/xferConfigVersion.cmake
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/xfer)

  # pkg-config: prefix=${pcfiledir}/<up to the prefix>, so the installed
  # tree can be moved or unpacked under DESTDIR and still be right. An
  # absolute libdir or includedir cannot be relative: then the .pc file
  # names it as it is.
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
    set(XFER_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  else()
    file(RELATIVE_PATH _up ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
    string(REGEX REPLACE "/$" "" _up "${_up}")
    set(XFER_PC_PREFIX "\${pcfiledir}/${_up}")
  endif()
  set(XFER_PC_REQUIRES "libfabric")
  if(HWLOC_FOUND)
    set(XFER_PC_REQUIRES "libfabric hwloc")
  endif()
  set(XFER_PC_LIBS_PRIVATE "-lpthread")
  if(CMAKE_DL_LIBS)
    string(APPEND XFER_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/xfer.pc.in ${PROJECT_BINARY_DIR}/xfer.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/xfer.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
