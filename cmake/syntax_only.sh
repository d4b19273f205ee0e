#!/bin/sh
# The per-header check's compiler launcher (cmake/DaxHeaderCheck.cmake): runs the compile command it
# is given with -fsyntax-only instead of -c (parse and instantiate, no code: a fifth less time than
# -O0 for a header alone; clang 20 warns of -c beside -fsyntax-only), then leaves the empty object
# file the build expects. The depfile is still written.
out=""
prev=""
for arg in "$@"; do
  shift
  [ "$prev" = "-o" ] && out=$arg
  prev=$arg
  [ "$arg" = "-c" ] || set -- "$@" "$arg"
done
"$@" -fsyntax-only || exit $?
if [ -n "$out" ]; then
  : >"$out"
fi
exit 0
