#!/usr/bin/env bash
# Installs everything RLX needs to build and test on Debian 12 (run as root or with sudo),
# the Python package's build and tests included (pybind11, NumPy, pytest from Debian).
# Safe to run repeatedly; skips apt when every package is already present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build g++ clang libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  libfmt-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libicu-dev
  libcpp-httplib-dev libpng-dev libxxhash-dev time
  python3-dev python3-venv python3-pybind11 python3-numpy python3-pytest
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all packages present"
fi
