#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite (unit tests, the malformed
# scenario corpus, golden outputs of every shipped scenario, determinism).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
