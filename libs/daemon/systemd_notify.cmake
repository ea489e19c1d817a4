# ravnest_systemd: sd_notify for the daemon (Type=notify), from libsystemd through pkg-config.
# A library of its own so that only ravnestd links libsystemd.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
add_library(ravnest_systemd STATIC ${CMAKE_CURRENT_LIST_DIR}/systemd_notify.cpp)
target_include_directories(ravnest_systemd PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(ravnest_systemd PRIVATE PkgConfig::SYSTEMD)
