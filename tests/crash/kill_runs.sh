#!/usr/bin/env bash
# Crash safety (issue 9): `sluice run` and `sluice compare` killed at random moments with
# SIGKILL, SIGTERM and SIGINT never leave a result directory that looks complete
# (.sluice-result without metrics.json, or a target without the marker), SIGINT/SIGTERM leave
# no staging directory of their own (by pid), and the next run in the folder removes SIGKILL's leftovers.
# Usage: kill_runs.sh SLUICE SOURCE_ROOT [ROUNDS]
set -u
S=$(realpath "$1")
ROOT=$(realpath "$2")
ROUNDS=${3:-6}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail() { echo "FAIL: $*"; ls -la "$work"; exit 1; }
# A run of a few seconds (long enough to be killed while simulating or while writing).
run_cmd=("$S" run "$ROOT/scenarios/quickstart.yaml" --set workload.requests=200000 --set workload.arrival.clients=100 --no-progress)
cmp_cmd=("$S" compare "$ROOT/scenarios/quickstart.yaml" --vary workload.requests=60000,60001 --set workload.arrival.clients=100)
signals=(KILL TERM INT)
kills=0
for round in $(seq 1 "$ROUNDS"); do
  for kind in run compare; do
    sig=${signals[$(( (round + ${#kind}) % 3 ))]}
    delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.05 + (r % 300) / 100 }')
    out="$work/out-$kind"
    if [ $kind = run ]; then "${run_cmd[@]}" --out "$out" --force >/dev/null 2>&1 &
    else "${cmp_cmd[@]}" --out "$out" --force >/dev/null 2>&1 &
    fi
    pid=$!
    sleep "$delay"
    kill -s "$sig" $pid 2>/dev/null && kills=$((kills + 1))
    wait $pid
    rc=$?
    echo "round $round: $kind, SIG$sig after ${delay}s -> exit $rc"
    if [ -e "$out" ]; then
      # It finished before the signal, or the signal came after the rename: it must be complete.
      [ -f "$out/.sluice-result" ] && [ -s "$out/metrics.json" ] || fail "$out exists but is not a complete result"
    fi
    if [ "$sig" != KILL ]; then
      # Only this process's own: an earlier SIGKILL's leftovers stay until a run gets as far as
      # removing them, and a signal early in start-up (slow under a sanitizer) comes before that.
      left=$(find "$work" -maxdepth 1 -name ".*.partial.$pid" | wc -l)
      [ "$left" -eq 0 ] || fail "SIG$sig left its staging directory (.*.partial.$pid)"
      case $rc in 0|130|143) ;; *) fail "SIG$sig: unexpected exit $rc" ;; esac
    fi
  done
done
# Whatever SIGKILL left is removed by the next run in the same folder, and that run completes.
"$S" run "$ROOT/scenarios/quickstart.yaml" --out "$work/final" --no-progress >/dev/null || fail "the final run failed"
left=$(find "$work" -maxdepth 1 -name '.*.partial.*' -o -maxdepth 1 -name '.*.old.*' | wc -l)
[ "$left" -eq 0 ] || fail "stale staging directories were not removed"
[ -f "$work/final/.sluice-result" ] || fail "the final run left no marker"
echo "OK: $kills signals delivered; no torn or stale directories"
