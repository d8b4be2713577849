#!/usr/bin/env bash
# Installs everything sluice needs on Debian 12 (run as root or with sudo). Safe to re-run:
# when every package is already installed it does nothing.
set -euo pipefail
PACKAGES=(build-essential cmake ninja-build libboost-graph-dev nlohmann-json3-dev libyaml-cpp-dev
          libcli11-dev libfmt-dev doctest-dev
          # the sluice binary's allocator (huge pages for its flow heaps; simulator/CMakeLists.txt)
          libjemalloc-dev
          # sluice sweep over MPI ranks; sluice report (plots, topology drawings); schema tests
          libopenmpi-dev openmpi-bin python3-matplotlib graphviz python3-jsonschema)
# The report pages' browser test (tools/test.sh sets SLUICE_SETUP_BROWSER=1; the quickstart needs no browser).
[ "${SLUICE_SETUP_BROWSER:-0}" = 1 ] && PACKAGES+=(chromium)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
