#!/usr/bin/env python3
"""Whole measured steps against sluice's cost model.

Reads a model_steps.csv (model, implementation, step, batch, context, new_tokens, slices, ms:
whole decoder steps timed under CUDA-graph replay, see results/calibration/h200-torch/README.md),
asks `sluice cost --json` for each row and prints the error per row (-v) and the mean and worst
absolute error per model, implementation and step kind.

  python3 tools/fidelity_steps.py build/sluice results/calibration/h200-torch/model_steps.csv [-v] [--model M]

Exit status 0 when every row was costed; 2 on bad arguments or a row sluice could not cost.
"""
import argparse
import collections
import csv
import json
import subprocess
import sys


def cost_args(binary, row):
    args = [binary, "cost", "--json", "--model", row["model"], "--implementation", row["implementation"],
            "--batch", row["batch"]]
    if row["step"] == "decode":
        return args + ["--context", row["context"]]
    if row["step"] == "prefill":
        return args + ["--prefill", row["new_tokens"], "--context", "0"]
    if row["step"] == "sliced_prefill":
        return args + ["--prefill", row["new_tokens"], "--slices", row["slices"], "--context", "0"]
    raise ValueError(f"unknown step kind {row['step']!r} (decode, prefill, sliced_prefill)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sluice")
    ap.add_argument("steps_csv")
    ap.add_argument("-v", action="store_true", help="print every row")
    ap.add_argument("--model", help="only this model's rows")
    a = ap.parse_args()
    groups = collections.OrderedDict()
    with open(a.steps_csv, newline="") as f:
        rows = [r for r in csv.DictReader(f) if not a.model or r["model"] == a.model]
    if not rows:
        print(f"{a.steps_csv}: no rows" + (f" of model {a.model}" if a.model else ""), file=sys.stderr)
        return 2
    for r in rows:
        try:
            out = subprocess.run(cost_args(a.sluice, r), capture_output=True, text=True, check=True).stdout
        except (ValueError, subprocess.CalledProcessError) as e:
            print(f"{a.steps_csv}: row {r}: {getattr(e, 'stderr', '') or e}", file=sys.stderr)
            return 2
        pred = json.loads(out)["total_ns"] / 1e6
        meas = float(r["ms"])
        err = (pred - meas) / meas
        for key in ((r["model"], r["implementation"], "all"), (r["model"], r["implementation"], r["step"])):
            groups.setdefault(key, []).append(err)
        if a.v:
            print(f"{r['model']:16} {r['implementation']:14} {r['step']:15} B {r['batch']:>4} L {r['context']:>5} "
                  f"T {r['new_tokens']:>5} S {r['slices']:>2}  measured {meas:9.4f} ms  sluice {pred:9.4f} ms  {100 * err:+6.1f}%")
    print(f"{'model':16} {'implementation':14} {'step':15} {'rows':>4} {'mean |err|':>10} {'worst':>7} {'bias':>7}")
    for (m, i, s), v in groups.items():
        worst = max(v, key=abs)
        print(f"{m:16} {i:14} {s:15} {len(v):4d} {100 * sum(map(abs, v)) / len(v):9.2f}% {100 * worst:+6.1f}% {100 * sum(v) / len(v):+6.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
