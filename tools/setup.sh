#!/usr/bin/env bash
# Installs everything sluice needs on Debian 12 (run as root or with sudo). Safe to re-run:
# when every package is already installed it does nothing.
set -euo pipefail
PACKAGES=(build-essential cmake ninja-build libboost-graph-dev nlohmann-json3-dev libyaml-cpp-dev
          libcli11-dev libfmt-dev doctest-dev)
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
