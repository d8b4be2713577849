#!/usr/bin/env bash
# Sets everything up, builds, and runs the quickstart scenario.
set -euo pipefail
cd "$(dirname "$0")/.."
SLUICE_TARGETS=sluice bash tools/build.sh   # the binary alone: tests and the CUDA harness are the test command's
./build/sluice run scenarios/quickstart.yaml
