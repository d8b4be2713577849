// The metrics glossary: every key a run writes into metrics.json, its unit and what it means.
// It lives beside the recorder that writes the file; `sluice list metrics` prints it,
// docs/METRICS.md is generated from it, and a test walks every shipped scenario's metrics
// and fails on a key the glossary does not define (or an entry that matches no key).
#pragma once
#include <span>
#include <string>
#include <string_view>

namespace sluice {

// One entry. `path` is a dotted key path inside metrics.json's `metrics` object (or inside the
// file's header, for scope "run"): `*` stands for any one name (a workload, a class, a
// variant), `[]` after a key for every element of its array. Scopes:
//   "serving", "training", "diffusion": `path` is relative to a workload's report, which sits
//       at `<scope>.` in a single-workload run and at `workloads.<name>.` in a world;
//   "run": a key of the header (schema_version, scenario.hash, ...);
//   "": a full path (world.*, compare.*, the studies' own keys).
// `summary` marks a distribution summary object (count, mean, min, p25, p50, p75, p90, p95,
// p99, max, stddev, or the subset a streamed histogram keeps): the entry covers its fields.
struct MetricDef {
  const char* scope;
  const char* path;
  const char* unit;     // "ms", "s", "bytes", "tokens/s", "fraction" (0..1), "count", "text", ...
  const char* meaning;  // one or two plain sentences
  bool summary = false;
};

// Every entry, in the order the glossary prints them.
std::span<const MetricDef> metric_glossary();

// The entry that defines `path` (a concrete key path, array indices written `[]`, e.g.
// "workloads.chat.latency_ms.ttft.p99" or "serving.replicas[].utilization"); `header` looks in
// scope "run" only. `kind` ("serving", "training", "diffusion"), when given, is the kind of the
// workload a `workloads.<name>.` path belongs to: only that scope's entries are tried (without
// it, the best fit of the three). nullptr when none does.
const MetricDef* find_metric(std::string_view path, bool header = false, std::string_view kind = {});

// The glossary as a Markdown page (docs/METRICS.md).
std::string metric_glossary_markdown();

// The entry tables, one per file (recorder/glossary_*.cpp).
std::span<const MetricDef> serving_metric_defs();
std::span<const MetricDef> training_metric_defs();
std::span<const MetricDef> other_metric_defs();  // run header, world, diffusion, studies, compare
std::span<const MetricDef> energy_metric_defs();  // a workload's share of energy, cost and carbon

}  // namespace sluice
