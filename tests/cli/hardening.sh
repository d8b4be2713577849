#!/usr/bin/env bash
# Hostile-input checks of issue 27 (parts 1 and 2), each a regression test of a finding:
# nothing is written outside its place or over a user's file, and no gate passes silently.
# usage: hardening.sh SLUICE ROOT CASE   (one CTest entry per CASE; an unknown CASE fails)
set -u
S=$1
R=$2
CASE=$3
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
cd "$t" || exit 1
Q=$R/scenarios/quickstart.yaml
W=$R/scenarios/cluster-shared-fabric.yaml
SMALL=(--set workload.requests=20)

fail() {
  echo "FAIL: $*"
  exit 1
}
# expect RC CMD...: runs CMD (stdout in out, stderr in err) and wants exit status RC.
expect() {
  local want=$1
  shift
  "$@" > out 2> err
  local rc=$?
  [ "$rc" -eq "$want" ] || { cat out err; fail "exit $rc, wanted $want: $*"; }
}
# said TEXT: stderr of the last command holds TEXT.
said() { grep -qF -- "$1" err || { cat err; fail "stderr lacks '$1'"; }; }

case "$CASE" in
  workload_names)
    # A workload's name becomes file names and metric keys: refused where it is declared.
    for bad in '../../esc' '/tmp/sluice-abs' 'a/b' '.hidden' 'a.b' '"a\nb"' '"a\0b"' '""' 'a b'; do
      expect 2 "$S" validate "$W" --set "workloads.0.name=$bad"
      said "workloads[0].name"
    done
    expect 2 "$S" validate "$W" --set "workloads.0.name=$(printf 'n%.0s' {1..65})"
    said "too long"
    expect 2 "$S" validate "$W" --set workloads.1.name=chat
    said "two workloads have this name"
    expect 0 "$S" validate "$W" --set workloads.0.name=chat-2_B
    # From a nested working directory, nothing lands above it, and no result is left.
    mkdir -p a/b && cd a/b || exit 1
    expect 2 "$S" run "$W" --set 'workloads.0.name=../../esc' --out o
    cd "$t" || exit 1
    [ -z "$(find . -name '*esc*')" ] || fail "a file named by the workload was written: $(find . -name '*esc*')"
    [ ! -e a/b/o ] || fail "a result was left"
    # The scenario's own name still may not leave results/, and one from an odd file name is made safe.
    expect 2 "$S" validate "$Q" --set name=..
    grep -v "^name:" "$Q" > ./..odd.yaml
    expect 0 "$S" run ./..odd.yaml "${SMALL[@]}"
    ls results | grep -qx 'odd' || fail "the results folder of ..odd.yaml is $(ls results)"
    ;;

  sweep_out)
    # A user's directory holding sweep.csv is never written into; a link is never followed.
    mkdir u && echo mine > u/sweep.csv
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --out u --no-progress
    said "not a sluice sweep"
    [ "$(cat u/sweep.csv)" = mine ] && [ ! -e u/points ] || fail "the user's directory changed: $(ls -A u)"
    mkdir real && ln -s real link
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --out link --no-progress
    said "symbolic link"
    [ -z "$(ls -A real)" ] || fail "written through the link"
    echo mine > f
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --out f --no-progress
    [ "$(cat f)" = mine ] || fail "a regular file was replaced"
    # A new directory is claimed and marked; running again resumes it.
    expect 0 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --out s --no-progress
    [ -f s/.sluice-sweep ] && [ -f s/sweep.csv ] || fail "no marked sweep: $(ls -A s)"
    expect 0 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --out s --no-progress
    grep -q "0 points run, 2 resumed" out || { cat out; fail "not resumed"; }
    # A sweep stopped by SIGTERM exits 128+15, as the README says, and resumes later.
    timeout --preserve-status -s TERM 1 "$S" sweep "$R/scenarios/ecmp-hash-luck.yaml" --out k -j 1 --no-progress > out 2> err
    rc=$?
    [ "$rc" -eq 143 ] || { cat out err; fail "a sweep stopped by SIGTERM exited $rc, not 143"; }
    # A point's directory that is a regular file is found before any point runs.
    mkdir -p p/points && touch p/.sluice-sweep && echo x > p/points/p0001
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --out p --no-progress
    said "p0001"
    [ ! -e p/points/p0000 ] || fail "point 0 ran before the blocked point 1 was found"
    ;;

  sweep_flags)
    # A malformed constraint or objective fails before any point runs (it failed after all ran).
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --where 'ttft.p99<<3' --out w --no-progress
    said "not a number"
    [ ! -e w/points/p0000 ] || fail "a point ran before the constraint was read"
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --where 'ttft.p99<3 parsecs' --out w --no-progress
    said "unknown unit"
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --where '<3' --out w --no-progress
    said "METRIC OP VALUE"
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --objective sideways:ttft.p99 --out w --no-progress
    said "unknown direction"
    [ ! -e w/points ] || fail "points ran: $(ls -A w/points)"
    # An absurd grid (200,000 points) is refused at once, before its points are made.
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid "seed=$(seq -s, 1 100)" --grid "workload.requests=$(seq -s, 1 100)" \
      --grid "deployment.max_in_flight=$(seq -s, 1 20)" --out big --no-progress
    said "more points than a sweep may run"
    [ ! -e big ] || fail "an absurd sweep claimed its directory"
    # A well-formed one naming no metric is still found, once the points have given their names.
    expect 2 "$S" sweep "$Q" "${SMALL[@]}" --grid seed=1,2 --where 'no_such_metric<3' --out w2 --no-progress
    said "no_such_metric"
    ;;

  report_out)
    expect 0 "$S" run "$Q" "${SMALL[@]}" --out r
    # A user's index.html is never replaced.
    mkdir o && echo mine > o/index.html
    expect 2 "$S" report r --out o
    [ "$(cat o/index.html)" = mine ] || fail "the user's index.html was replaced"
    # The default place, and again (a report replaces the earlier report).
    expect 0 "$S" report r
    [ -s r/report/index.html ] && [ -f r/report/.sluice-result ] || fail "no report: $(ls -A r/report)"
    expect 0 "$S" report r
    [ -z "$(ls -A r | grep partial)" ] || fail "staging left behind"
    [ -f r/report/.sluice-report ] || fail "the report is not marked as one"
    # A run's results are never replaced by a report, nor the input itself (both carry
    # .sluice-result), even with the run's own directory as --out.
    expect 0 "$S" run "$Q" "${SMALL[@]}" --out r2
    expect 2 "$S" report r --out r2
    said "not an earlier report"
    [ -f r2/metrics.json ] && [ -f r2/requests.csv ] || fail "another run's results were replaced: $(ls -A r2)"
    expect 2 "$S" report r --out r
    said "the results directory it reads"
    [ -f r/metrics.json ] && [ -f r/requests.csv ] || fail "the input's results were replaced: $(ls -A r)"
    expect 2 "$S" report r/report/.. --out r/report/..
    [ -f r/metrics.json ] || fail "the input was replaced through a .. path"
    ;;

  report_input)
    # A folder that is no result: refused with the reason, nothing created in it, matplotlib not blamed.
    mkdir plain && echo hi > plain/notes.txt
    expect 2 "$S" report plain
    said "neither a run's result"
    [ ! -e plain/report ] || fail "report/ was created inside a folder that is no result"
    ! grep -q matplotlib err || fail "matplotlib blamed"
    expect 0 "$S" run "$Q" "${SMALL[@]}" --out r
    for what in empty brackets truncated nometrics; do
      mkdir "$what" && touch "$what/.sluice-result"
      case $what in
        empty) : > "$what/metrics.json" ;;
        brackets) echo '[]' > "$what/metrics.json" ;;
        truncated) head -c 200 r/metrics.json > "$what/metrics.json" ;;
        nometrics) echo '{"schema_version": 1}' > "$what/metrics.json" ;;
      esac
      expect 2 "$S" report "$what"
      said "metrics.json"
      [ ! -e "$what/report" ] || fail "report/ created for $what"
      ! grep -q -e Traceback -e matplotlib err || fail "$what: $(cat err)"
    done
    ;;

  check_baselines)
    cat > suite.yaml << EOF
