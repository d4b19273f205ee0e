# dax_add_header_check(<target> <link target> <extension> <header>...): an object library that
# compiles each header alone (twice, so include guards are checked too), from a generated source
# file with the given extension (cpp for g++, cu for nvcc).
# An umbrella header (nothing but #include lines, #pragma once and #if around includes, e.g.
# dax/dax.hpp) is left out: it is self-contained when every header it includes is, which this
# check proves one by one, and the programs that include it whole (the precompiled header, every
# example) compile it anyway. Those checks parsed most of dax each (7-12 s apiece).
#
# Headers high in dax are checked with what they include anyway precompiled (the tiers below).

# The chain of precompiled tiers: tier k is the first k of these headers. A header is checked with
# the highest tier whose headers it includes itself, directly or through other dax headers
# (unconditional #include lines only), and never with a tier that holds the header itself.
# Precompiling what the header's own translation unit reads anyway hides nothing from the check:
# the header's body sees the same declarations either way, and every header the tier holds is
# checked alone in its own unit. Measured (docs/building.md): Eigen and the standard headers it
# brings were 2.4 s of each check that reaches them, dist_array.hpp and what it includes 4.5 s.
set(DAX_HEADER_CHECK_TIERS Eigen/Core dax/array/dist_array.hpp)

# _dax_headers_reaching(<out> <anchor>): the headers under include/ that include <anchor> by
# unconditional #include lines, directly or through other dax headers, less those that <anchor>
# itself includes that way (dist_array.hpp includes reshard.hpp at its end, which includes it).
function(_dax_headers_reaching out anchor)
  get_property(all GLOBAL PROPERTY _dax_header_list)
  if(NOT all)  # each header's unconditional includes, read once per configure
    file(GLOB_RECURSE all RELATIVE ${PROJECT_SOURCE_DIR}/include
      ${PROJECT_SOURCE_DIR}/include/dax/*.hpp ${PROJECT_SOURCE_DIR}/include/dax/*.cuh)
    foreach(header IN LISTS all)
      file(STRINGS ${PROJECT_SOURCE_DIR}/include/${header} lines
        REGEX "^[ \t]*#[ \t]*(if|endif|include[ \t]*<(dax|Eigen)/)")
      set(deps)
      set(depth 0)
      foreach(line IN LISTS lines)
        if(line MATCHES "^[ \t]*#[ \t]*if")
          math(EXPR depth "${depth} + 1")
        elseif(line MATCHES "^[ \t]*#[ \t]*endif")
          math(EXPR depth "${depth} - 1")
        elseif(depth EQUAL 0 AND line MATCHES "<([^>]*)>")
          list(APPEND deps ${CMAKE_MATCH_1})
        endif()
      endforeach()
      set_property(GLOBAL PROPERTY _dax_header_deps_${header} ${deps})
    endforeach()
    set_property(GLOBAL PROPERTY _dax_header_list ${all})
  endif()
  set(below)  # what the anchor includes
  set(queue ${anchor})
  while(queue)
    list(POP_FRONT queue next)
    get_property(deps GLOBAL PROPERTY _dax_header_deps_${next})
    foreach(dep IN LISTS deps)
      if(NOT dep IN_LIST below)
        list(APPEND below ${dep})
        list(APPEND queue ${dep})
      endif()
    endforeach()
  endwhile()
  set(reached)
  set(grew TRUE)
  while(grew)
    set(grew FALSE)
    foreach(header IN LISTS all)
      if(header IN_LIST reached OR header IN_LIST below OR header STREQUAL anchor)
        continue()
      endif()
      get_property(deps GLOBAL PROPERTY _dax_header_deps_${header})
      foreach(dep IN LISTS deps)
        if(dep STREQUAL anchor OR dep IN_LIST reached)
          list(APPEND reached ${header})
          set(grew TRUE)
          break()
        endif()
      endforeach()
    endforeach()
  endwhile()
  set(${out} ${reached} PARENT_SCOPE)
endfunction()

function(dax_add_header_check target link ext)
  set(tiered FALSE)
  if(ext STREQUAL "cpp" AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    set(tiered TRUE)
  endif()
  list(LENGTH DAX_HEADER_CHECK_TIERS tier_count)
  foreach(k RANGE ${tier_count})
    set(sources_${k})
  endforeach()
  if(tiered)
    set(k 0)
    foreach(anchor IN LISTS DAX_HEADER_CHECK_TIERS)
      math(EXPR k "${k} + 1")
      _dax_headers_reaching(reaching_${k} ${anchor})
    endforeach()
  endif()
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
    set(tier 0)  # the highest tier all of whose headers this one reaches
    if(tiered)
      foreach(k RANGE 1 ${tier_count})
        if(NOT header IN_LIST reaching_${k})
          break()
        endif()
        set(tier ${k})
      endforeach()
    endif()
    list(APPEND sources_${tier} ${src})
  endforeach()
  # Tier 0, the headers low in dax, from nothing: where a missing standard include shows.
  set(targets ${target})
  add_library(${target} OBJECT ${sources_0})
  target_link_libraries(${target} PRIVATE ${link})
  set(precompiled)
  foreach(k RANGE 1 ${tier_count})
    math(EXPR i "${k} - 1")
    list(GET DAX_HEADER_CHECK_TIERS ${i} anchor)
    list(APPEND precompiled <${anchor}>)
    if(sources_${k})
      add_library(${target}_tier${k} OBJECT ${sources_${k}})
      target_link_libraries(${target}_tier${k} PRIVATE ${link})
      target_precompile_headers(${target}_tier${k} PRIVATE ${precompiled})
      list(APPEND targets ${target}_tier${k})
    endif()
  endforeach()
  # A header alone generates almost no code: reading it is the check, so g++ and clang only parse
  # and instantiate (-fsyntax-only, through cmake/syntax_only.sh, which leaves the empty object the
  # build expects): a fifth less than -O0, which was a tenth less than -O3. The programs built at
  # -O3 still see the same headers.
  if(tiered)
    foreach(t IN LISTS targets)
      target_compile_options(${t} PRIVATE -O0)
      set_target_properties(${t} PROPERTIES CXX_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh)
    endforeach()
  elseif(ext STREQUAL "cu" AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA")
    # nvcc: the CUDA front end and the device compile, not the host compiler's pass (syntax_only.sh).
    set_target_properties(${target} PROPERTIES CUDA_COMPILER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/syntax_only.sh)
  endif()
endfunction()
