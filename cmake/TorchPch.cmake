# One precompiled header for every target that includes LibTorch: a file with torch/script.h
# takes 1-2 minutes to compile cold, the PCH is built once and reused (REUSE_FROM needs equal
# compile flags, so every torch target links ravnest_torch_pch the same way).
add_library(ravnest_torch_pch OBJECT ${CMAKE_CURRENT_LIST_DIR}/torch_pch.cpp)
target_link_libraries(ravnest_torch_pch PUBLIC ${TORCH_LIBRARIES} ravnest_torch_compat)
target_precompile_headers(ravnest_torch_pch PRIVATE ${CMAKE_CURRENT_LIST_DIR}/torch_pch.h)
set_target_properties(ravnest_torch_pch PROPERTIES POSITION_INDEPENDENT_CODE OFF)

# ravnest_use_torch_pch(target [TORCH_FREE file...]): the target's sources that include no torch
# header compile without the PCH: loading its ~400 MB costs a few seconds per file, more than
# such a file takes to compile.
function(ravnest_use_torch_pch target)
  cmake_parse_arguments(P "" "" "TORCH_FREE" ${ARGN})
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES} ravnest_torch_compat)
  target_precompile_headers(${target} REUSE_FROM ravnest_torch_pch)
  if(P_TORCH_FREE)
    set_source_files_properties(${P_TORCH_FREE} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()
