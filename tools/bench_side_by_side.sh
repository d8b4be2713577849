#!/usr/bin/env bash
# Wall times of this checkout's build against an older revision's, run alternately on the same
# machine: this VM's speed varies about threefold from day to day, so a figure from another
# day is no yardstick; the same two binaries back to back are.
#   bash tools/bench_side_by_side.sh REV [ROUNDS]
# Builds REV (Release, no CUDA harness) in a temporary worktree, then, ROUNDS times (3), runs
# `sluice bench serving` and the whole `sluice run` of Vidur's scenario (process start, load,
# simulate, write) with each binary, and prints every time. Needs build/sluice built here.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench_side_by_side.sh REV [ROUNDS]}
rounds=${2:-3}
[ -x build/sluice ] || { echo "build/sluice is missing: build this checkout first (tools/test.sh)"; exit 1; }
new=$(realpath build/sluice)
work=$(mktemp -d)
old_tree="$work/old"
cleanup() { git worktree remove --force "$old_tree" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
git worktree add --detach "$old_tree" "$rev" >/dev/null
echo "building $rev in $old_tree (Release) ..."
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); export CCACHE_BASEDIR="$old_tree"; fi
cmake -S "$old_tree" -B "$old_tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_CALIBRATE=OFF "${launcher[@]}" >"$work/cmake.log" 2>&1
cmake --build "$old_tree/build" -j "$(nproc)" --target sluice >"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; exit 1; }
old="$old_tree/build/sluice"
# The old tree may predate the scenario: it gets this checkout's copy.
cp scenarios/vidur-llama2-7b-a100.yaml "$old_tree/scenarios/vidur-side-by-side.yaml"
vidur() {  # binary scenario -> seconds of the whole run
  local out="$work/vidur-out"
  rm -rf "$out"
  local t0 t1
  t0=$(date +%s.%N)
  "$1" run "$2" --out "$out" --no-progress >/dev/null 2>&1 || { echo "failed"; return; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f s", b - a }'
}
for i in $(seq 1 "$rounds"); do
  echo "round $i"
  echo "  bench serving  $rev: $("$old" bench serving 2>&1 | awk '/wall time/ { print $3, $4; exit }')"
  echo "  bench serving  HEAD: $("$new" bench serving 2>&1 | awk '/wall time/ { print $3, $4; exit }')"
  echo "  vidur run      $rev: $(vidur "$old" "$old_tree/scenarios/vidur-side-by-side.yaml")"
  echo "  vidur run      HEAD: $(vidur "$new" scenarios/vidur-llama2-7b-a100.yaml)"
done
