# ravnest_runtime: the daemon (node service, stage worker, schedules, storage) and the requester.
add_library(ravnest_runtime STATIC
  ${CMAKE_CURRENT_LIST_DIR}/node_store.cpp
  ${CMAKE_CURRENT_LIST_DIR}/job_setup.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stage_worker.cpp
  ${CMAKE_CURRENT_LIST_DIR}/node_service.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ring_mailbox.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ring_link.cpp
  ${CMAKE_CURRENT_LIST_DIR}/daemon.cpp
  ${CMAKE_CURRENT_LIST_DIR}/requester.cpp
  ${CMAKE_CURRENT_LIST_DIR}/progress_view.cpp
  ${CMAKE_CURRENT_LIST_DIR}/local_daemons.cpp
  ${CMAKE_CURRENT_LIST_DIR}/allreduce_bench.cpp
)
target_include_directories(ravnest_runtime PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(ravnest_runtime PUBLIC ravnest_ring ravnest_training ravnest_fuse ravnest_wire ravnest_data
  ravnest_config ravnest_systemd spdlog::spdlog Threads::Threads)
ravnest_use_torch_pch(ravnest_runtime)
