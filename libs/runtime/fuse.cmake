# ravnest_fuse: a trained cluster's stage files back into one state dict and one TorchScript
# model (fuse.h).
add_library(ravnest_fuse STATIC ${CMAKE_CURRENT_LIST_DIR}/fuse.cpp)
target_include_directories(ravnest_fuse PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(ravnest_fuse PUBLIC ravnest_config ravnest_graph)
ravnest_use_torch_pch(ravnest_fuse)
