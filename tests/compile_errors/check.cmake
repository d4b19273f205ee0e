# Compiles SOURCE (-fsyntax-only) with COMPILER and FLAGS (a ;-list), which must fail with exactly
# ERRORS errors, each of them a static assertion whose message contains MATCH.
execute_process(COMMAND ${COMPILER} ${FLAGS} -fsyntax-only ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled; it must not")
endif()
string(REGEX MATCHALL "error: [^\n]*" errors "${out}")
list(LENGTH errors count)
set(bad "")
foreach(e IN LISTS errors)
  if(NOT e MATCHES "static assertion failed: .*${MATCH}")
    string(APPEND bad "\n  ${e}")
  endif()
endforeach()
if(NOT count EQUAL ERRORS OR bad)
  message(FATAL_ERROR "expected ${ERRORS} error(s), each a static assertion naming ${MATCH}; got ${count}:${bad}\n${out}")
endif()
message(STATUS "${count} error(s), each naming ${MATCH}")