suite: mini
tolerances:
  - {metric: "*.latency_ms.ttft.p99", relative: 5%, worse: higher}
scenarios:
  - {name: q, file: $Q, set: [workload.requests=20]}
EOF
    expect 0 "$S" check suite.yaml --baselines b --update
    expect 0 "$S" check suite.yaml --baselines b
    cp b/q.json good.json
    # Each corrupt baseline fails the check with the file and the reason, before anything runs.
    for bad in '[1,2,3]' '{"metrics":[1,2]}' '{"metrics":{"serving.latency_ms.ttft.p99":"12"}}' '{"metrics":{}}' \
               '{"metrics":{"unchecked.metric":1}}' '{"entry":"other","metrics":{"serving.latency_ms.ttft.p99":1}}' '{"metr'; do
      echo "$bad" > b/q.json
      expect 2 "$S" check suite.yaml --baselines b
      said "b/q.json"
      said "corrupt baseline"
      ! grep -q -e invalid_iterator -e "0 regressions" out err || fail "$bad: $(cat out err)"
    done
    cp good.json b/q.json
    expect 0 "$S" check suite.yaml --baselines b
    # A baseline that lacks a metric the tolerances check (trimmed, or stale) fails: it would
    # check less than it seems to.
    sed 's/^  - {metric: "\*.latency_ms.ttft.p99".*/&\n  - {metric: "*.latency_ms.tpot.p99", relative: 5%, worse: higher}/' suite.yaml > suite2.yaml
    grep -q tpot suite2.yaml || fail "suite2.yaml was not made"
    expect 1 "$S" check suite2.yaml --baselines b
    grep -q "not in the baseline" out || { cat out; fail "a metric missing from the baseline passed"; }
    # --update never replaces a file that is not this entry's baseline.
    mkdir mine && echo '{"my": "notes"}' > mine/q.json
    expect 2 "$S" check suite.yaml --baselines mine --update
    said "not a sluice baseline"
    [ "$(cat mine/q.json)" = '{"my": "notes"}' ] || fail "a user's file was replaced by --update"
    # An unwritable --junit is found before the suite runs (the run would take its time first).
    mkdir jdir
    expect 2 "$S" check suite.yaml --baselines b --junit jdir
    said "--junit"
    ! grep -q "PASS\|FAIL" out || fail "the suite ran before --junit was checked"
    expect 2 "$S" check suite.yaml --baselines b --junit /dev/null/x.xml
    said "cannot be written"
    # A suite or an entry whose name would reach outside the baselines' folder is refused.
    sed 's/^suite: mini/suite: ../' suite.yaml > dotdot.yaml
    expect 2 "$S" check dotdot.yaml --update
    said "suite = '..': a name must begin with a letter or a digit"
    sed 's/name: q,/name: ..\/q,/' suite.yaml > entry.yaml
    expect 2 "$S" check entry.yaml --baselines b --update
    said "scenarios.0.name"
    [ ! -e q.json ] && [ ! -e "$R/results/baselines/q.json" ] && [ ! -e "$R/results/q.json" ] || fail "a baseline was written outside its folder"
    ;;

  fault_events)
    F=$R/scenarios/spine-failure.yaml
    # A fault event written as a mapping is no trace line: an error, not silently dropped.
    expect 2 "$S" validate "$F" --set 'faults=[{kind: trace, events: [{at: 1s, node: node0}]}]'
    said "faults[0].events[0]"
    said "expected a trace line"
    # A trace that can never fail anything is an error too.
    expect 2 "$S" validate "$F" --set 'faults=[{kind: trace, events: ["# nothing but a comment"]}]'
    said "holds no event"
    expect 2 "$S" validate "$F" --set 'faults=[{kind: trace, events: []}]'
    said "holds no event"
    expect 0 "$S" validate "$F" --set 'faults=[{kind: trace, events: ["1s switch:spine0 down"]}]'
    ;;

  training_stall)
    # A training job that can never finish fails the run (exit 1) as serving does, instead of
    # reporting success with fewer iterations than asked.
    T=$R/tests/cli/training-stall.yaml
    expect 1 "$S" run "$T" --out r
    said "stalled"
    said "0 of 2 iterations"
    [ ! -e r ] || fail "a result was written"
    expect 1 "$S" run "$T" --out r --set 'faults=[{kind: trace, events: ["1ms node:node2 down"]}]'
    said "never repaired"
    # With the watchdog on, the job fails and the run reports it (exit 0).
    expect 0 "$S" run "$T" --out w --set workloads.0.recovery.collective_timeout=1s
    grep -q '"failed": true' w/metrics.json || { grep -n fail w/metrics.json; fail "the job did not fail"; }
    ;;

  leftovers)
    # A command that fails after claiming its output leaves no folder it made behind.
    expect 2 "$S" compare "$Q" --vary seed=1,2 --metric nonexistent "${SMALL[@]}"
    [ ! -e results ] || fail "a failed compare left $(find results)"
    # An empty list of lengths is no batch.
    expect 2 "$S" cost --hardware h200 --model llama2-7b --lengths ""
    said "--lengths"
    ;;

  cost_eplb)
    # EPLB's slots divide where the experts do not: Mixtral's 8 experts and 8 copies over 16
    # devices, one a device.
    expect 0 "$S" cost --model mixtral-8x7b --tp 16 --expert-parallel --eplb --redundant-experts 8 --dispatch alltoall \
      --batch 64 --context 2048 --json
    grep -q '"redundant_experts": 8' out || fail "no redundant_experts in the JSON"
    grep -q '"eplb": true' out || fail "no eplb in the JSON"
    expect 0 "$S" cost --model mixtral-8x7b --tp 16 --expert-parallel --eplb --redundant-experts 8 --dispatch alltoall
    grep -q "placed by EPLB with 8 redundant copies" out || { cat out; fail "the experts' line is missing"; }
    # Without EPLB they must divide; copies need EPLB and must make up a multiple of the devices:
    # each refused at its own flag.
    expect 2 "$S" cost --model mixtral-8x7b --tp 16 --expert-parallel --dispatch alltoall
    said "--tp"
    expect 2 "$S" cost --model deepseek-v3 --precision fp8 --tp 8 --expert-parallel --redundant-experts 8
    said "--redundant-experts"
    expect 2 "$S" cost --model mixtral-8x7b --tp 16 --expert-parallel --eplb --redundant-experts 4 --dispatch alltoall
    said "--redundant-experts"
    ;;

  cost_dp_attention)
    # Data-parallel attention in `sluice cost`: each of the 16 devices attends over its own 16 of
    # the 256 sequences with every head (DeepSeek's decode layout). The step is shorter than
    # tensor-parallel attention's (no all-reduce; each device reads its own latents), and the
    # memory is the fullest device's: its own sequences' whole-head cache, every weight but the
    # routed experts'.
    expect 0 "$S" cost --model deepseek-v3 --precision fp8 --tp 16 --expert-parallel --dispatch alltoall --dp-attention \
      --batch 256 --context 2048 --json
    cp out dp.json
    expect 0 "$S" cost --model deepseek-v3 --precision fp8 --tp 16 --expert-parallel --dispatch alltoall --batch 256 --context 2048 --json
    cp out tp.json
    /usr/bin/python3 - dp.json tp.json <<'PY' || fail "data-parallel attention's step or memory is wrong"
