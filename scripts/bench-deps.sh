#!/usr/bin/env bash
# What the peer benchmarks need beyond the build (not CI): PyTorch for benchmarks/train_step.py and
# mlp_step.py, ScaLAPACK for the scalapack_peer target, FFTW's MPI interface for fft_bench, matplotlib for benchmarks/plot.py. Debian's
# packages, installed when root; otherwise prints the apt-get line.
set -euo pipefail
packages="python3-torch python3-matplotlib libscalapack-openmpi-dev libfftw3-mpi-dev"
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null
  echo "dax: installed $packages; reconfigure the build so it finds ScaLAPACK (cmake -S . -B build)"
else
  echo "dax: install the benchmarks' peers with:"
  echo "  sudo apt-get install -y $packages"
fi
