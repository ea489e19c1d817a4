# ravnest_training: losses, optimizers, LR schedules, evaluation and the single-process
# reference trainer (training.cmake is included by libs/runtime/CMakeLists.txt).
add_library(ravnest_training STATIC
  ${CMAKE_CURRENT_LIST_DIR}/loss.cpp
  ${CMAKE_CURRENT_LIST_DIR}/optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/lr_schedule.cpp
  ${CMAKE_CURRENT_LIST_DIR}/evaluate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/reference_trainer.cpp)
target_include_directories(ravnest_training PUBLIC ${CMAKE_SOURCE_DIR})
target_link_libraries(ravnest_training PUBLIC ravnest_data ravnest_config)
ravnest_use_torch_pch(ravnest_training)
