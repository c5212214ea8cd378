# Helpers shared by every target: warnings, sanitizers, and one static library per layer.

set(RLX_WARNINGS -Wall -Wextra -Wpedantic)
if(RLX_WERROR)
  list(APPEND RLX_WARNINGS -Werror)
endif()

if(RLX_SANITIZE)
  # C++ only: nvcc (CUDA sources) takes none of these flags.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined;-fno-omit-frame-pointer;-fno-sanitize-recover=undefined>")
  add_link_options(-fsanitize=address,undefined)
endif()

# The kind of library each layer is (RLX_SHARED_LAYERS in the top CMakeLists.txt).
if(RLX_SHARED_LAYERS)
  set(RLX_LAYER_KIND SHARED)
else()
  set(RLX_LAYER_KIND STATIC)
endif()

# rlx_apply_flags(target): project warnings for our own code.
function(rlx_apply_flags target)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${RLX_WARNINGS}>")
endfunction()

# rlx_layer(name [GLUE] DEPS ... [SOURCES_GLOB patterns...]): library rlx_<name> (static,
# or shared under RLX_SHARED_LAYERS)
# built from src/<name>/*.cpp, with include/ and src/ on its include path. GLUE marks a
# layer without hot loops (IR, passes, parsers, model assembly, the server): -O2 instead
# of -O3 in optimized builds, which compiles it faster for the same program speed.
function(rlx_layer name)
  cmake_parse_arguments(L "GLUE" "" "DEPS;SOURCES_GLOB" ${ARGN})
  if(NOT L_SOURCES_GLOB)
    set(L_SOURCES_GLOB "src/${name}/*.cpp")
  endif()
  set(patterns)
  foreach(p IN LISTS L_SOURCES_GLOB)
    list(APPEND patterns "${CMAKE_SOURCE_DIR}/${p}")
  endforeach()
  file(GLOB sources CONFIGURE_DEPENDS ${patterns})
  if(NOT sources)  # a layer not written yet still links
    set(stub ${CMAKE_BINARY_DIR}/empty_${name}.cpp)
    file(WRITE ${stub} "// ${name}: no sources yet\n")
    set(sources ${stub})
  endif()
  add_library(rlx_${name} ${RLX_LAYER_KIND} ${sources})
  target_include_directories(rlx_${name} PUBLIC ${CMAKE_SOURCE_DIR}/include PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(rlx_${name} PUBLIC ${L_DEPS})
  rlx_apply_flags(rlx_${name})
  if(L_GLUE AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang"
     AND (CMAKE_BUILD_TYPE STREQUAL "Release" OR CMAKE_BUILD_TYPE STREQUAL "RelWithDebInfo"))
    target_compile_options(rlx_${name} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-O2>")
  endif()
endfunction()
