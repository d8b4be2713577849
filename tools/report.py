#!/usr/bin/python3
"""Pictures of a sluice run or sweep directory, and one self-contained HTML page.

usage: report.py DIR OUT [--sluice PATH]

Reads what the run wrote (metrics.json, requests.csv, timeseries.csv, trace.json; a
sweep's sweep.json; a study's variants) and draws, with matplotlib (Debian's
python3-matplotlib) and Graphviz (dot/neato), whichever of these the data allows:
latency CDFs, inter-token gap histograms, KV occupancy / queue length / batch size over
time, an iteration timeline per replica, throughput-latency curves over a sweep (and the best
point's own pictures), one chart per metric across a compare study's variants with their table,
each world workload's latencies, the energy, cost and carbon of the cluster and of each
workload, availability curves, and the topology; a header says what ran. Each picture is written as PNG and SVG; index.html
embeds the PNGs and the summary tables, so it stands alone. `sluice report` runs this.
"""
import base64
import csv
import html
import json
import os
import re
import shutil
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3,
                     "svg.hashsalt": "sluice", "svg.fonttype": "none"})


class Report:
    def __init__(self, src, out):
        self.src, self.out = src, out
        self.figures = []  # (name, title, caption)
        self.tables = []   # (title, header, rows)
        os.makedirs(out, exist_ok=True)

    def save(self, fig, name, title, caption):
        fig.tight_layout()
        for ext in ("png", "svg"):
            fig.savefig(os.path.join(self.out, f"{name}.{ext}"), metadata={"Date": None} if ext == "svg" else None)
        plt.close(fig)
        self.figures.append((name, title, caption))

    # ---------------------------------------------------------------- one run
    def run(self, d, label=""):
        metrics = load_json(os.path.join(d, "metrics.json"))
        m = (metrics or {}).get("metrics", {})
        if metrics and not label:
            self.header(metrics)
        self.bands = (metrics or {}).get("bands", {}) or {}
        if "compare" in m:
            self.compare(d, m["compare"])
        if self.bands.get("metrics"):
            self.error_bands(self.bands)
        reqs = load_csv(os.path.join(d, "requests.csv"))
        if reqs:
            self.latency_cdfs(reqs, label)
            self.gap_histograms(reqs, m, label)
        # A world's serving workloads: their reports under workloads.<name>, their rows in <name>.requests.csv.
        for name, w in sorted(m.get("workloads", {}).items()):
            if not isinstance(w, dict) or "latency_ms" not in w:
                continue
            wl = f"{label} [{name}]"
            wreqs = load_csv(os.path.join(d, f"{name}.requests.csv"))
            if wreqs:
                self.latency_cdfs(wreqs, wl)
            self.serving_table(w, wl)
        ts = load_csv(os.path.join(d, "timeseries.csv"))
        if ts:
            self.timeseries(ts, label)
        trace = load_json(os.path.join(d, "trace.json"))
        if trace:
            self.timeline(trace, label)
        if "variants" in m and any("slice_availability" in v for v in m["variants"]):
            self.availability(m["variants"])
        study = load_csv(os.path.join(d, "availability.csv"))
        if study:
            self.availability_study(study)
        if "serving" in m:
            self.serving_table(m["serving"], label)
        self.energy_table(m, label)
        self.fabric_table(m, (metrics or {}).get("scenario", {}).get("resolved", {}), label)
        if metrics and "scenario" in metrics:
            self.topologies(metrics["scenario"].get("resolved", {}))

    def latency_cdfs(self, reqs, label):
        fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
        for ax, col, name in zip(axes, ("ttft_ms", "tpot_ms", "e2e_ms"), ("TTFT", "TPOT (mean gap after the first token)", "E2E")):
            xs = sorted(float(r[col]) for r in reqs if r.get(col) not in (None, "", "nan"))
            if not xs:
                continue
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", color="#1f77b4")
            for q, ls in ((0.5, ":"), (0.99, "--")):
                v = xs[min(len(xs) - 1, int(q * len(xs)))]
                ax.axvline(v, ls=ls, color="#d62728", lw=0.8)
                ax.annotate(f"p{int(q * 100)} {v:.3g}", (v, q), fontsize=7, color="#d62728", xytext=(3, -10), textcoords="offset points")
            ax.set_xlabel(f"{name} (ms)")
            ax.set_ylabel("fraction of requests")
            ax.set_ylim(0, 1.02)
        fig.suptitle(f"Latency CDFs{label} ({len(reqs)} requests)")
        self.save(fig, "latency_cdf" + slug(label), "Latency CDFs" + label,
                  "Per-request TTFT (arrival to first token delivered), TPOT and E2E from requests.csv; dotted p50, dashed p99.")

    def gap_histograms(self, reqs, m, label):
        tpot = [float(r["tpot_ms"]) for r in reqs if r.get("tpot_ms") not in (None, "", "nan")]
        gap = [float(r["max_gap_ms"]) for r in reqs if r.get("max_gap_ms") not in (None, "", "nan")]
        if not tpot and not gap:
            return
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
        axes[0].hist(tpot, bins=50, color="#2ca02c")
        axes[0].set_xlabel("mean inter-token gap per request (ms)")
        axes[1].hist(gap, bins=50, color="#ff7f0e")
        axes[1].set_xlabel("longest inter-token gap per request (ms)")
        for ax in axes:
            ax.set_ylabel("requests")
        itg = m.get("serving", {}).get("latency_ms", {}).get("inter_token_gap", {})
        if itg:
            axes[1].axvline(itg.get("p99", 0), ls="--", color="#d62728", lw=0.8, label=f"p99 over every gap {itg.get('p99', 0):.3g} ms")
            axes[1].legend(fontsize=7)
        fig.suptitle(f"Inter-token gaps{label}")
        self.save(fig, "gap_hist" + slug(label), "Inter-token gap histograms" + label,
                  "Per request: the mean gap between delivered tokens (TPOT) and the longest one (a decode stall); the dashed line is the p99 over every gap of the run.")

    def timeseries(self, ts, label):
        t = [float(r["t_s"]) for r in ts]
        cols = [("kv_occupancy", "KV occupancy (fraction)", "#9467bd"), ("waiting", "queue length (waiting)", "#d62728"),
                ("running", "batch size (running)", "#1f77b4")]
        cols = [c for c in cols if c[0] in ts[0]]
        if not cols:
            return
        fig, axes = plt.subplots(len(cols), 1, figsize=(10, 1.9 * len(cols)), sharex=True)
        axes = axes if len(cols) > 1 else [axes]
        for ax, (col, name, color) in zip(axes, cols):
            ax.plot(t, [float(r[col]) for r in ts], color=color, lw=1)
            ax.set_ylabel(name, fontsize=8)
        axes[-1].set_xlabel("simulated time (s)")
        fig.suptitle(f"KV occupancy, queue length and batch size over time{label}")
        self.save(fig, "timeseries" + slug(label), "KV occupancy, queue and batch over time" + label,
                  "From timeseries.csv, summed over replicas at each sample.")

    def timeline(self, trace, label):
        events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
        names = {}
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                names[(e["pid"], e["tid"])] = e["args"]["name"]
            if e.get("ph") == "M" and e.get("name") == "process_name":
                names[(e["pid"], None)] = e["args"]["name"]
        xs = [e for e in events if e.get("ph") == "X"]
        if not xs:
            return
        # The first process (replicas, pipeline stages, links): its tracks, at most 16.
        pid = min(e["pid"] for e in xs)
        tracks = sorted({e["tid"] for e in xs if e["pid"] == pid})[:16]
        evs = [e for e in xs if e["pid"] == pid and e["tid"] in tracks]
        t_end = min(max(e["ts"] + e["dur"] for e in evs), min(e["ts"] for e in evs) + 2e6)  # first 2 s at most
        cats = sorted({e.get("name", "").split(" ")[0] for e in evs})
        palette = plt.get_cmap("tab10")
        color = {c: palette(i % 10) for i, c in enumerate(cats)}
        fig, ax = plt.subplots(figsize=(11, 0.45 * len(tracks) + 1.3))
        for row, tid in enumerate(tracks):
            bars = [(e["ts"] / 1e3, e["dur"] / 1e3, color[e.get("name", "").split(" ")[0]]) for e in evs if e["tid"] == tid and e["ts"] <= t_end]
            ax.broken_barh([(s, d) for s, d, _ in bars], (row - 0.4, 0.8), facecolors=[c for _, _, c in bars], linewidth=0)
        ax.set_yticks(range(len(tracks)))
        ax.set_yticklabels([names.get((pid, t), f"track {t}") for t in tracks], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("simulated time (ms)")
        handles = [plt.Rectangle((0, 0), 1, 1, color=color[c]) for c in cats[:10]]
        ax.legend(handles, cats[:10], fontsize=7, loc="upper right", ncol=min(5, len(cats)))
        fig.suptitle(f"Timeline of {names.get((pid, None), 'tracks')}{label} (trace.json)")
        self.save(fig, "timeline" + slug(label), "Iteration timeline" + label,
                  "Each bar is one iteration (prefill, decode or mixed) or pipeline step from trace.json, per track; open trace.json in ui.perfetto.dev for all of it.")

    def availability(self, variants):
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for v in variants:
            sa = v.get("slice_availability", {})
            pts = sorted((eval_shape(k), a) for k, a in sa.items())
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=v.get("variant", "?"))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("slice size (chips)")
        ax.set_ylabel("probability a slice can be placed")
        ax.set_ylim(-0.02, 1.05)
        ax.legend(fontsize=8)
        fig.suptitle("Availability of a slice vs its size")
        self.save(fig, "availability", "Availability curves", "Per placement variant: the fraction of time a healthy slice of that size can be formed.")

    def availability_study(self, rows):
        levels = sorted({float(r["availability"]) for r in rows})
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharex=True)
        colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
        for k, a in enumerate(levels):
            for ocs, ls in (("true", "-"), ("false", "--")):
                pts = sorted((int(r["chips"]), r) for r in rows if float(r["availability"]) == a and r["ocs"] == ocs)
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                name = f"{a * 100:.1f}% {'OCS' if ocs == 'true' else 'static'}"
                for ax, col in zip(axes, ("formable", "goodput")):
                    ax.errorbar(xs, [float(p[1][col + "_mean"]) for p in pts], yerr=[float(p[1][col + "_ci95"]) for p in pts],
                                ls=ls, marker="o", ms=3, capsize=2, color=colors[k % len(colors)], label=name)
        for ax, what in zip(axes, ("fraction of time the slice can be formed", "goodput of a job on the slice")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("slice size (chips)")
            ax.set_ylabel(what)
            ax.set_ylim(-0.02, 1.05)
        axes[1].legend(fontsize=7)
        fig.suptitle("Slice availability and goodput vs host availability: OCS (solid) vs static torus (dashed)")
        self.save(fig, "availability_study", "Availability study",
                  "From availability.csv: per host availability, mean over seeds with 95% confidence intervals; OCS forms a slice from any healthy cubes, the static torus needs a contiguous healthy block.")

    def header(self, metrics):
        """What ran: the scenario, its study, model, hardware, scheduler, topology, seed and the sluice that ran it."""
        sc = metrics.get("scenario", {})
        res = sc.get("resolved", {})
        rows = [["scenario", sc.get("name", "?")], ["study", sc.get("study", "?")]]
        if res.get("description"):
            rows.append(["description", res["description"]])
        cl = res.get("cluster", {}) if isinstance(res.get("cluster"), dict) else {}
        for key, val in (("model", res.get("model")), ("hardware", res.get("hardware", cl.get("hardware"))),
                         ("topology", res.get("topology", cl.get("topology")))):
            if val is not None:
                rows.append([key, describe(val)])
        sched = res.get("scheduler")
        if isinstance(sched, dict) and "kind" in sched:
            rows.append(["scheduler", sched["kind"]])
        dep = res.get("deployment")
        if isinstance(dep, dict):
            rows.append(["deployment", ", ".join(f"{k} {dep[k]}" for k in ("replicas", "tensor_parallel", "pipeline_parallel", "precision") if k in dep)])
        for w in res.get("workloads", []) if isinstance(res.get("workloads"), list) else []:
            if isinstance(w, dict):
                rows.append([f"workload {w.get('name', '?')}", ", ".join(f"{k} {describe(w[k])}" for k in ("kind", "model", "scheduler") if k in w)])
        for v in res.get("variants", []) if isinstance(res.get("variants"), list) else []:
            if isinstance(v, dict):
                rows.append([f"variant {v.get('name', '?')}", describe(v.get("file", v.get("set", "")))])
        rows += [["seed", metrics.get("seed", "?")], ["sluice", metrics.get("sluice_version", "?")], ["scenario hash", sc.get("hash", "?")]]
        self.tables.insert(0, ("What ran", ["", ""], rows))

    def compare(self, d, c):
        """A compare study: a table variants x metrics with units, and one chart per metric across the variants."""
        variants = [v.get("name", f"v{i}") for i, v in enumerate(c.get("variants", []))]
        table = c.get("table", [])
        if not variants or not table:
            return
        head = ["variant"] + [readable(t["metric"]) for t in table]
        rows = [[v] + [fmt(t["values"][i]) if i < len(t["values"]) else "-" for t in table] for i, v in enumerate(variants)]
        self.tables.append((f"Compared: {len(variants)} variants x {len(table)} metrics", head, rows))
        # The energy and cost of each variant, from its own metrics file, where the run priced it.
        erows = []
        for i, v in enumerate(variants):
            vm = load_json(os.path.join(d, f"variant-{i}-{v.replace(',', '-').replace('/', '-')}.metrics.json")) or {}
            if not vm:
                found = [f for f in os.listdir(d) if f.startswith(f"variant-{i}-") and f.endswith(".metrics.json")]
                vm = load_json(os.path.join(d, found[0])) if found else {}
            vm = vm or {}
            w = vm.get("metrics", vm).get("world", {})  # a variant's file holds its metrics alone
            if "energy" in w:
                erows.append([v, fmt(w["energy"]["facility_J"] / 3.6e3), fmt(w["energy"]["average_power_W"] / 1e3),
                              fmt(w["energy"]["peak_power_W"] / 1e3) if "peak_power_W" in w["energy"] else "-", fmt(w["cost"]["usd"]),
                              fmt(w["carbon"]["kg"])])
        if erows:
            self.tables.append(("Energy and cost per variant (the whole cluster)", ["variant", "facility energy (Wh)", "average power (kW)", "peak power (kW)", "cost ($)", "CO2e (kg)"], erows))
        short = [v if len(v) <= 28 else v[:26] + ".." for v in variants]
        for k, t in enumerate(table[:12]):
            vals = [x if isinstance(x, (int, float)) else float("nan") for x in t["values"]]
            fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(variants) + 1.2))
            # The run's error bands, where it has them (compare.table.<k>.values.<i>): drawn as error bars.
            band = [band_of(getattr(self, "bands", {}), f"compare.table.{k}.values.{i}") for i in range(len(vals))]
            err = None
            if all(b is not None for b in band) and vals:
                err = [[max(0.0, x - b["lo"]) for x, b in zip(vals, band)], [max(0.0, b["hi"] - x) for x, b in zip(vals, band)]]
            ax.barh(range(len(vals)), vals, color="#1f77b4", xerr=err, ecolor="#444", capsize=3)
            ax.set_yticks(range(len(vals)))
            ax.set_yticklabels(short, fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel(readable(t["metric"]))
            pos = [x for x in vals if x == x and x > 0]
            if len(pos) == len(vals) and min(pos) > 0 and max(pos) / min(pos) > 100:
                ax.set_xscale("log")  # values over orders of magnitude: each stays readable
            for y, x in enumerate(vals):
                if x == x:
                    ax.annotate(fmt(x), (x, y), fontsize=6, xytext=(2, -2), textcoords="offset points")
            fig.suptitle(readable(t["metric"]) + " across the variants")
            self.save(fig, f"compare-{k:02d}", readable(t["metric"]), f"{t['metric']} for each variant (compare study), in the order the study lists them.")

    def error_bands(self, b):
        """The error bands (docs/BANDS.md): each main figure's 90% interval, its cost and seed parts, drawn relative to the value."""
        main = ("latency_ms.ttft.p50", "latency_ms.ttft.p99", "latency_ms.tpot.p50", "latency_ms.tpot.p99", "latency_ms.e2e.p50",
                "latency_ms.e2e.p99", "throughput.output_tokens_per_s", "throughput.requests_per_s", "iteration_s_mean",
                "tokens_per_s", "latency_s.p50", "latency_s.max", "mfu")
        entries = [e for e in b["metrics"] if e["metric"].endswith(main) and not e["metric"].startswith("world.") and e["value"] > 0][:14]
        if not entries:
            entries = [e for e in b["metrics"] if e["value"] > 0][:14]
        if not entries:
            return
        src = ", ".join(f"{s['source']} x{s['lo']:.3f}-{s['hi']:.3f}" for s in b.get("cost_sources", [])) or "none"
        cov = 100 * b.get("coverage", 0.9)
        rows = [[readable(e["metric"]), fmt(e["value"]), f"{fmt(e['lo'])} - {fmt(e['hi'])}", f"{fmt(e['cost_lo'])} - {fmt(e['cost_hi'])}",
                 f"{fmt(e['seed_lo'])} - {fmt(e['seed_hi'])}", f"{100 * (e['lo'] / e['value'] - 1):+.1f}% / {100 * (e['hi'] / e['value'] - 1):+.1f}%"]
                for e in entries]
        self.tables.append((f"Error bands ({cov:.0f}%): step costs {src}, {b.get('replications', 0)} other seeds",
                            ["figure", "value", f"{cov:.0f}% interval", "cost part", "seed part", "relative"], rows))
        fig, ax = plt.subplots(figsize=(8, 0.36 * len(entries) + 1.4))
        y = list(range(len(entries)))
        rel = lambda e, k: 100 * (e[k] / e["value"] - 1)
        ax.errorbar([rel(e, "cost_lo") / 2 + rel(e, "cost_hi") / 2 for e in entries], [t - 0.15 for t in y],
                    xerr=[[(rel(e, "cost_hi") - rel(e, "cost_lo")) / 2 for e in entries]] * 2, fmt="none", ecolor="#ff7f0e", capsize=3,
                    label="cost model's error")
        ax.errorbar([0] * len(entries), y, xerr=[[rel(e, "seed_hi") for e in entries]] * 2, fmt="none", ecolor="#2ca02c", capsize=3,
                    label="other seeds")
        ax.errorbar([rel(e, "lo") / 2 + rel(e, "hi") / 2 for e in entries], [t + 0.15 for t in y],
                    xerr=[[(rel(e, "hi") - rel(e, "lo")) / 2 for e in entries]] * 2, fmt="none", ecolor="#1f77b4", capsize=3, elinewidth=2,
                    label=f"combined ({cov:.0f}%)")
        ax.axvline(0, color="#222", lw=0.8)
        ax.set_yticks(y)
        ax.set_yticklabels([readable(e["metric"]) for e in entries], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("% of the reported value")
        ax.legend(fontsize=7, loc="lower right")
        sens = b.get("most_sensitive")
        fig.suptitle(f"Error bands: step costs {src}" + (f"; most sensitive: {readable(sens['metric'])} (elasticity {sens['elasticity']:.1f})" if sens else ""), fontsize=8)
        self.save(fig, "error-bands", "Error bands", f"Each figure's {cov:.0f}% interval relative to its value: the cost model's known error "
                  "carried through the run (the run again at both ends of its band), other seeds, and both combined (docs/BANDS.md).")

    def energy_table(self, m, label):
        w = m.get("world", {})
        if "energy" not in w:
            return
        e, c, co = w["energy"], w["cost"], w["carbon"]
        peak = lambda x: fmt(x["peak_power_W"] / 1e3) if "peak_power_W" in x else ""  # (results before sluice recorded it)
        rows = [["the cluster", fmt(e["facility_J"] / 3.6e3), fmt(e["average_power_W"] / 1e3), peak(e), fmt(e["provisioned_power_W"] / 1e3),
                 fmt(c["usd"]), fmt(c["capex_amortised_usd"]), fmt(c["electricity_usd"]), fmt(c["hosting_usd"]), fmt(co["kg"]), "", ""]]
        scopes = [(k, m[k]) for k in ("serving", "training", "diffusion") if k in m] + sorted(m.get("workloads", {}).items())
        for name, s in scopes:
            if not isinstance(s, dict) or "energy" not in s:
                continue
            se, sc = s["energy"], s["cost"]
            per = next((k for k in se if k.startswith("J_per_")), None)
            unit = per[len("J_per_"):] if per else ""
            usd = sc.get(f"usd_per_million_{unit}s") if per else None
            rows.append([name, fmt(se["facility_J"] / 3.6e3), fmt(se["average_power_W"] / 1e3), peak(se), fmt(se["provisioned_power_W"] / 1e3),
                         fmt(sc["usd"]), fmt(sc["capex_amortised_usd"]), fmt(sc["electricity_usd"]), fmt(sc["hosting_usd"]),
                         fmt(s["carbon"]["kg"]), f"{fmt(se[per])} J per {unit.replace('_', ' ')}" if per else "",
                         f"${fmt(usd)} per million {unit.replace('_', ' ')}s" if usd is not None else ""])
        self.tables.append((f"Energy, cost and carbon{label} (PUE {fmt(e['pue'])}; docs/ENERGY.md)",
                            ["", "facility energy (Wh)", "average power (kW)", f"peak power (kW, {fmt(e.get('peak_power_window_s', 1))} s)",
                             "provisioned (kW)", "cost ($)", "capex amortised ($)",
                             "electricity ($)", "hosting ($)", "CO2e (kg)", "energy per unit", "cost per million"], rows))

    def fabric_table(self, m, resolved, label):
        """The world's fabric (routing, its most loaded link, flows) and where each workload was placed."""
        w = m.get("world", {})
        fab, flows = w.get("fabric", {}), w.get("flows", {})
        if not fab and not flows:
            return
        rows = [["topology", w.get("topology", "?")], ["devices", w.get("devices", "?")], ["routing", fab.get("routing", "?")]]
        top = fab.get("most_loaded_link")
        if top:
            rows.append(["most loaded link (bytes over capacity x run time)", f"{top['link']}: {fmt(top['mean_utilization'] * 100)}% of its capacity, {fmt(top['bytes'] / 1e9)} GB"])
        rows.append(["flows below their bottleneck because another shared it", f"{fmt(fab.get('shared_bottleneck_fraction', 0) * 100)}%"])
        rows += [["flows started", flows.get("started", 0)], ["most flows at once", flows.get("max_concurrent", 0)]]
        for wl in resolved.get("workloads", []) if isinstance(resolved.get("workloads"), list) else []:
            if isinstance(wl, dict) and "place" in wl:
                rows.append([f"placement of {wl.get('name', '?')}", describe(wl["place"])])
        self.tables.append((f"Fabric and placement{label}", ["", ""], rows))
        hot = fab.get("hottest_links", [])
        if hot:
            self.tables.append((f"The fabric's hottest links{label} (bytes over capacity x run time)",
                                ["link", "capacity (GB/s)", "carried (GB)", "mean utilization (%)"],
                                [[f"{h['link']} (#{h['id']})", fmt(h["capacity_Bps"] / 1e9), fmt(h["bytes"] / 1e9), fmt(100 * h["mean_utilization"])] for h in hot]))
            fig, ax = plt.subplots(figsize=(8, 0.32 * len(hot) + 1.2))
            ax.barh(range(len(hot)), [100 * h["mean_utilization"] for h in hot], color="#d62728")
            ax.set_yticks(range(len(hot)))
            ax.set_yticklabels([f"{h['link']} (#{h['id']})" for h in hot], fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel("mean utilization over the run (%)")
            for y, h in enumerate(hot):
                ax.annotate(f"{fmt(100 * h['mean_utilization'])}% of {fmt(h['capacity_Bps'] / 1e9)} GB/s", (100 * h["mean_utilization"], y),
                            fontsize=6, xytext=(2, -2), textcoords="offset points")
            fig.suptitle(f"The fabric's hottest links{label}")
            self.save(fig, f"hottest_links{slug(label)}", "Hottest links", "The links busiest for their bandwidth over the run "
                      "(world.fabric.hottest_links: bytes carried over capacity x simulated time), busiest first.")

    def serving_table(self, s, label):
        lat = s.get("latency_ms", {})
        rows = []
        for k in ("ttft", "tpot", "itl_llmperf", "e2e", "inter_token_gap", "queueing_delay"):
            if k in lat:
                rows.append([NAMES.get(k, k.replace("_", " "))] + [fmt(lat[k].get(q)) for q in ("p50", "p90", "p99", "mean", "max")])
        if rows:
            self.tables.append((f"Latency (ms){label}", ["metric", "p50", "p90", "p99", "mean", "max"], rows))
        thr = s.get("throughput", {})
        if thr:
            self.tables.append((f"Throughput{label}", [readable(k) for k in thr.keys()], [[fmt(v) for v in thr.values()]]))

    def topologies(self, resolved):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        catalog = {f[:-5] for f in os.listdir(os.path.join(root, "topologies")) if f.endswith(".yaml")}
        found = []

        def walk(x):
            if isinstance(x, dict):
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)
            elif isinstance(x, str) and x in catalog and x not in found:
                found.append(x)
        walk(resolved)
        for name in found[:3]:
            self.topology(name)

    def topology(self, name):
        if not self.sluice or not shutil.which("dot"):
            return
        dot = os.path.join(self.out, f"topology-{name}.dot")
        subprocess.run([self.sluice, "topo", name, "--dot", dot], check=True, stdout=subprocess.DEVNULL)
        text = open(dot).read()
        if text.count(" -- ") + text.count(" -> ") > 3000:
            self.tables.append((f"Topology {name}", ["note"], [[f"{text.count(' -- ')} links: too many to draw; see {os.path.basename(dot)}"]]))
            return
        links = text.count(" -- ") + text.count(" -> ")
        draw = dot
        if links > 150:
            # Past a few hundred links, per-link labels only hide the shape: drop them.
            draw = dot[:-4] + ".unlabelled.dot"
            with open(draw, "w") as f:
                f.write(re.sub(r'^(\s*\S+ --? \S+) \[label="[^"]*"\];$', r"\1;", text, flags=re.M))
        engine = "neato" if "layout=neato" in text or "torus" in name or "tpu" in name else "dot"
        for ext in ("png", "svg"):
            subprocess.run([engine, f"-T{ext}", "-Gdpi=80", "-Gsize=12,9", draw, "-o", os.path.join(self.out, f"topology-{name}.{ext}")], check=True, timeout=120)
        self.figures.append((f"topology-{name}", f"Topology {name}",
                             f"`sluice topo {name}` ({links} links{', labels dropped' if draw != dot else ''}) drawn by Graphviz {engine}."))

    # ---------------------------------------------------------------- a sweep
    def sweep(self, d):
        s = load_json(os.path.join(d, "sweep.json"))
        keys, rows = s["keys"], s["rows"]
        metrics = s["metrics"]
        thr = pick(metrics, "throughput.output_tokens_per_s")
        lats = [m for m in (pick(metrics, "ttft.p99"), pick(metrics, "e2e.p99"), pick(metrics, "tpot.p99")) if m]
        if thr and lats:
            rate = next((k for k in keys if "rate" in k or "clients" in k), keys[-1] if keys else None)
            others = [k for k in keys if k != rate and k != "seed"]
            fig, axes = plt.subplots(1, len(lats), figsize=(4.2 * len(lats), 3.4))
            axes = axes if len(lats) > 1 else [axes]
            for ax, lat in zip(axes, lats):
                groups = {}
                for r in rows:
                    g = ", ".join(f"{k.split('.')[-1]}={r['keys'][k]}" for k in others) or "all"
                    x, y = r["metrics"].get(thr), r["metrics"].get(lat)
                    if x is not None and y is not None:
                        groups.setdefault(g, {}).setdefault(r["keys"].get(rate, ""), []).append((x, y))
                for g, by_rate in groups.items():
                    pts = sorted((sum(p[0] for p in v) / len(v), sum(p[1] for p in v) / len(v)) for v in by_rate.values())
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=g)
                ax.set_xlabel("throughput (output tok/s)")
                ax.set_ylabel(lat.split("latency_ms.")[-1] + " (ms)")
                ax.set_yscale("log")
                ax.legend(fontsize=7)
            fig.suptitle(f"Throughput vs latency over the sweep ({rate} rising along each curve; mean of replications)")
            self.save(fig, "throughput_latency", "Throughput-latency curves",
                      f"One curve per configuration of {', '.join(others) or 'the sweep'}; each point a value of {rate}.")
        cols = metrics[:8]
        self.tables.append((f"Sweep {s['scenario']}: {len(rows)} points", ["point", "rep"] + keys + [readable(c) for c in cols],
                            [[r["point"], r["replication"]] + [r["keys"][k] for k in keys] + [fmt(r["metrics"].get(c)) for c in cols] for r in rows]))
        if "best" in s:
            self.tables.append(("Best point per objective (where " + " and ".join(s["best"]["where"]) + ")" if s["best"]["where"] else "Best point per objective",
                                ["objective", "value", "point", "configuration"],
                                [[b["objective"], fmt(b.get("value")), b.get("point"), b.get("configuration", "none meets the constraints")]
                                 for b in s["best"]["objectives"]]))
        # One point's own pictures, as an example of one run: the best point of the first
        # objective that has one, else the first point.
        best = next((b.get("point") for b in s.get("best", {}).get("objectives", []) if isinstance(b.get("point"), int)), None)
        point = best if best is not None else 0
        folder = os.path.join(d, "points", f"p{point:04d}")
        if os.path.isdir(folder):
            if best is not None:
                self.tables.append(("The best point, drawn below", ["point", "objective"], [[point, s["best"]["objectives"][0]["objective"]]]))
            self.run(folder, " (best point)" if best is not None else " (point 0)")

    # ---------------------------------------------------------------- a search
    def search(self, d):
        s = load_json(os.path.join(d, "search.json"))
        objs, rows = s["objectives"], s["rows"]
        slo = " and ".join(s["slo"])
        self.tables.append(("Search", ["", ""], [["scenario", s["scenario"]], ["SLO", slo], ["points", s["points"]],
                                                 ["pruned: do not build", s["pruned_does_not_build"]],
                                                 ["pruned: lower bound", s["pruned_lower_bound"]], ["simulated", s["simulated"]],
                                                 ["meet the SLO", s["feasible"]], ["Pareto front", len(s["pareto"])]]))
        by_point = {r["point"]: r for r in rows}
        front = [by_point[p] for p in s["pareto"]]
        best = by_point.get(s["best"]) if s.get("best") is not None else None
        if best:
            front.sort(key=lambda r: (r["point"] != best["point"], [r["objectives"].get(o) or 0 for o in objs]))
        keys = list(rows[0]["keys"].keys()) if rows else []
        if front:
            self.tables.append(("The Pareto front, the best first" if best else "The Pareto front",
                                ["point"] + [k.split(".")[-1] for k in keys] + [readable(o) for o in objs],
                                [[r["point"]] + [r["keys"][k] for k in keys] + [fmt(r["objectives"].get(o)) for o in objs] for r in front]))
        else:
            self.tables.append(("No configuration meets the SLO", ["point", "status", "why"],
                                [[r["point"], r["status"], r["why"]] for r in rows[:40]]))
        if objs and len(objs) >= 2:
            pairs = [(objs[0], o) for o in objs[1:3]]
            fig, axes = plt.subplots(1, len(pairs), figsize=(5.6 * len(pairs), 4))
            axes = axes if len(pairs) > 1 else [axes]
            for ax, (xo, yo) in zip(axes, pairs):
                for status, color, mk, lab in (("misses the SLO", "#bbbbbb", "o", "misses the SLO"), ("meets the SLO", "#1f77b4", "o", "meets the SLO")):
                    pts = [(r["objectives"].get(xo), r["objectives"].get(yo)) for r in rows if r["status"] == status]
                    pts = [p for p in pts if p[0] is not None and p[1] is not None]
                    if pts:
                        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=18, color=color, marker=mk, label=f"{lab} ({len(pts)})")
                fp = sorted((r["objectives"].get(xo), r["objectives"].get(yo)) for r in front if r["objectives"].get(xo) is not None)
                if fp:
                    ax.scatter([p[0] for p in fp], [p[1] for p in fp], s=40, facecolors="none", edgecolors="#d62728", label="Pareto front")
                if best and best["objectives"].get(xo) is not None:
                    ax.scatter([best["objectives"][xo]], [best["objectives"][yo]], s=160, marker="*", color="#d62728", label=f"best (point {best['point']})")
                # A constraint on a drawn metric, drawn as its limit.
                for c in s["slo"]:
                    m = re.match(r"^\s*([\w.]+)\s*(<=|<)\s*([0-9.eE+-]+)\s*(ms|s|us)?\s*$", c)
                    if m and yo.endswith(m.group(1)) and "latency_ms" in yo:
                        v = float(m.group(3)) * {"ms": 1, "s": 1e3, "us": 1e-3, None: 1}[m.group(4)]
                        ax.axhline(v, ls="--", color="#d62728", lw=0.8)
                        ax.annotate(f"SLO {c.strip()}", (ax.get_xlim()[0], v), fontsize=7, color="#d62728", xytext=(3, 3), textcoords="offset points")
                ys = [r["objectives"].get(yo) for r in rows if r["objectives"].get(yo)]
                if ys and min(ys) > 0 and max(ys) / min(ys) > 100:
                    ax.set_yscale("log")  # a backlog's seconds beside a served point's milliseconds
                ax.set_xlabel(readable(xo))
                ax.set_ylabel(readable(yo))
                ax.legend(fontsize=7)
            fig.suptitle(f"Search {s['scenario']}: every simulated point, the front and the best ({slo})")
            self.save(fig, "search_front", "Pareto front", f"Each simulated point by the first objective against the others; pruned points ({s['pruned_does_not_build']} do not build, {s['pruned_lower_bound']} excluded by the TPOT bound) are not drawn.")
        if best:
            folder = os.path.join(d, "points", f"p{best['point']:04d}")
            if os.path.isdir(folder):
                self.run(folder, " (best point)")

    # ---------------------------------------------------------------- the page
    def page(self, title):
        parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>"
                 "body{font-family:sans-serif;max-width:1200px;margin:1em auto;color:#222}"
                 "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
                 "th{background:#f0f0f0}figure{margin:1em 0 2em}img{max-width:100%;border:1px solid #eee}figcaption{font-size:12px;color:#555}"
                 "</style></head><body>", f"<h1>{html.escape(title)}</h1>", f"<p>source: <code>{html.escape(self.src)}</code></p>"]
        for t, head, rows in self.tables:
            parts.append(f"<h2>{html.escape(t)}</h2><div style='overflow-x:auto'><table><tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in head) + "</tr>")
            for r in rows[:200]:
                parts.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>")
            parts.append("</table></div>")
        for name, t, cap in self.figures:
            data = base64.b64encode(open(os.path.join(self.out, name + ".png"), "rb").read()).decode()
            parts.append(f"<figure><h2>{html.escape(t)}</h2><img alt='{html.escape(t)}' src='data:image/png;base64,{data}'>"
                         f"<figcaption>{html.escape(cap)} (files: {name}.png, {name}.svg)</figcaption></figure>")
        parts.append("</body></html>\n")
        with open(os.path.join(self.out, "index.html"), "w") as f:
            f.write("\n".join(parts))


def load_json(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_csv(p):
    try:
        with open(p, newline="") as f:
            return list(csv.DictReader(f))
    except OSError:
        return None


def pick(metrics, suffix):
    return next((m for m in metrics if m.endswith(suffix)), None)


def band_of(bands, metric):
    return next((e for e in (bands or {}).get("metrics", []) if e.get("metric") == metric), None)


def fmt(v):
    return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E", "itl_llmperf": "ITL (llmperf)", "kv_cache": "KV cache", "slo": "SLO",
         "mfu": "MFU", "tp_allreduce_ms_mean": "TP all-reduce mean"}


def readable(metric):
    """A metric path as a column header: its scope dropped, snake_case as words, its unit in brackets."""
    parts = metric.split(".")
    if parts[0] in ("serving", "training", "diffusion", "world", "metrics") and len(parts) > 1:
        parts = parts[1:]
    if parts[0] == "workloads" and len(parts) > 2:
        parts = parts[2:]
    unit = ""
    if "latency_ms" in parts:
        parts.remove("latency_ms")
        unit = "ms"
    last = parts[-1]
    for suffix, u in (("_per_s", "/s"), ("_usd", "$"), ("_J", "J"), ("_W", "W"), ("_ms", "ms"), ("_s", "s"), ("_bytes", "bytes")):
        if last.endswith(suffix) and not unit:
            unit = u
            parts[-1] = last[: -len(suffix)] + (" per s" if suffix == "_per_s" else "")
            break
    words = " ".join(NAMES.get(p, p.replace("_", " ")) for p in parts)
    return f"{words} ({unit})" if unit else words


def describe(v):
    if isinstance(v, dict):
        if not any(k in v for k in ("catalog", "kind", "name")):
            return ", ".join(f"{k}: {describe(x)}" for k, x in v.items())[:120]
        return v.get("catalog", v.get("kind", v.get("name", json.dumps(v)[:60])))
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)[:80]
    return str(v)


