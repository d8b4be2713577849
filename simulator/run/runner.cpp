#include "run/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include "config/names.h"
#include "recorder/csv_format.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice {

std::string default_run_dir(const Scenario& sc) {
  return fmt::format("results/{}/seed{}-{}", sc.name, sc.seed, sc.hash.substr(0, 8));
}

namespace {

// What a metric's name says it is: a fraction of a whole (in [0, 1]), a quantity that cannot be
// negative (a latency, delay, duration, size or count), or neither (a gap to a published figure,
// an error, a difference). Decided by its key and its parents' keys.
enum class MetricKind { Fraction, NonNegative, Free };

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

MetricKind metric_kind(const std::vector<std::string>& path) {
  for (const auto& k : path)
    if (has(k, "gap") || has(k, "error") || has(k, "delta") || has(k, "diff") || has(k, "change") || has(k, "ci95") ||
        has(k, "published") || has(k, "vs_") || has(k, "_vs") || has(k, "ratio") || has(k, "gain") || has(k, "speedup") ||
        has(k, "slope") || has(k, "log"))
      return MetricKind::Free;
  for (const auto& k : path)
    if (has(k, "utilization") || has(k, "availability") || has(k, "occupancy") || has(k, "fraction") || k == "mfu" ||
        k == "goodput" || k == "goodput_mean")
      return MetricKind::Fraction;
  for (const auto& k : path)
    if (has(k, "ttft") || has(k, "tpot") || has(k, "e2e") || has(k, "itl") || has(k, "latency") || has(k, "delay") ||
        has(k, "queue") || has(k, "wait") || has(k, "duration") || has(k, "time") || has(k, "bytes") || has(k, "tokens") ||
        has(k, "requests") || has(k, "count") || has(k, "iterations") || k.ends_with("_ms") || k.ends_with("_s") ||
        k.ends_with("_ns") || k.ends_with("_h"))
      return MetricKind::NonNegative;
  return MetricKind::Free;
}

void check_metrics(const Json& doc, std::vector<std::string>& path) {
  if (doc.is_number()) {
    const double v = doc.get<double>();
    auto where = [&] {
      std::string s;
      for (const auto& k : path) s += (s.empty() ? "" : ".") + k;
      return s;
    };
    switch (metric_kind(path)) {
      case MetricKind::Fraction:
        if (!(v >= 0 && v <= 1))
          throw std::logic_error(fmt::format("metric invariant broken: {} = {} is a fraction outside [0, 1]", where(), v));
        break;
      case MetricKind::NonNegative:
        if (!(v >= 0)) throw std::logic_error(fmt::format("metric invariant broken: {} = {} is negative (a time, size or count)", where(), v));
        break;
      case MetricKind::Free:
        break;
    }
  } else if (doc.is_object()) {
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      path.push_back(it.key());
      check_metrics(it.value(), path);
      path.pop_back();
    }
  } else if (doc.is_array()) {
    for (const auto& e : doc) check_metrics(e, path);
  }
}

}  // namespace

void check_metric_invariants(const Json& metrics) {
  std::vector<std::string> path;
  check_metrics(metrics, path);
}

Json run_into(Scenario& sc, Recorder& rec, const std::function<void(double)>& progress) {
  RunEnv env{rec, progress};
  sc.world->run(env);
  // Every figure a run reports is checked before anything is written: fractions within [0, 1],
  // no negative time, size or count (a study that computes one is wrong, whatever the cause).
  check_metric_invariants(rec.metrics());
  Json header = Json::object();
  header["schema_version"] = Recorder::kSchemaVersion;
  header["sluice_version"] = SLUICE_VERSION;
  header["run_id"] = fmt::format("seed{}-{}", sc.seed, sc.hash.substr(0, 8));
  header["seed"] = sc.seed;
  header["scenario"] = Json{{"name", sc.name}, {"study", sc.study->name}, {"hash", sc.hash}, {"resolved", node_to_json(sc.resolved)}};
  return header;
}

