#!/bin/sh
# The per-header check's compiler launcher (cmake/DaxHeaderCheck.cmake): runs the compile command it
# is given without generating the code a header alone does not need, then leaves the empty object
# file the build expects (the depfile is still written).
# - g++ / clang: -fsyntax-only instead of -c (parse and instantiate, no code: a fifth less time than
#   -O0 for a header alone; clang 20 warns of -c beside -fsyntax-only).
# - nvcc: -cuda instead of -c: the whole CUDA front end (cudafe++ on host and device code) and the
#   device compile (cicc, ptxas), without the host compiler's pass over cudafe++'s output, which the
#   CUDA programs that include every header do anyway: 17 s a header instead of 23.
# - a precompiled header (cmake/DaxHeaderCheck.cmake precompiles <Eigen/Core>): compiled as given.
case "$1" in
  *nvcc*) mode=nvcc ;;
  *) mode=gnu ;;
esac
prev=""
for arg in "$@"; do
  if [ "$prev" = "-o" ]; then
    case "$arg" in *.gch | *.pch) exec "$@" ;; esac
  fi
  prev=$arg
done
out=""
prev=""
for arg in "$@"; do
  shift
  if [ "$prev" = "-o" ]; then
    out=$arg
    [ "$mode" = nvcc ] && arg=/dev/null
  fi
  prev=$arg
  if [ "$arg" = "-c" ]; then
    [ "$mode" = nvcc ] && set -- "$@" -cuda
  else
    set -- "$@" "$arg"
  fi
done
if [ "$mode" = nvcc ]; then
  "$@" || exit $?
else
  "$@" -fsyntax-only || exit $?
fi
if [ -n "$out" ]; then
  : >"$out"
fi
exit 0