def slug(label):
    return "".join(c for c in label if c.isalnum()).lower() and "-" + "".join(c for c in label if c.isalnum()).lower()


def eval_shape(s):
    n = 1
    for p in s.split("x"):
        n *= int(p)
    return n


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    src, out = argv[1], argv[2]
    is_search = os.path.exists(os.path.join(src, "search.json"))
    is_sweep = os.path.exists(os.path.join(src, "sweep.json"))
    if not is_search and not is_sweep and not os.path.exists(os.path.join(src, "metrics.json")):
        # Checked before anything is created (sluice report checks this too, and more).
        print(f"report: {src} holds neither metrics.json (a run) nor sweep.json (a sweep)", file=sys.stderr)
        return 2
    r = Report(src, out)
    r.sluice = argv[argv.index("--sluice") + 1] if "--sluice" in argv else shutil.which("sluice")
    if is_search:
        r.search(src)
        title = "sluice search report"
    elif is_sweep:
        r.sweep(src)
        title = "sluice sweep report"
    else:
        r.run(src)
        study = ((load_json(os.path.join(src, "metrics.json")) or {}).get("scenario", {}) or {}).get("study", "run")
        title = f"sluice {study} report"
    r.page(f"{title}: {os.path.basename(os.path.normpath(src))}")
    for name, t, _ in r.figures:
        print(f"  {name}.png / .svg  {t}")
    print(f"  index.html ({len(r.figures)} pictures, {len(r.tables)} tables)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
