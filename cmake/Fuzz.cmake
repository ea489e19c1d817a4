# Compiler flags of the fuzz build (RAVNEST_FUZZ=ON): libFuzzer's coverage instrumentation
# (fuzzer-no-link; the fuzz targets add `fuzzer` itself, which brings libFuzzer's main),
# AddressSanitizer and UndefinedBehaviorSanitizer, every UB report fatal so that the fuzzer stops
# on it. Debian's clang 14 with libclang-rt-14-dev provides all three.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "RAVNEST_FUZZ needs clang (libFuzzer): configure with "
                      "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang, as scripts/fuzz does")
endif()
set(RAVNEST_SANITIZERS address,undefined)
add_compile_options(-fsanitize=fuzzer-no-link,${RAVNEST_SANITIZERS}
                    -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
add_link_options(-fsanitize=${RAVNEST_SANITIZERS})
