# `cmake --install`: the public headers, libbexpress.so, the CMake package (find_package(bexpress)
# gives the imported target bexpress::bexpress), bexpress.pc, and the bx tool and the simnic
# (with its connection manager, libbx_simnic_cm.so) when they are built.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(BX_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/bexpress)

if(BX_BUILD_SIM)
  install(DIRECTORY include/bx DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(TARGETS bx_simnic bx_simnic_cm LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
else()
  install(DIRECTORY include/bx DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN simnic.h EXCLUDE)
endif()
if(BX_BUILD_TOOLS)
  install(TARGETS bx RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(TARGETS bexpress EXPORT bexpressTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT bexpressTargets NAMESPACE bexpress:: DESTINATION ${BX_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/bexpressConfig.cmake.in
  ${PROJECT_BINARY_DIR}/bexpressConfig.cmake INSTALL_DESTINATION ${BX_INSTALL_CMAKEDIR})
# 0.x: only the same minor version is compatible (the SONAME says the same).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/bexpressConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/bexpressConfig.cmake
  ${PROJECT_BINARY_DIR}/bexpressConfigVersion.cmake DESTINATION ${BX_INSTALL_CMAKEDIR})

# bexpress.pc finds the prefix from its own location, so `cmake --install --prefix` anywhere works.
file(RELATIVE_PATH BX_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${CMAKE_CURRENT_LIST_DIR}/bexpress.pc.in ${PROJECT_BINARY_DIR}/bexpress.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/bexpress.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Everything the rules above install, as one target: `make install` builds only this (the
# library, bx, the simnic, the Python module), not the test suites or the ns-3 tool.
add_custom_target(bx_installed)
foreach(target bexpress bx bx_simnic bx_simnic_cm _bexpress)
  if(TARGET ${target})
    add_dependencies(bx_installed ${target})
  endif()
endforeach()
