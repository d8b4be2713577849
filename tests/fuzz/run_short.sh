#!/usr/bin/env bash
# A short libFuzzer run of one target under CTest: SECONDS of fuzzing from the seed folders
# (read only; new inputs go to a scratch corpus). Exits 77 (CTest: skipped, and it says so)
# when the target was not built, i.e. the build is not clang with -DSLUICE_FUZZ=ON.
# Usage: run_short.sh TARGET_BINARY_OR_EMPTY NAME SECONDS ARTIFACT_DIR SEED_DIR...
set -u
bin=$1 name=$2 secs=$3 artifacts=$4
shift 4
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "SKIPPED: fuzz target $name is not built (configure with CC=clang CXX=clang++ -DSLUICE_FUZZ=ON; see tests/fuzz/README.md)"
  exit 77
fi
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
mkdir -p "$artifacts"
"$bin" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/$name-" "$corpus" "$@" 2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY|not a |Done|crash-|timeout-|oom-" 
exit "${PIPESTATUS[0]}"
