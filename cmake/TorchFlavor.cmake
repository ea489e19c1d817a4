# Which LibTorch this build uses, found once here, and what differs between the builds this
# project supports: Debian's LibTorch 1.13 (CPU, C++17, no fmt of its own) and a current
# LibTorch 2.x from the PyPI torch wheel (CUDA, C++20, its own fmt in its include folder).
# Code reads the outcome through libs/torch_support/torch_compat.h, never from CMake variables.
#
#   RAVNEST_TORCH_VERSION  the LibTorch version found (Torch_VERSION, e.g. 1.13.0 or 2.15.0)
#   RAVNEST_TORCH_CUDA     ON when this LibTorch has CUDA compiled in (libtorch_cuda)

# Finding LibTorch. TorchConfig.cmake looks for some of its own libraries (c10) with
# find_library(... PATHS <its lib folder>), which searches the system's folders first: with
# Debian's libtorch-dev installed, a build against the wheel would link Debian's libc10 1.13
# beside the wheel's libtorch. The lib folder of the TorchConfig.cmake that CMAKE_PREFIX_PATH or
# Torch_DIR names is searched first instead (CMAKE_LIBRARY_PATH comes before system folders).
set(_torch_configs)
foreach(_prefix ${CMAKE_PREFIX_PATH})
  list(APPEND _torch_configs ${_prefix}/Torch/TorchConfig.cmake ${_prefix}/TorchConfig.cmake)
endforeach()
if(Torch_DIR)
  list(PREPEND _torch_configs ${Torch_DIR}/TorchConfig.cmake)
endif()
foreach(_config ${_torch_configs})
  if(EXISTS ${_config})
    get_filename_component(_torch_dir ${_config} DIRECTORY)
    get_filename_component(_torch_root "${_torch_dir}/../../.." ABSOLUTE)
    if(EXISTS ${_torch_root}/lib)
      list(PREPEND CMAKE_LIBRARY_PATH ${_torch_root}/lib)
    endif()
    break()
  endif()
endforeach()
find_package(Torch REQUIRED)

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
get_target_property(_fmt_include fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
if(NOT _fmt_include)
  set(_fmt_include /usr/include)
endif()
list(GET _fmt_include 0 _fmt_include)
get_filename_component(_torch_include "${TORCH_INSTALL_PREFIX}/include" REALPATH)
get_filename_component(_fmt_include "${_fmt_include}" REALPATH)
# (Debian's LibTorch lives in /usr: its include folder is fmt's own, nothing to do.)
if(EXISTS "${_torch_include}/fmt" AND NOT _torch_include STREQUAL _fmt_include)
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

# The wheel's libtorch_cuda finds the CUDA libraries it was built with (NCCL, cuBLAS, cudart of
# the nvidia-* wheels) through its own RPATH; the CUDA toolkit of the machine has older ones of
# the same names, and the linker, searching the executable's -rpath folders first, took the
# toolkit's NCCL (undefined ncclCommGrow). The wheels' folders go first, at link and at run time.
if(TORCH_INSTALL_PREFIX MATCHES "site-packages/torch$")
  file(GLOB _nvidia_libs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  if(_nvidia_libs)
    list(JOIN _nvidia_libs ":" _nvidia_path)
    add_link_options("LINKER:-rpath,${_nvidia_path}" "LINKER:-rpath-link,${_nvidia_path}")
  endif()
endif()

# The wheel's libtorch exports its own copy of libstdc++'s std::filesystem (checked: 142
# symbols in 2.15's libtorch_cpu.so; 2.11's libtorch.so on the GPU machine). The dynamic linker
# binds a program's references in the order of its DT_NEEDED entries, and libstdc++.so.6 comes
# last, so std::filesystem::remove_all resolved to torch 2.11's copy, which jumped to address 0:
# every program that removed a folder crashed there (clusterize, the tests). libstdc++ is made
# the first needed library of every program, so its own definitions win. (Debian's LibTorch
# exports none: nothing to do for it.)
# A compiler that links libstdc++ statically (the GPU machine's /opt/gcc/bin/g++) gives no such
# order: the programs then took remove_all from libtorch whatever the flags, and crashed. It is
# refused here, naming the way out, rather than at the first folder a program removes.
if(TORCH_INSTALL_PREFIX MATCHES "site-packages/torch$")
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                  OUTPUT_VARIABLE _libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT IS_ABSOLUTE "${_libstdcxx}" OR NOT EXISTS "${_libstdcxx}")
    message(FATAL_ERROR "ravnest: ${CMAKE_CXX_COMPILER} has no shared libstdc++ (libstdc++.so); "
      "LibTorch ${Torch_VERSION} from a wheel exports its own std::filesystem, and programs linked "
      "with a static libstdc++ call it and crash. Configure with a compiler whose libstdc++ is "
      "shared, e.g. CXX=/usr/bin/g++ (docs/performance.md#gpu).")
  endif()
  add_link_options("LINKER:--push-state,--no-as-needed,-lstdc++,--pop-state")
endif()

# libs/torch_support/torch_compat.h reads these; every torch target links ravnest_torch_compat through
# ravnest_use_torch_pch.
add_library(ravnest_torch_compat INTERFACE)
target_include_directories(ravnest_torch_compat INTERFACE ${CMAKE_SOURCE_DIR})
if(RAVNEST_TORCH_CUDA)
  target_compile_definitions(ravnest_torch_compat INTERFACE RAVNEST_WITH_CUDA=1)
else()
  target_compile_definitions(ravnest_torch_compat INTERFACE RAVNEST_WITH_CUDA=0)
endif()
