#!/usr/bin/env bash
# The --set example that `sluice run --help` prints must itself validate (it used to be
# `--set workload.rate=20/s`, which is no key). Usage: help_example.sh SLUICE SOURCE_ROOT
set -u
S=$1
ex=$("$S" run --help | tr '\n' ' ' | grep -o -- '--set "workload[^"]*"' | head -1 | sed 's/^--set "//; s/"$//')
echo "example: $ex"
[ -n "$ex" ] || { echo "no --set example found in run --help"; exit 1; }
"$S" validate "$2/scenarios/quickstart.yaml" --set "$ex"
