# dax_add_header_check(<target> <link target> <extension> <header>...): an object library that
# compiles each header alone (twice, so include guards are checked too), from a generated source
# file with the given extension (cpp for g++, cu for nvcc).
# An umbrella header (nothing but #include lines, #pragma once and #if around includes, e.g.
# dax/dax.hpp) is left out: it is self-contained when every header it includes is, which this
# check proves one by one, and the programs that include it whole (the precompiled header, every
# example) compile it anyway. Those checks parsed most of dax each (7-12 s apiece).
function(dax_add_header_check target link ext)
  set(sources)
  foreach(header IN LISTS ARGN)
    # What is left of the header without its line comments and those directives must be nothing.
    # (file(READ), not file(STRINGS): a list of lines breaks at a '[' in a comment.)
    file(READ ${PROJECT_SOURCE_DIR}/include/${header} text)
    string(REGEX REPLACE "//[^\n]*" "" text "${text}")
    string(REGEX REPLACE "(^|\n)[ \t]*#[ \t]*(pragma once|include|if|ifdef|ifndef|elif|else|endif)[^\n]*" "\n" text "${text}")
    string(STRIP "${text}" text)
    if(text STREQUAL "")
      continue()
    endif()
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
