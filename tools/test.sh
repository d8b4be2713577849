#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite (unit tests, the malformed
# scenario corpus, golden outputs of every shipped scenario, determinism).
set -euo pipefail
cd "$(dirname "$0")/.."
# The tests open the report pages in a real headless browser: setup adds Debian's Chromium.
export SLUICE_SETUP_BROWSER=1
bash tools/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
