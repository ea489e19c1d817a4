# What differs between the LibTorch builds this project supports, decided once after
# find_package(Torch): Debian's LibTorch 1.13 (CPU, C++17, no fmt of its own) and a current
# LibTorch 2.x from the PyPI torch wheel (CUDA, C++20, its own fmt in its include folder).
# Code reads the outcome through libs/compat/torch_compat.h, never from CMake variables.
#
#   RAVNEST_TORCH_VERSION  the LibTorch version found (Torch_VERSION, e.g. 1.13.0 or 2.15.0)
#   RAVNEST_TORCH_CUDA     ON when this LibTorch has CUDA compiled in (libtorch_cuda)

set(RAVNEST_TORCH_VERSION "${Torch_VERSION}")
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(RAVNEST_TORCH_CUDA ON)
else()
  set(RAVNEST_TORCH_CUDA OFF)
endif()
message(STATUS "ravnest: LibTorch ${RAVNEST_TORCH_VERSION}, CUDA ${RAVNEST_TORCH_CUDA} "
               "(${TORCH_INSTALL_PREFIX})")

# Debian's spdlog 1.10 is built against Debian's fmt 9 and includes <fmt/...>. LibTorch 2.x puts
# a newer fmt under its own include folder, which reaches the compiler as -isystem and so wins
# over /usr/include: spdlog then fails to compile ('basic_runtime' is not a member of 'fmt').
# A folder of links to the fmt (and spdlog) headers spdlog was built with, given with -I (searched
# before every -isystem folder), restores the pair that belongs together. LibTorch's own headers
# that this project includes do not use fmt, so they are unaffected.
if(EXISTS "${TORCH_INSTALL_PREFIX}/include/fmt")
  get_target_property(_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT _fmt_include)
    set(_fmt_include /usr/include)
  endif()
  list(GET _fmt_include 0 _fmt_include)
  set(_shim ${CMAKE_BINARY_DIR}/spdlog-fmt-shim)
  file(MAKE_DIRECTORY ${_shim})
  foreach(_dir fmt spdlog)
    if(NOT EXISTS ${_shim}/${_dir} AND EXISTS ${_fmt_include}/${_dir})
      file(CREATE_LINK ${_fmt_include}/${_dir} ${_shim}/${_dir} SYMBOLIC)
    endif()
  endforeach()
  include_directories(BEFORE ${_shim})
  message(STATUS "ravnest: LibTorch ships its own fmt; spdlog compiles against ${_fmt_include}/fmt")
endif()

# libs/compat/torch_compat.h reads these; every torch target links ravnest_torch_compat through
# ravnest_use_torch_pch.
add_library(ravnest_torch_compat INTERFACE)
target_include_directories(ravnest_torch_compat INTERFACE ${CMAKE_SOURCE_DIR})
if(RAVNEST_TORCH_CUDA)
  target_compile_definitions(ravnest_torch_compat INTERFACE RAVNEST_WITH_CUDA=1)
else()
  target_compile_definitions(ravnest_torch_compat INTERFACE RAVNEST_WITH_CUDA=0)
endif()
