#!/bin/sh
# Installs every Debian package that ddpd's build, its tests and the default dataset need
# (PyTorch among them: the torch_ddpd module and its tests; fusepy: a FUSE mount that
# stops answering, for check_security); with --bench, also the peers
# that tests/bench/ measures against (OpenMPI); with
# --fuzz, clang and its libFuzzer runtime (tests/fuzz). Idempotent and non-interactive;
# run as root (or through sudo).
#   deploy/install-deps.sh [--bench|--fuzz]
set -eu

packages="
  build-essential cmake pkg-config
  libzmq3-dev
  libprotobuf-c-dev protobuf-c-compiler
  check
  libopenblas-dev
  zlib1g-dev
  libinih-dev
  libcjson-dev
  libexpat1-dev
  libsystemd-dev systemd
  dataset-fashion-mnist
  python3-torch libtorch-dev pybind11-dev
  python3-fusepy
"
case "${1:-}" in
  "") ;;
  --bench) packages="$packages openmpi-bin libopenmpi-dev bc" ;;
  --fuzz) packages="$packages clang libclang-rt-14-dev" ;;
  *) echo "usage: install-deps.sh [--bench|--fuzz]" >&2; exit 2 ;;
esac

missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  echo "install-deps: everything is installed"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $missing