const Json* json_path(const Json& doc, const std::string& dotted) {
  const Json* cur = &doc;
  size_t start = 0;
  while (start <= dotted.size()) {
    const size_t dot = dotted.find('.', start);
    const std::string key = dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur->is_object()) {
      auto it = cur->find(key);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array()) {
      auto idx = key.empty() ? std::string::npos : key.find_first_not_of("0123456789");
      if (key.empty() || idx != std::string::npos) return nullptr;
      const size_t i = std::stoul(key);
      if (i >= cur->size()) return nullptr;
      cur = &(*cur)[i];
    } else {
      return nullptr;
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

void numeric_leaves(const Json& doc, const std::string& prefix, std::vector<std::pair<std::string, double>>& out) {
  if (doc.is_number()) {
    out.emplace_back(prefix, doc.get<double>());
  } else if (doc.is_object()) {
    for (auto it = doc.begin(); it != doc.end(); ++it) numeric_leaves(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (doc.is_array() && doc.size() <= 64) {
    for (size_t i = 0; i < doc.size(); ++i) numeric_leaves(doc[i], fmt::format("{}.{}", prefix, i), out);
  }
}

std::vector<Variant> expand_variants(const std::vector<std::string>& files, const std::vector<std::string>& base_sets,
                                     const std::vector<std::string>& vary) {
  std::vector<Variant> out;
  for (const auto& f : files) out.push_back(Variant{std::filesystem::path(f).stem().string(), f, base_sets, f});
  for (const auto& axis : vary) {
    const auto eq = axis.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(Origin{"--vary", 0, 0}, axis, "", "a varied key needs the form key=v1,v2,...", "e.g. --vary scheduler.kind=vllm,orca");
    const std::string key = axis.substr(0, eq);
    std::vector<std::string> values;
    size_t start = eq + 1;
    while (start <= axis.size()) {
      const size_t c = axis.find(',', start);
      values.push_back(axis.substr(start, c == std::string::npos ? std::string::npos : c - start));
      if (c == std::string::npos) break;
      start = c + 1;
    }
    std::vector<Variant> next;
    for (const auto& v : out)
      for (const auto& val : values) {
        Variant w = v;
        // Names carry the values only (the varied keys head the table): "150/s,vllm".
        const bool first_axis = w.name == std::filesystem::path(w.file).stem().string() && files.size() == 1;
        w.name = (first_axis ? std::string() : w.name + ",") + val;
        w.sets.push_back(key + "=" + val);
        next.push_back(std::move(w));
      }
    out = std::move(next);
  }
  return out;
}

void compare_variants(const std::vector<Variant>& variants, std::vector<std::string> metrics, const Registry& reg,
                      Recorder& rec, const std::function<void(double)>& progress) {
  // Validate every variant before simulating any; then build, run and drop one at a time,
  // so memory does not grow with the number of variants.
  std::vector<std::string> hashes, studies;
  for (const auto& v : variants) {
    const Scenario sc = load_scenario(v.file, v.sets, reg);
    hashes.push_back(sc.hash);
    studies.push_back(sc.study->name);
  }
  std::vector<Json> results;
  for (size_t i = 0; i < variants.size(); ++i) {
    Scenario sc = load_scenario(variants[i].file, variants[i].sets, reg);
    Recorder sub;
    run_into(sc, sub, [&](double f) {
      if (progress) progress((static_cast<double>(i) + f) / static_cast<double>(variants.size()));
    });
    results.push_back(sub.metrics());
  }
  if (metrics.empty()) {
    std::vector<std::pair<std::string, double>> leaves;
    numeric_leaves(results.front(), "", leaves);
    for (auto& [k, _] : leaves) metrics.push_back(k);
  } else {
    // A metric named by a unique ending of a path (ttft.p99) means that path.
    std::vector<std::pair<std::string, double>> leaves;
    for (const auto& r : results) numeric_leaves(r, "", leaves);
    for (auto& m : metrics) {
      std::string hit;
      bool exact = false, unique = true;
      for (const auto& [k, _] : leaves) {
        if (k == m) exact = true;
        else if (k.size() > m.size() && k.compare(k.size() - m.size(), m.size(), m) == 0 && k[k.size() - m.size() - 1] == '.') {
          if (!hit.empty() && hit != k) unique = false;
          hit = k;
        }
      }
      if (!exact && unique && !hit.empty()) m = hit;
    }
  }
  // A metric no variant has (a typo) was an empty column and exit 0.
  for (const auto& m : metrics) {
    bool found = false;
    for (const auto& r : results) found |= json_path(r, m) != nullptr && json_path(r, m)->is_number();
    if (!found) {
      std::vector<std::pair<std::string, double>> leaves;
      numeric_leaves(results.front(), "", leaves);
      std::vector<std::string> names;
      for (auto& [k, _] : leaves) names.push_back(k);
      const std::string hint = closest(m, names);
      throw ConfigError(Origin{"--metric", 0, 0}, "--metric", m,
                        hint.empty() ? "no variant has this numeric metric" : fmt::format("no variant has this numeric metric (did you mean '{}'?)", hint),
                        "a dotted path into metrics.json, e.g. serving.latency_ms.ttft.p99");
    }
  }
  Json table = Json::array();
  std::string csv = "metric";
  // By append: GCC 12's -Wstringop-overflow misfires on "," + std::string&&.
  for (const auto& v : variants) {
    csv += ',';
    csv += csv::field(v.name);
  }
  for (size_t i = 1; i < variants.size(); ++i) {
    csv += ',';
    csv += csv::field(fmt::format("ratio {}/{}", variants[i].name, variants[0].name));
  }
  csv += "\n";
  // Variants of one file show it once, as the base, and then only what each one sets.
  auto shown = [](const Variant& v) { return v.shown.empty() ? v.file : v.shown; };
  const bool one_file = std::all_of(variants.begin(), variants.end(), [&](const Variant& v) { return shown(v) == shown(variants[0]); });
  if (one_file) rec.summary(fmt::format("base    {}", shown(variants[0])));
  for (const auto& v : variants) {
    std::string sets;
    for (const auto& x : v.sets) sets += (sets.empty() ? "" : " ") + x;
    std::string line = fmt::format("variant {:<24} {}{}", v.name, one_file ? "" : shown(v), sets.empty() ? "" : (one_file ? "--set " : " --set ") + sets);
    while (line.back() == ' ') line.pop_back();
    rec.summary(line);
  }
  if (std::any_of(studies.begin(), studies.end(), [&](const std::string& x) { return x != studies[0]; })) {
    std::string which;
    for (size_t i = 0; i < variants.size(); ++i) which += (i ? ", " : "") + variants[i].name + ": " + studies[i];
    rec.summary(fmt::format("note: these variants run unlike studies ({}); only the metrics they share compare, the rest show '-'", which));
  }
  size_t width = 10;
  for (const auto& v : variants) width = std::max(width, std::min<size_t>(v.name.size(), 24));
  const bool show_ratios = variants.size() <= 4;
  // The on-screen table wraps its variant columns to the terminal's width (COLUMNS, else the
  // tty's); compare.csv and metrics.json always hold every column.
  size_t term = 0;
  if (const char* c = std::getenv("COLUMNS")) term = static_cast<size_t>(std::max(0, std::atoi(c)));
  winsize ws{};
  if (term == 0 && ::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) term = ws.ws_col;
  size_t name_w = 6;
  for (const auto& m : metrics) name_w = std::max(name_w, std::min<size_t>(m.size(), 44));
  const size_t fixed = name_w + (show_ratios ? std::max<size_t>(21, 9 * (variants.size() - 1)) : 26);  // the ratios or the trailer
  const size_t per_block = term == 0 ? variants.size() : std::max<size_t>(1, (term > fixed ? term - fixed : 0) / (width + 1));
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> ratio_text;
  for (const auto& m : metrics) {
    Json row = Json::object();
    row["metric"] = m;
    Json vals = Json::array();
    std::vector<double> nums;
    std::string line;
    names.push_back(m.size() > 44 ? "…" + m.substr(m.size() - 43) : m);
    cells.emplace_back();
    csv += m;
    for (const auto& r : results) {
      const Json* x = json_path(r, m);
      if (x && x->is_number()) {
        nums.push_back(x->get<double>());
        vals.push_back(*x);
        csv += fmt::format(",{}", x->get<double>());
        cells.back().push_back(fmt::format(" {:>{}.6g}", x->get<double>(), width));
      } else {
        nums.push_back(std::nan(""));
        vals.push_back(nullptr);
        csv += ",";
        cells.back().push_back(fmt::format(" {:>{}}", "-", width));
      }
    }
    Json ratios = Json::array();
    for (size_t i = 1; i < nums.size(); ++i) {
      const bool ok = std::isfinite(nums[i]) && std::isfinite(nums[0]) && nums[0] != 0;
      const double r = ok ? nums[i] / nums[0] : std::nan("");
      ratios.push_back(ok ? Json(r) : Json(nullptr));
      csv += ok ? fmt::format(",{:.6g}", r) : ",";
      if (ok && show_ratios) line += fmt::format(" {:>7.3f}x", r);
    }
    csv += "\n";
    row["values"] = vals;
    row["ratios_to_first"] = ratios;
    table.push_back(row);
    ratio_text.push_back(line);
  }
  for (size_t from = 0; from < variants.size(); from += per_block) {
    const size_t to = std::min(variants.size(), from + per_block);
    const bool last = to == variants.size();
    if (from > 0) rec.summary("");
    std::string header = fmt::format("{:<{}}", "metric", name_w);
    for (size_t i = from; i < to; ++i)
      header += fmt::format(" {:>{}}", variants[i].name.size() > width ? variants[i].name.substr(0, width) : variants[i].name, width);
    if (last) header += show_ratios ? "   ratio to the first" : "   (ratios in compare.csv)";
    else header += fmt::format("   ({}-{} of {})", from + 1, to, variants.size());
    rec.summary(header);
    for (size_t r = 0; r < names.size(); ++r) {
      std::string line = fmt::format("{:<{}}", names[r], name_w);
      for (size_t i = from; i < to; ++i) line += cells[r][i];
      rec.summary(line + (last ? ratio_text[r] : ""));
    }
  }
  Json vs = Json::array();
  for (size_t i = 0; i < variants.size(); ++i)
    vs.push_back(Json{{"name", variants[i].name}, {"file", variants[i].shown.empty() ? variants[i].file : variants[i].shown}, {"set", variants[i].sets},
                      {"scenario_hash", hashes[i]}});
  rec.metrics()["compare"] = Json{{"variants", vs}, {"table", table}};
  rec.file("compare.csv", csv);
  for (size_t i = 0; i < variants.size(); ++i)  // a file name of the variant's name made safe (and at most 64 characters)
    rec.file(fmt::format("variant-{}-{}.metrics.json", i, sanitized_name(variants[i].name)), results[i].dump(2) + "\n");
}

}  // namespace sluice
