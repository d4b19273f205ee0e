# Sourced by quickstart.sh and test.sh: installs what is missing (Debian packages, when root),
# then configures and builds dax in ./build. Afterwards $DAX_BUILD names the build directory.
set -euo pipefail
DAX_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DAX_BUILD=${DAX_BUILD:-$DAX_ROOT/build}
packages="openmpi-bin libopenmpi-dev catch2 libeigen3-dev libopenblas-dev libfftw3-dev libscalapack-openmpi-dev clang libclang-rt-dev python3-numpy ccache ninja-build"

missing=""
command -v mpicxx >/dev/null 2>&1 || missing="yes"
command -v mpiexec >/dev/null 2>&1 || missing="yes"
[ -f /usr/include/catch2/catch.hpp ] || missing="yes"
[ -d /usr/include/eigen3 ] || missing="yes"
[ -e /usr/lib/x86_64-linux-gnu/libopenblas.so ] || [ -e /usr/lib/aarch64-linux-gnu/libopenblas.so ] || missing="yes"
[ -f /usr/include/fftw3.h ] || missing="yes"  # dax::fft's tests
[ -e /usr/lib/x86_64-linux-gnu/libscalapack-openmpi.so ] || [ -e /usr/lib/aarch64-linux-gnu/libscalapack-openmpi.so ] || missing="yes"  # dax::linalg's
/usr/bin/python3 -c "import numpy" >/dev/null 2>&1 || missing="yes"  # the checkpoint test reads files with NumPy
# clang and its libFuzzer runtime, for scripts/fuzz.sh.
command -v clang++ >/dev/null 2>&1 || missing="yes"
compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-*.a" >/dev/null || missing="yes"
command -v ccache >/dev/null 2>&1 || missing="yes"
# Ninja is optional (Make otherwise); installed along when installing as root.
[ "$(id -u)" = "0" ] && ! command -v ninja >/dev/null 2>&1 && missing="yes"
if [ -n "$missing" ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "dax: installing $packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null
  else
    echo "dax: missing build dependencies; install them with:"
    echo "  sudo apt-get install -y $packages"
    exit 1
  fi
fi

jobs=$(nproc 2>/dev/null || echo 2)
# ccache, when installed, with paths taken relative to the checkout: a clean clone in another
# folder reuses what an earlier build compiled (DAX_CCACHE=0 turns it off). CI holds its time
# limit with an empty cache too (docs/building.md).
if [ "${DAX_CCACHE:-1}" != "0" ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="$DAX_ROOT" CCACHE_NOHASHDIR=1
  DAX_CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache ${DAX_CMAKE_ARGS:-}"
fi
# Ninja schedules the whole build as one graph (Make goes target by target), which keeps both
# cores busy to the end; a build directory configured earlier keeps its generator.
generator=""
if [ ! -f "$DAX_BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator="-G Ninja"
fi
cmake -S "$DAX_ROOT" -B "$DAX_BUILD" $generator -DCMAKE_BUILD_TYPE=Release ${DAX_CMAKE_ARGS:-} >/dev/null
cmake --build "$DAX_BUILD" -j "$jobs" ${DAX_TARGETS:+--target $DAX_TARGETS}
