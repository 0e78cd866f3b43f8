#!/usr/bin/env bash
# Installs WriteScope's build dependencies (Debian 12 packages, idempotent) and
# configures + builds the project into build/.
#
#   deploy/setup.sh [--no-build] [--build-dir DIR] [--with PACKAGE]... [-- EXTRA_CMAKE_ARGS...]
#
# --with PACKAGE: one more Debian package to install with the project's (deploy/fuzz.sh's
# clang and its runtimes).
# CUDA is used when nvcc is found (the CUDA Toolkit comes preinstalled on our machines);
# pass -- -DWS_ENABLE_CUDA=OFF to build without it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build"
DO_BUILD=1
CMAKE_ARGS=()
EXTRA_PACKAGES=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-build) DO_BUILD=0; shift ;;
    --build-dir) BUILD_DIR="$2"; shift 2 ;;
    --with) EXTRA_PACKAGES+=("$2"); shift 2 ;;
    --) shift; CMAKE_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/p}' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libdnnl-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcpp-httplib-dev nlohmann-json3-dev
  # The tests' and scripts' own tools: python3 (the reports, the e2e test, quickstart's
  # JSON), procps (pgrep, to find processes left behind), xz-utils (deploy/gpu-bundle.sh
  # packs the GPU bundle with xz).
  python3 procps xz-utils
  # oneDNN's CMake config looks for OpenCL (its GPU runtime), which libdnnl-dev only
  # recommends: without it, a machine with no OpenCL headers fails at configure.
  ocl-icd-opencl-dev
  ${EXTRA_PACKAGES[@]+"${EXTRA_PACKAGES[@]}"}
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "[setup] installing: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "[setup] need root (or sudo) to install packages" >&2; exit 1; }
    SUDO="sudo"
  fi
  # sudo resets the environment: DEBIAN_FRONTEND goes through env. A fresh image's daily
  # apt job may hold the lock for a while after boot: wait for it rather than fail.
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
    --no-install-recommends "${missing[@]}"
else
  echo "[setup] all packages present"
fi

[[ $DO_BUILD -eq 1 ]] || exit 0

if [[ ! -f "$BUILD_DIR/build.ninja" || ${#CMAKE_ARGS[@]} -gt 0 ]]; then
  echo "[setup] configuring $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja "${CMAKE_ARGS[@]}"
fi
echo "[setup] building (this takes a few minutes the first time)"
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "[setup] built into $BUILD_DIR"
