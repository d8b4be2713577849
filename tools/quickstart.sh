#!/usr/bin/env bash
# Sets everything up, builds, and runs the quickstart scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
./build/sluice run scenarios/quickstart.yaml
