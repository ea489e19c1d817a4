# One precompiled header for every target that includes LibTorch: a file with torch/script.h
# takes 1-2 minutes to compile cold, the PCH is built once and reused (REUSE_FROM needs equal
# compile flags, so every torch target links ravnest_torch_pch the same way).
add_library(ravnest_torch_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/torch_pch.cpp)
target_link_libraries(ravnest_torch_pch PUBLIC ${TORCH_LIBRARIES})
target_precompile_headers(ravnest_torch_pch PRIVATE ${CMAKE_CURRENT_LIST_DIR}/torch_pch.h)
set_target_properties(ravnest_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)

function(ravnest_use_torch_pch target)
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  target_precompile_headers(${target} REUSE_FROM ravnest_torch_pch)
endfunction()