import json, sys
dp, tp = (json.load(open(f)) for f in sys.argv[1:3])
assert dp["dp_attention"] is True and tp["dp_attention"] is False
assert dp["total_ns"] < tp["total_ns"], (dp["total_ns"], tp["total_ns"])
assert not any(o["op"].startswith("allreduce") for o in dp["ops"]), [o["op"] for o in dp["ops"]]
# 16 sequences of 2049 tokens, 61 layers of a 576-wide latent in bf16 (the KV cache's dtype).
kv = 16 * 2049 * 61 * 576 * 2
assert abs(dp["memory_per_gpu"]["kv_bytes"] - kv) < 1e-6 * kv, (dp["memory_per_gpu"]["kv_bytes"], kv)
# Tensor-parallel attention keeps every sequence's latent on every device: 16 times as much.
assert abs(tp["memory_per_gpu"]["kv_bytes"] - 16 * kv) < 1e-6 * kv, (tp["memory_per_gpu"]["kv_bytes"], 16 * kv)
assert dp["memory_per_gpu"]["weights_bytes"] > tp["memory_per_gpu"]["weights_bytes"]
PY
    # 17 sequences over 16 devices: the fullest holds two (sequences 0 and 16), and its cache is
    # what the memory counts.
    expect 0 "$S" cost --model deepseek-v3 --precision fp8 --tp 16 --expert-parallel --dispatch alltoall --dp-attention \
      --batch 17 --context 2048 --json
    /usr/bin/python3 -c "import json; kv = json.load(open('out'))['memory_per_gpu']['kv_bytes']; assert abs(kv - 2 * 2049 * 61 * 576 * 2) < 1, kv" ||
      fail "the fullest device's cache is not two sequences'"
    expect 0 "$S" cost --model deepseek-v3 --precision fp8 --tp 16 --expert-parallel --dispatch alltoall --dp-attention
    grep -q "attention: data-parallel over the 16 devices" out || { cat out; fail "the attention line is missing"; }
    # A dense model has no experts: refused at the flag given.
    expect 2 "$S" cost --model llama3-8b --tp 8 --dp-attention
    said "--dp-attention"
    # It needs the tokens moved by all-to-all and more than one device: refused at its flag.
    expect 2 "$S" cost --model deepseek-v3 --precision fp8 --tp 16 --expert-parallel --dp-attention
    said "--dp-attention"
    expect 2 "$S" cost --model deepseek-v3 --precision fp8 --tp 1 --expert-parallel --dispatch alltoall --dp-attention
    said "--dp-attention"
    # Pipeline stages are not modelled with it (as in a scenario): refused at --pp, not as a
    # generic cost-model error.
    expect 2 "$S" cost --model deepseek-v3 --precision fp8 --tp 16 --pp 2 --expert-parallel --dispatch alltoall --dp-attention
    said "--pp = '2'"
    said "pipeline stages are not modelled"
    ;;

  monkey_nothing)
    # A monkey with nothing to fail exits 2 before running anything, not 0 after 0 runs.
    expect 2 "$S" monkey "$R/scenarios/spine-failure.yaml" --classes ocs
    said "no component"
    expect 2 "$S" monkey "$R/scenarios/spine-failure.yaml" --classes nonsense
    said "not a component class"
    # A failure the scenario never repairs stalls the training job: a stall, not a crash.
    expect 0 "$S" monkey "$R/tests/cli/training-stall.yaml" --set 'faults=[]' --classes node --per-class 1 --instants 1
    grep -q "0 crashes.*1 stalls" out || { cat out err; fail "a stall was not reported as one"; }
    ;;

  *)
    fail "unknown case '$CASE'"
    ;;
esac
echo "ok: $CASE"
