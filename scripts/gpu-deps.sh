#!/usr/bin/env bash
# Brings what dax's GPU phases need beyond the CUDA image (Open MPI, Catch2, Eigen, ninja) to a
# bare GPU machine that has no package registry, as Debian packages unpacked under /tmp.
#
#   scripts/gpu-deps.sh pack      here, on a Debian/Ubuntu x86-64 machine with a registry, in any
#                                 directory of the checkout: downloads the packages into .devdeps/
#                                 at the repository's root (git ignores it) with env.sh beside them
#                                 and a MANIFEST of what was taken;
#   scripts/gpu-deps.sh unpack [PREFIX]
#                                 there: unpacks .devdeps/*.deb into PREFIX (default /tmp/dax-deps)
#                                 once; nothing is written outside it.
#   source .devdeps/env.sh        there, first in every command: unpacks if needed and points PATH,
#                                 LD_LIBRARY_PATH, CMake and Open MPI at the prefix.
#
# docs/gpu.md gives the device-tool calls (carry [".devdeps"]). Only libraries the CUDA image may
# lack are taken: never libc, libstdc++ or anything the loader itself needs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPS=$ROOT/.devdeps

# Open MPI and what its libraries load, Catch2 v2, Eigen, ninja. The list was checked by
# unpacking it into an empty prefix and building and running a 2-rank MPI program from there.
PACKAGES="openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libhwloc15 libhwloc-plugins
 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1
 ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libmunge2
 libnuma1 libltdl7 libpciaccess0 libxnvctrl0 libjansson4 libgfortran5 catch2 libeigen3-dev ninja-build"

pack() {
  command -v apt-get >/dev/null || { echo "gpu-deps pack: needs apt-get (Debian or Ubuntu)" >&2; exit 1; }
  local arch
  arch=$(dpkg --print-architecture)
  if [ "$arch" != amd64 ]; then
    echo "gpu-deps pack: this machine is $arch; the GPU machine is x86-64 (amd64): pack on an amd64 machine" >&2
    exit 1
  fi
  # Lists once, if this machine has none yet.
  [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ] || apt-get update -qq
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  # shellcheck disable=SC2086
  (cd "$DEPS" && apt-get download $PACKAGES >"$DEPS/download.log" 2>&1) || {
    echo "gpu-deps pack: apt-get download failed:" >&2
    tail -n 5 "$DEPS/download.log" >&2
    exit 1
  }
  rm -f "$DEPS/download.log"
  {
    # shellcheck disable=SC1091
    echo "# packed $(date -u '+%Y-%m-%d %H:%M UTC') on $(. /etc/os-release && echo "$PRETTY_NAME") ($arch)"
    # shellcheck disable=SC2016 # dpkg's own ${field} syntax
    for f in "$DEPS"/*.deb; do dpkg-deb -W --showformat='${Package} ${Version}\n' "$f"; done
  } >"$DEPS/MANIFEST"
  write_env >"$DEPS/env.sh"
  echo "gpu-deps: packed $(find "$DEPS" -name '*.deb' | wc -l) packages into .devdeps ($(du -sh "$DEPS" | cut -f1));"
  echo "          carry [\".devdeps\"] and start the device command with: source .devdeps/env.sh;"
}

unpack() {
  local prefix=${1:-/tmp/dax-deps}
  if [ -d "$prefix/usr/bin" ] && [ -f "$prefix/.unpacked" ]; then return 0; fi
  ls "$DEPS"/*.deb >/dev/null 2>&1 || { echo "gpu-deps unpack: no packages in $DEPS (run 'scripts/gpu-deps.sh pack' where a registry is)" >&2; exit 1; }
  mkdir -p "$prefix"
  for f in "$DEPS"/*.deb; do dpkg-deb -x "$f" "$prefix"; done
  # Debian names them through alternatives, which an unpacked tree does not have.
  for b in mpirun mpiexec mpicxx mpicc mpic++; do
    [ -e "$prefix/usr/bin/$b.openmpi" ] && ln -sf "$b.openmpi" "$prefix/usr/bin/$b"
  done
  touch "$prefix/.unpacked"
}

# env.sh, sourced (bash) on the GPU machine.
write_env() {
  cat <<'EOF'
# Sourced on the GPU machine (bash), first in each command: unpacks the carried packages into
# /tmp/dax-deps once (scripts/gpu-deps.sh unpack) and points the tools at them. Written by
# scripts/gpu-deps.sh pack.
_dax_deps=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
R=${DAX_DEPS_PREFIX:-/tmp/dax-deps}
bash "$_dax_deps/../scripts/gpu-deps.sh" unpack "$R" || return 1
export OPAL_PREFIX=$R/usr
export PATH=$R/usr/bin:/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu/openmpi/lib:$R/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CMAKE_PREFIX_PATH=$R/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export CPATH=$R/usr/include:$R/usr/include/eigen3${CPATH:+:$CPATH}
export MPI_HOME=$R/usr/lib/x86_64-linux-gnu/openmpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# No ssh there: Open MPI's launcher would refuse to start even local ranks.
export OMPI_MCA_plm_rsh_agent=sh
# Debian's MCA defaults live in /etc/openmpi, which the prefix does not see: the same, here.
export OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_mtl='^ofi' OMPI_MCA_btl='^uct,openib,ofi'
export OMPI_MCA_pml='^ucx' OMPI_MCA_osc='^ucx,pt2pt' OMPI_MCA_rmaps_base_oversubscribe=1
# NCCL: the toolkit's when it has one, else the copy in the image's PyTorch wheel (nvidia.nccl is
# a namespace package: its folder is in __path__). scripts/gpu-check.sh configures with it.
_dax_nccl=$(python3 -c 'import nvidia.nccl;print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
[ -n "$_dax_nccl" ] && export DAX_NCCL_WHEEL_DIR=$_dax_nccl
unset _dax_deps _dax_nccl
EOF
}

case ${1:-} in
  pack) pack ;;
  unpack) unpack "${2:-}" ;;
  *)
    echo "usage: $0 pack | unpack [PREFIX]" >&2
    exit 2
    ;;
esac
