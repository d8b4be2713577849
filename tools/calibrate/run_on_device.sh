#!/usr/bin/env bash
# The one prepared run of the calibration harness on a GPU machine: build sluice-calibrate
# from this tree (standalone CMake project, no sluice dependencies), run the CPU unit tests
# if doctest is there, check every kernel against its float64 reference, sweep, and write
# the tables with meta.json and README.md.
#
#   tools/calibrate/run_on_device.sh [TABLE_DIR] [sluice-calibrate options...]
#
# TABLE_DIR defaults, when $OUT is set (the device tool's output folder), to a staging folder
# packed at the end into $OUT/calibration.tar.gz (unpack it into results/: `tar xzf
# calibration.tar.gz -C results/`) with the log beside it; else results/calibration/<device>. The build goes to $BUILD_DIR (default
# /tmp/sluice-calibrate-build); the run's log to TABLE_DIR/../run-<device>.log.
# Examples:  tools/calibrate/run_on_device.sh
#            tools/calibrate/run_on_device.sh /tmp/h200 --quick
# Expected on an H200: build ~1 min on 16 cores, checks ~10 s, sweep ~2 min.
set -euo pipefail
cd "$(dirname "$0")/../.."

build=${BUILD_DIR:-/tmp/sluice-calibrate-build}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

out_args=()
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  out_args=(--out "$1")
  log_dir=$(dirname "$1")
  shift
elif [ -n "${OUT:-}" ]; then
  # The device tool brings back at most 8 files: the tables (7 CSV + meta.json + README.md)
  # are written to a staging folder and packed into one archive in $OUT at the end.
  stage=$(mktemp -d)
  out_args=(--out-root "$stage/calibration")
  log_dir=$stage/calibration
else
  log_dir=results/calibration
fi
mkdir -p "$log_dir"

echo "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv || true
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 || true)
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z-' || echo gpu)

echo "== build ($build)"
t0=$(date +%s)
cmake -S tools/calibrate -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$(nproc)"
echo "build took $(( $(date +%s) - t0 )) s"

if [ -x "$build/calibrate_cpu_tests" ]; then
  echo "== CPU unit tests"
  "$build/calibrate_cpu_tests"
fi

echo "== checks, sweep, tables"
git_commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
driver_args=()
[ -n "$driver" ] && driver_args=(--driver "$driver")
set +e
"$build/sluice-calibrate" "${out_args[@]}" --git "$git_commit" "${driver_args[@]}" "$@" 2>&1 | tee "$log_dir/run-$device.log"
rc=${PIPESTATUS[0]}
set -e
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >> "$log_dir/run-$device.log" 2>&1 || true
echo "sluice-calibrate exited with $rc; total $(( $(date +%s) - t0 )) s"
if [ -n "${stage:-}" ]; then
  tar czf "$OUT/calibration.tar.gz" -C "$stage" calibration
  cp "$log_dir/run-$device.log" "$OUT/run-$device.log"
  echo "packed $(tar tzf "$OUT/calibration.tar.gz" | wc -l) entries into \$OUT/calibration.tar.gz"
fi
exit "$rc"
