# `cmake --install`: libloom.so with its SONAME, the public headers, the
# tools, the `loomrun` launcher, LoomConfig.cmake (find_package(Loom) ->
# Loom::loom) and loom.pc. Included after src/ and tools/ are defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# libloom.so.MAJOR -> libloom.so.MAJOR.MINOR (a 0.x ABI may change in any minor).
set_target_properties(loom PROPERTIES VERSION ${PROJECT_VERSION}
                                      SOVERSION ${PROJECT_VERSION_MAJOR})

# The in-tree interface (src/ headers, the generated list, the static core)
# serves the tools and tests only; installed users get include/ and the MPI.
function(loom_install_interface target)
  get_target_property(incs ${target} INTERFACE_INCLUDE_DIRECTORIES)
  set(wrapped "")
  foreach(dir IN LISTS incs)
    list(APPEND wrapped "$<BUILD_INTERFACE:${dir}>")
  endforeach()
  list(APPEND wrapped "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  set_property(TARGET ${target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${wrapped}")
  get_target_property(libs ${target} INTERFACE_LINK_LIBRARIES)
  set(wrapped "")
  foreach(lib IN LISTS libs)
    # Loom's own targets (no namespace) are inside libloom.so already.
    if(TARGET ${lib} AND NOT lib MATCHES "::")
      list(APPEND wrapped "$<BUILD_INTERFACE:${lib}>")
    else()
      list(APPEND wrapped "${lib}")
    endif()
  endforeach()
  set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${wrapped}")
endfunction()
loom_install_interface(loom)

# Installed tools find libloom.so in $prefix/lib ...
file(RELATIVE_PATH loom_bin_to_lib ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
get_property(loom_tool_targets DIRECTORY tools PROPERTY BUILDSYSTEM_TARGETS)
set(loom_tools "")
foreach(t IN LISTS loom_tool_targets)
  get_target_property(type ${t} TYPE)
  if(type STREQUAL "EXECUTABLE")
    list(APPEND loom_tools ${t})
    set_property(TARGET ${t} PROPERTY INSTALL_RPATH "$ORIGIN/${loom_bin_to_lib}")
  endif()
endforeach()
# ... and the libraries they and libloom.so link from outside the system's
# directories (the CUDA toolkit's cudart, an MPI installed apart).
set_property(TARGET loom ${loom_tools} PROPERTY INSTALL_RPATH_USE_LINK_PATH TRUE)

install(TARGETS loom EXPORT LoomTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/loom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${loom_tools} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(loom_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)
install(EXPORT LoomTargets NAMESPACE Loom:: DESTINATION ${loom_cmake_dir})
add_library(Loom::loom ALIAS loom)  # the same name in-tree (add_subdirectory users)

# What the config file and loomrun need to know about this build.
get_target_property(loom_soversion loom SOVERSION)
set(LOOM_PRELOAD_NAME ${CMAKE_SHARED_LIBRARY_PREFIX}loom${CMAKE_SHARED_LIBRARY_SUFFIX}.${loom_soversion})
set(LOOM_MPIEXEC "${MPIEXEC_EXECUTABLE}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/LoomConfig.cmake.in
  ${PROJECT_BINARY_DIR}/LoomConfig.cmake INSTALL_DESTINATION ${loom_cmake_dir}
  PATH_VARS CMAKE_INSTALL_BINDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/LoomConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/LoomConfig.cmake ${PROJECT_BINARY_DIR}/LoomConfigVersion.cmake
  DESTINATION ${loom_cmake_dir})

# loom.pc: `mpicc app.c $(pkg-config --cflags --libs loom)`.
file(RELATIVE_PATH LOOM_PC_PREFIX_REL ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" LOOM_PC_PREFIX_REL "${LOOM_PC_PREFIX_REL}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/loom.pc.in ${PROJECT_BINARY_DIR}/loom.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# loomrun: installed, it finds the library relative to itself; the build
# tree's (build/loomrun) preloads the build's library.
file(RELATIVE_PATH LOOMRUN_LIB_REL ${CMAKE_INSTALL_FULL_BINDIR}
     ${CMAKE_INSTALL_FULL_LIBDIR}/${LOOM_PRELOAD_NAME})
set(LOOMRUN_LIB "$here/${LOOMRUN_LIB_REL}")
configure_file(${PROJECT_SOURCE_DIR}/tools/loomrun.in ${PROJECT_BINARY_DIR}/install/loomrun @ONLY)
install(PROGRAMS ${PROJECT_BINARY_DIR}/install/loomrun DESTINATION ${CMAKE_INSTALL_BINDIR})
set(LOOMRUN_LIB "$<TARGET_SONAME_FILE:loom>")
configure_file(${PROJECT_SOURCE_DIR}/tools/loomrun.in ${PROJECT_BINARY_DIR}/loomrun.tmpl @ONLY)
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/loomrun INPUT ${PROJECT_BINARY_DIR}/loomrun.tmpl
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                      WORLD_READ WORLD_EXECUTE)
