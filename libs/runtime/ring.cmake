# ravnest_ring: the ring all-reduce algorithm (ring_allreduce.h) over an abstract transport
# (ring_transport.h), and an in-process transport for tests and benchmarks (ring_local.h).
add_library(ravnest_ring STATIC
  ${CMAKE_CURRENT_LIST_DIR}/ring_allreduce.cpp
  ${CMAKE_CURRENT_LIST_DIR}/ring_local.cpp)
target_include_directories(ravnest_ring PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(ravnest_ring PUBLIC Threads::Threads)
ravnest_use_torch_pch(ravnest_ring)
