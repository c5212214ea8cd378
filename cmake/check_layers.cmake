cmake_minimum_required(VERSION 3.25)
# Fails the build when a file includes a header from a layer above its own.
# Layer order and allowed includes follow DESIGN.md: arrows point one way.
set(allowed_base     "base")
set(allowed_ir       "base;ir")
set(allowed_formats  "base;formats")
set(allowed_compile  "base;ir;compile")
set(allowed_runtime  "base;ir;compile;runtime")
set(allowed_backends "base;ir;compile;runtime;backends;formats")  # formats: block codecs for packed matmuls
set(allowed_models   "base;ir;compile;runtime;backends;formats;models")
set(allowed_serve    "base;ir;compile;runtime;backends;formats;models;serve")

set(violations "")
foreach(layer base ir formats compile runtime backends models serve)
  file(GLOB_RECURSE files "${ROOT}/src/${layer}/*.h" "${ROOT}/src/${layer}/*.cpp" "${ROOT}/src/${layer}/*.cu"
                          "${ROOT}/src/${layer}/*.cuh" "${ROOT}/include/rlx/${layer}/*.h")
  foreach(f IN LISTS files)
    file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"rlx/[a-z_]+/")
    foreach(line IN LISTS lines)
      string(REGEX MATCH "rlx/([a-z_]+)/" _ "${line}")
      set(target_layer "${CMAKE_MATCH_1}")
      if(NOT target_layer IN_LIST allowed_${layer})
        file(RELATIVE_PATH rel "${ROOT}" "${f}")
        string(APPEND violations "  ${rel}: layer '${layer}' includes 'rlx/${target_layer}/' (allowed: ${allowed_${layer}})\n")
      endif()
    endforeach()
  endforeach()
endforeach()
# CPU kernels are plain functions: they may use base/ only (and the quantized block
# layouts of formats/, which the packed matmul kernels read).
file(GLOB_RECURSE kernel_files "${ROOT}/src/backends/cpu/kernels/*")
foreach(f IN LISTS kernel_files)
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"(rlx/(ir|compile|runtime|models)|ir/|compile/|runtime/|formats/|models/)")
  if(lines)
    file(RELATIVE_PATH rel "${ROOT}" "${f}")
    string(APPEND violations "  ${rel}: CPU kernels may include base/ and formats/ only: ${lines}\n")
  endif()
endforeach()

# Tokenizers (src/models/tokenizer) may use base/ and formats/ only.
file(GLOB_RECURSE tok_files "${ROOT}/src/models/tokenizer/*" "${ROOT}/include/rlx/models/tokenizer*.h")
foreach(f IN LISTS tok_files)
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"rlx/(ir|compile|runtime|backends)/")
  if(lines)
    file(RELATIVE_PATH rel "${ROOT}" "${f}")
    string(APPEND violations "  ${rel}: tokenizers may include base/ and formats/ only: ${lines}\n")
  endif()
endforeach()

# The Jinja renderer (src/models/jinja, rlx/models/jinja.h) may use base/ only: every
# quoted include is rlx/base/, rlx/models/jinja.h or one of its own headers.
file(GLOB_RECURSE jinja_files "${ROOT}/src/models/jinja/*" "${ROOT}/include/rlx/models/jinja.h")
foreach(f IN LISTS jinja_files)
  file(STRINGS "${f}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "\"(rlx/base/|rlx/models/jinja\\.h\"|models/jinja/)")
      file(RELATIVE_PATH rel "${ROOT}" "${f}")
      string(APPEND violations "  ${rel}: the Jinja renderer may include base/ only: ${line}\n")
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "Layer dependency violations (see DESIGN.md):\n${violations}")
endif()
