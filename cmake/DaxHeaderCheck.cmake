# dax_add_header_check(<target> <link target> <extension> <header>...): an object library that
# compiles each header alone (twice, so include guards are checked too), from a generated source
# file with the given extension (cpp for g++, cu for nvcc).
function(dax_add_header_check target link ext)
  set(sources)
  foreach(header IN LISTS ARGN)
    string(MAKE_C_IDENTIFIER ${header} id)
    set(src ${CMAKE_CURRENT_BINARY_DIR}/self_contained/${id}.${ext})
    file(GENERATE OUTPUT ${src} CONTENT "#include <${header}>\n#include <${header}>\n")
    list(APPEND sources ${src})
  endforeach()
  add_library(${target} OBJECT ${sources})
  target_link_libraries(${target} PRIVATE ${link})
  # A header alone generates almost no code: reading it is the check, so g++ and clang only parse
  # and instantiate (-fsyntax-only, through cmake/syntax_only.sh, which leaves the empty object the
  # build expects): a fifth less than -O0, which was a tenth less than -O3. The programs built at
  # -O3 still see the same headers.
  if(ext STREQUAL "cpp" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -O0)
    set_target_properties(${target} PROPERTIES CXX_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh)
  elseif(ext STREQUAL "cu" AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA")
    # nvcc: the CUDA front end and the device compile, not the host compiler's pass (syntax_only.sh).
    set_target_properties(${target} PROPERTIES CUDA_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh)
  endif()
endfunction()
