#include "run/check.h"
#include "run/bands.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "config/names.h"
#include "config/paths.h"
#include "config/units.h"
#include "recorder/output_dir.h"
#include "run/runner.h"
#include "run/scenario.h"

#ifndef SLUICE_VERSION
#define SLUICE_VERSION "dev"
#endif

namespace sluice {

namespace fs = std::filesystem;

namespace {

double parse_fraction(const Node& v, const std::string& path) {
  std::string s = v.is_scalar() ? v.scalar : "";
  double scale = 1;
  if (!s.empty() && s.back() == '%') {
    s.pop_back();
    scale = 0.01;
  }
  try {
    size_t used = 0;
    const double x = std::stod(s, &used) * scale;
    if (used == s.size() && x >= 0 && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError(v.origin, path, v.brief(), "expected a non-negative number", "e.g. 0.05 or 5% (relative), 2 (absolute)");
}

std::vector<Tolerance> parse_tolerances(const Node& list, const std::string& path) {
  if (!list.is_seq())
    throw ConfigError(list.origin, path, list.brief(), "expected a list of tolerances",
                      "e.g. [{metric: '*.ttft.p99', relative: 5%, worse: higher}]");
  std::vector<Tolerance> out;
  for (size_t i = 0; i < list.seq.size(); ++i) {
    const Node& t = list.seq[i];
    const std::string at = fmt::format("{}.{}", path, i);
    if (!t.is_map()) throw ConfigError(t.origin, at, t.brief(), "expected a mapping", "{metric, relative and/or absolute, worse}");
    Tolerance tol;
    bool has_metric = false, has_tol = false;
    for (size_t k = 0; k < t.map.size(); ++k) {
      const auto& [key, v] = t.map[k];
      if (key == "metric") {
        if (!v.is_scalar() || v.scalar.empty()) throw ConfigError(v.origin, at + ".metric", v.brief(), "expected a metric path or glob", "e.g. '*.latency_ms.ttft.p99'");
        tol.pattern = v.scalar;
        has_metric = true;
      } else if (key == "relative") {
        tol.relative = parse_fraction(v, at + ".relative");
        has_tol = true;
      } else if (key == "absolute") {
        tol.absolute = parse_fraction(v, at + ".absolute");
        has_tol = true;
      } else if (key == "band") {
        if (!v.is_scalar() || (v.scalar != "true" && v.scalar != "false"))
          throw ConfigError(v.origin, at + ".band", v.brief(), "whether the baseline's error band also passes", "true or false");
        tol.band = v.scalar == "true";
        has_tol = has_tol || tol.band;
      } else if (key == "worse") {
        if (!v.is_scalar() || (v.scalar != "higher" && v.scalar != "lower" && v.scalar != "either"))
          throw ConfigError(v.origin, at + ".worse", v.brief(), "which direction is a regression", "one of: higher, lower, either");
        tol.worse = v.scalar == "higher" ? Worse::Higher : v.scalar == "lower" ? Worse::Lower : Worse::Either;
      } else {
        const std::string hint = closest(key, {"metric", "relative", "absolute", "worse", "band"});
        throw ConfigError(t.key_origins[k], at + "." + key, key, hint.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", hint),
                          "one of: metric, relative, absolute, worse, band");
      }
    }
    if (!has_metric) throw ConfigError(t.origin, at + ".metric", "", "a tolerance needs the metric it applies to", "e.g. metric: '*.ttft.p99'");
    if (!has_tol) throw ConfigError(t.origin, at, "", "a tolerance needs relative, absolute or band", "e.g. relative: 5%");
    out.push_back(tol);
  }
  return out;
}

std::vector<Published> parse_published(const Node& list, const std::string& path) {
  if (!list.is_seq() || list.seq.empty())
    throw ConfigError(list.origin, path, list.brief(), "expected a list of published figures",
                      "e.g. [{metric: diffusion.latency_s.max, value: 4.30, tolerance: 2%, figure: ..., source: ...}]");
  std::vector<Published> out;
  const std::vector<std::string> keys{"metric", "value", "tolerance", "figure", "source", "known_gap", "note"};
  for (size_t i = 0; i < list.seq.size(); ++i) {
    const Node& t = list.seq[i];
    const std::string at = fmt::format("{}.{}", path, i);
    if (!t.is_map()) throw ConfigError(t.origin, at, t.brief(), "expected a mapping", "{metric, value, tolerance, figure, source[, known_gap, note]}");
    Published p;
    bool has_value = false, has_tol = false;
    for (size_t k = 0; k < t.map.size(); ++k) {
      const auto& [key, v] = t.map[k];
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        const std::string hint = closest(key, keys);
        throw ConfigError(t.key_origins[k], at + "." + key, key, hint.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", hint),
                          "one of: metric, value, tolerance, figure, source, known_gap, note");
      }
      if (key == "value") {
        const auto x = v.is_scalar() ? parse_real(v.scalar) : std::nullopt;
        if (!x || !std::isfinite(*x) || *x == 0)
          throw ConfigError(v.origin, at + ".value", v.brief(), "expected the published value, a non-zero number", "e.g. 4.30");
        p.value = *x;
        has_value = true;
      } else if (key == "tolerance") {
        p.tolerance = parse_fraction(v, at + ".tolerance");
        has_tol = true;
      } else {
        if (!v.is_scalar() || v.scalar.empty()) throw ConfigError(v.origin, at + "." + key, v.brief(), "expected a non-empty string", key);
        (key == "metric"   ? p.metric
         : key == "figure" ? p.figure
         : key == "source" ? p.source
         : key == "note"   ? p.note
                           : p.known_gap) = v.scalar;
      }
    }
    for (const char* need : {"metric", "figure", "source"})
      if ((std::string(need) == "metric" ? p.metric : std::string(need) == "figure" ? p.figure : p.source).empty())
        throw ConfigError(t.origin, at + "." + need, "", fmt::format("a published figure needs its {}", need), "metric, value, tolerance, figure, source");
    if (!has_value || !has_tol)
      throw ConfigError(t.origin, at + (has_value ? ".tolerance" : ".value"), "", "a published figure needs its value and tolerance", "e.g. value: 4.30, tolerance: 2%");
    out.push_back(std::move(p));
  }
  return out;
}

const Tolerance* tolerance_for(const std::string& metric, const CheckEntry& e, const Suite& s) {
  for (const auto& t : e.tolerances)
    if (glob_match(t.pattern, metric)) return &t;
  for (const auto& t : s.tolerances)
    if (glob_match(t.pattern, metric)) return &t;
  return nullptr;
}

std::string describe(const Tolerance& t) {
  std::string s;
  if (t.relative > 0) s += fmt::format("{:g}%", t.relative * 100);
  if (t.absolute > 0) s += (s.empty() ? "" : " or ") + fmt::format("{:g}", t.absolute);
  if (t.band) s += (s.empty() ? "" : " or ") + std::string("the baseline's band");
  if (s.empty()) s = "0";
  return s + (t.worse == Worse::Higher ? ", higher worse" : t.worse == Worse::Lower ? ", lower worse" : ", any change");
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') o += ' ';
        else o += c;
    }
  }
  return o;
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& path) {
  // Iterative '*' matching with backtracking to the last star.
  size_t p = 0, s = 0, star = std::string::npos, mark = 0;
  while (s < path.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = s;
    } else if (p < pattern.size() && pattern[p] == path[s]) {
      ++p;
      ++s;
    } else if (star != std::string::npos) {
      p = star + 1;
      s = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Suite load_suite(const std::string& file, const Registry& reg, const std::vector<std::string>& extra_sets) {
  Node root = load_yaml_file(file);
  if (!root.is_map()) throw ConfigError(root.origin, "", root.brief(), "a suite must be a YAML mapping", "keys: suite, description, baselines, tolerances, scenarios");
  Suite s;
  s.file = file;
  s.name = fs::path(file).stem().string();
  const fs::path dir = fs::path(file).parent_path();
  const Node* scenarios = nullptr;
  std::string baselines;
  for (size_t k = 0; k < root.map.size(); ++k) {
    const auto& [key, v] = root.map[k];
    if (key == "suite" || key == "description" || key == "baselines") {
      if (!v.is_scalar()) throw ConfigError(v.origin, key, v.brief(), "expected a string", "a name or a path");
      (key == "suite" ? s.name : key == "description" ? s.description : baselines) = v.scalar;
    } else if (key == "tolerances") {
      s.tolerances = parse_tolerances(v, key);
    } else if (key == "scenarios") {
      scenarios = &v;
    } else if (key == "bands") {
      const auto n = v.is_scalar() ? parse_int(v.scalar) : std::nullopt;
      if (!n || *n < 0 || *n > 64)
        throw ConfigError(v.origin, key, v.brief(), "expected how many other seeds the published figures' error bands run",
                          "an integer in [0, 64] (0: the cost model's part only)");
      s.published_bands = static_cast<int>(*n);
    } else {
      const std::string hint = closest(key, {"suite", "description", "baselines", "tolerances", "scenarios", "bands"});
      throw ConfigError(root.key_origins[k], key, key, hint.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", hint),
                        "one of: suite, description, baselines, tolerances, scenarios, bands");
    }
  }
  // The suite's name names its folder of baselines (results/baselines/<suite>/), so it may not
  // reach outside it; one taken from the file name is made safe.
  const Node* suite_key = root.find("suite");
  if (!suite_key) s.name = sanitized_name(s.name);
  if (const std::string why = name_problem(s.name, NameUse::FileStem); !why.empty())
    throw ConfigError(suite_key ? suite_key->origin : root.origin, "suite", s.name,
                      why + " (a suite's name names its folder of baselines)", name_rule(NameUse::FileStem));
  s.baselines = baselines.empty() ? (fs::path(catalog_root()) / "results" / "baselines" / s.name).string() : (dir / baselines).string();
  if (!scenarios || !scenarios->is_seq() || scenarios->seq.empty())
    throw ConfigError(scenarios ? scenarios->origin : root.origin, "scenarios", scenarios ? scenarios->brief() : "", "a suite needs a list of scenarios",
                      "e.g. scenarios: [{file: ../quickstart.yaml}]");
  for (size_t i = 0; i < scenarios->seq.size(); ++i) {
    const Node& e = scenarios->seq[i];
    const std::string at = fmt::format("scenarios.{}", i);
    if (!e.is_map()) throw ConfigError(e.origin, at, e.brief(), "expected a mapping", "{name, file, set, tolerances}");
    CheckEntry entry;
    const Node* file_node = nullptr;
    const Node* name_node = nullptr;
    for (size_t k = 0; k < e.map.size(); ++k) {
      const auto& [key, v] = e.map[k];
      if (key == "name" || key == "file") {
        if (!v.is_scalar()) throw ConfigError(v.origin, at + "." + key, v.brief(), "expected a string", key == "file" ? "a scenario file" : "a name");
        if (key == "name") entry.name = v.scalar, name_node = &v;
        else file_node = &v;
      } else if (key == "set") {
        entry.sets = string_list(v, at + ".set", "e.g. [scheduler.kind=vllm]");
      } else if (key == "tolerances") {
        entry.tolerances = parse_tolerances(v, at + ".tolerances");
      } else if (key == "published") {
        entry.published = parse_published(v, at + ".published");
      } else {
        const std::string hint = closest(key, {"name", "file", "set", "tolerances", "published"});
        throw ConfigError(e.key_origins[k], at + "." + key, key, hint.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", hint),
                          "one of: name, file, set, tolerances, published");
      }
    }
    if (!file_node) throw ConfigError(e.origin, at + ".file", "", "every suite entry names a scenario file", "e.g. file: ../quickstart.yaml");
    // Relative to the suite file first, then the working directory and the sluice root.
    entry.shown = file_node->scalar;
    const fs::path beside = dir / file_node->scalar;
    if (fs::path(file_node->scalar).is_relative() && path_is_regular_file(beside)) entry.file = beside.lexically_normal().string();
    else if (auto found = find_input_path(file_node->scalar)) entry.file = *found;
    else
      throw ConfigError(file_node->origin, at + ".file", file_node->scalar, "scenario file not found (relative to the suite file, the working directory or the sluice root)",
                        "an existing scenario file");
    // An entry's name names its baseline file (<entry>.json).
    if (!name_node) entry.name = sanitized_name(fs::path(entry.file).stem().string());
    if (const std::string why = name_problem(entry.name, NameUse::FileStem); !why.empty())
      throw ConfigError(name_node ? name_node->origin : e.origin, at + ".name", entry.name, why + " (it names the entry's baseline file)",
                        name_rule(NameUse::FileStem));
    for (const auto& other : s.entries)
      if (other.name == entry.name)
        throw ConfigError(e.origin, at + ".name", entry.name, "two entries share this name (it names the baseline file)", "distinct names");
    for (const auto& x : extra_sets) entry.sets.push_back(x);
    try {
      load_scenario(entry.file, entry.sets, reg);
    } catch (const ConfigError& err) {
      throw ConfigError(e.origin, at, entry.name, fmt::format("this scenario is invalid: {}", err.what()), "a scenario that validates on its own");
    }
    s.entries.push_back(std::move(entry));
  }
  return s;
}

int CheckReport::regressions() const {
  int n = static_cast<int>(failed_entries.size());
  for (const auto& c : checks) n += c.failed();
  for (const auto& v : validation) n += v.failed();
  return n;
}

namespace {
std::string fmt_value(double x) { return fmt::format("{:.4g}", x); }
std::string fmt_error(const ValidationCheck& v) { return v.verdict == "missing" ? "-" : fmt::format("{:+.1f}%", 100 * v.error); }
}  // namespace

std::string CheckReport::validation_markdown(const Suite& s) const {
  int pass = 0, fail = 0, gaps = 0, banded = 0, inside = 0;
  for (const auto& v : validation) {
    (v.failed() ? fail : v.verdict == "pass" ? pass : gaps) += 1;
    banded += v.banded, inside += v.inside_band();
  }
  std::string out = fmt::format(
      "# Validation against published figures\n\n"
      "Generated by `sluice check {} --markdown docs/VALIDATION.md` (a test fails when this page is stale); "
      "CI runs the same suite. Each row is one published figure (sources restated in `docs/REFERENCES.md`), the "
      "metric of the scenario that reproduces it, and the relative tolerance it must meet. A known gap is a figure "
      "sluice does not reproduce yet: it is listed with its reason and does not fail the suite.\n\n"
      "{} figures: {} within tolerance, {} known gaps, {} failing.{}\n\n"
      "| figure | source | scenario | metric | published | sluice | sluice's 90% band | error | tolerance | verdict |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
      relative_to_root(s.file), validation.size(), pass, gaps, fail,
      s.published_bands < 0 ? std::string()
                            : fmt::format(" {} of the {} figures whose metric carries an error band (docs/BANDS.md: the cost model's "
                                          "measured error carried through the run) lie inside sluice's 90% band; the band says how far "
                                          "sluice's own prediction may be off, so a gap outside it is one the cost model's known error does "
                                          "not explain.",
                                          inside, banded));
  for (const auto& v : validation) {
    std::string shown;
    for (const auto& e : s.entries)
      if (e.name == v.entry) {
        shown = "`" + relative_to_root(e.file) + "`";
        for (const auto& set : e.sets) shown += " `" + set + "`";
      }
    const std::string band = v.banded ? fmt::format("{} – {}: published {}", fmt_value(v.band_lo), fmt_value(v.band_hi), v.inside_band() ? "inside" : "outside") : "-";
    out += fmt::format("| {} | {} | {} | `{}` | {} | {} | {} | {} | {:g}% | {}{} |\n", v.figure.figure, v.figure.source, shown, v.figure.metric,
                       fmt_value(v.figure.value), v.verdict == "missing" ? "-" : fmt_value(v.now), band, fmt_error(v), 100 * v.figure.tolerance,
                       v.verdict, (v.figure.known_gap.empty() ? "" : ": " + v.figure.known_gap) + (v.figure.note.empty() ? "" : ". " + v.figure.note));
  }
  return out;
}

std::string CheckReport::table() const {
  std::string head;
  if (!validation.empty()) {
    head += fmt::format("{:<44}  {:>10}  {:>10}  {:>8}  {:>6}  {}\n", "published figure", "published", "sluice", "error", "tol", "verdict");
    for (const auto& v : validation) {
      const std::string fig = v.figure.figure.size() > 44 ? v.figure.figure.substr(0, 43) + "…" : v.figure.figure;
      head += fmt::format("{:<44}  {:>10}  {:>10}  {:>8}  {:>5g}%  {}{}\n", fig, fmt_value(v.figure.value), v.verdict == "missing" ? "-" : fmt_value(v.now),
                          fmt_error(v), 100 * v.figure.tolerance, v.verdict,
                          v.banded ? fmt::format(" (sluice's 90% band {}-{}: published {})", fmt_value(v.band_lo), fmt_value(v.band_hi),
                                                 v.inside_band() ? "inside" : "outside")
                                   : "");
    }
    if (checks.empty() && failed_entries.empty()) {
      for (const auto& n : notes) head += "note: " + n + "\n";
      return head;
    }
  }
  std::vector<const MetricCheck*> moved;
  for (const auto& c : checks)
    if (c.verdict != "ok" || c.now != c.baseline) moved.push_back(&c);
  std::string out;
  if (moved.empty()) {
    out += fmt::format("nothing moved: {} metrics equal their baselines\n", checks.size());
  } else {
    size_t we = 8, wm = 6;
    for (const auto* c : moved) {
      we = std::max(we, std::min<size_t>(c->entry.size(), 24));
      wm = std::max(wm, std::min<size_t>(c->metric.size(), 44));
    }
    auto clip = [](const std::string& s, size_t w) { return s.size() > w ? "…" + s.substr(s.size() - w + 1) : s; };
    out += fmt::format("{:<{}}  {:<{}}  {:>12}  {:>12}  {:>9}  {:<22}  {}\n", "scenario", we, "metric", wm, "baseline", "now", "change",
                       "tolerance", "verdict");
    for (const auto* c : moved) {
      const bool has = c->verdict != "missing" && c->verdict != "new";
      std::string change = "-";
      if (has && c->baseline != 0) change = fmt::format("{:+.2f}%", 100 * (c->now - c->baseline) / std::fabs(c->baseline));
      else if (has) change = fmt::format("{:+.3g}", c->now - c->baseline);
      const std::string verdict = c->failed() ? "REGRESSION" + std::string(c->verdict == "missing" ? " (missing)"
                                                                             : c->verdict == "new" ? " (not in the baseline)"
                                                                                                   : "")
                                              : c->verdict;
      out += fmt::format("{:<{}}  {:<{}}  {:>12}  {:>12}  {:>9}  {:<22}  {}\n", clip(c->entry, we), we, clip(c->metric, wm), wm,
                         c->verdict == "new" ? "-" : fmt::format("{:.6g}", c->baseline), c->verdict == "missing" ? "-" : fmt::format("{:.6g}", c->now),
                         change, c->tolerance, verdict);
    }
    out += fmt::format("{} of {} checked metrics moved\n", moved.size(), checks.size());
  }
  for (const auto& n : notes) out += "note: " + n + "\n";
  return head + out;
}

std::string CheckReport::junit(const Suite& s) const {
  // One <testsuite> per scenario, one <testcase> per checked metric.
  std::string body;
  size_t total = 0;
  int failures = 0;
  std::vector<std::string> names;
  for (const auto& e : s.entries) names.push_back(e.name);
  for (size_t i = 0; i < names.size(); ++i) {
    std::string cases;
    size_t n = 0;
    int f = 0;
    const bool no_baseline = std::find(failed_entries.begin(), failed_entries.end(), names[i]) != failed_entries.end();
    if (no_baseline) {
      cases += fmt::format("    <testcase classname=\"{0}.{1}\" name=\"baseline\" time=\"0\">\n      <failure type=\"missing\" message=\"no baseline for {1}: run sluice check --update\"/>\n    </testcase>\n",
                           xml_escape(s.name), xml_escape(names[i]));
      ++n;
      ++f;
    }
    for (const auto& v : validation) {
      if (v.entry != names[i]) continue;
      ++n;
      cases += fmt::format("    <testcase classname=\"{}.{}\" name=\"{}\" time=\"0\"", xml_escape(s.name), xml_escape(v.entry), xml_escape(v.figure.figure));
      const std::string msg = fmt::format("{}: published {:.6g}, sluice {}, tolerance {:g}%{}", v.figure.metric, v.figure.value,
                                          v.verdict == "missing" ? std::string("missing") : fmt::format("{:.6g}", v.now), 100 * v.figure.tolerance,
                                          (v.figure.known_gap.empty() ? "" : " (known gap: " + v.figure.known_gap + ")") +
                                              (v.figure.note.empty() ? "" : " (note: " + v.figure.note + ")"));
      if (v.failed()) {
        ++f;
        cases += fmt::format(">\n      <failure type=\"published\" message=\"{}\"/>\n    </testcase>\n", xml_escape(msg));
      } else {
        cases += fmt::format(">\n      <system-out>{}: {}</system-out>\n    </testcase>\n", xml_escape(v.verdict), xml_escape(msg));
      }
    }
    for (const auto& c : checks) {
      if (c.entry != names[i]) continue;
      ++n;
      cases += fmt::format("    <testcase classname=\"{}.{}\" name=\"{}\" time=\"0\"", xml_escape(s.name), xml_escape(c.entry), xml_escape(c.metric));
      if (c.failed()) {
        ++f;
        const std::string msg = c.verdict == "missing" ? fmt::format("{} is missing (baseline {:.6g})", c.metric, c.baseline)
                                : c.verdict == "new" ? fmt::format("{} = {:.6g} is not in the baseline (re-baseline with --update)", c.metric, c.now)
                                                     : fmt::format("{}: baseline {:.6g}, now {:.6g}, tolerance {}", c.metric, c.baseline, c.now, c.tolerance);
        cases += fmt::format(">\n      <failure type=\"regression\" message=\"{}\"/>\n    </testcase>\n", xml_escape(msg));
      } else {
        cases += fmt::format(">\n      <system-out>{}: baseline {:.6g}, now {:.6g}</system-out>\n    </testcase>\n", xml_escape(c.verdict), c.baseline, c.now);
      }
    }
    const double secs = i < entry_seconds.size() ? entry_seconds[i] : 0;
    body += fmt::format("  <testsuite name=\"{}.{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{:.3f}\">\n{}  </testsuite>\n",
                        xml_escape(s.name), xml_escape(names[i]), n, f, secs, cases);
    total += n;
    failures += f;
  }
  return fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"sluice check {}\" tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"{:.3f}\">\n{}</testsuites>\n",
                     xml_escape(s.name), total, failures, seconds, body);
}

namespace {

// A stored baseline, read and checked before anything is simulated: a file that is not what
// `sluice check --update` writes (not JSON, not an object, metrics that are not an object of
// numbers, none at all) fails the check with the file and the reason, never passes it.
std::optional<Json> load_baseline(const fs::path& file, const CheckEntry& e, const Suite& suite) {
  if (!path_exists(file)) return std::nullopt;
  const Origin at{file.string(), 0, 0};
  auto bad = [&](const std::string& key, const std::string& value, const std::string& problem) {
    return ConfigError(at, key, value, "corrupt baseline: " + problem,
                       fmt::format("a file written by `sluice check --update` for entry '{}' (run it again to rewrite this one)", e.name));
  };
  if (!path_is_regular_file(file)) throw bad("", "", "not a regular file");
  Json base;
  try {
    base = Json::parse(slurp(file));
  } catch (const std::exception& ex) {
    throw bad("", "", fmt::format("not valid JSON: {}", ex.what()));
  }
  if (!base.is_object()) throw bad("", base.dump().substr(0, 40), fmt::format("the top level is a JSON {}, not an object", base.type_name()));
  const auto m = base.find("metrics");
  if (m == base.end()) throw bad("metrics", "", "it has no `metrics` object");
  if (!m->is_object()) throw bad("metrics", m->dump().substr(0, 40), fmt::format("`metrics` is a JSON {}, not an object", m->type_name()));
  if (m->empty()) throw bad("metrics", "{}", "`metrics` is empty, so nothing would be checked");
  for (auto it = m->begin(); it != m->end(); ++it)
    if (!it.value().is_number() || !std::isfinite(it.value().get<double>()))
      throw bad("metrics." + it.key(), it.value().dump().substr(0, 40), fmt::format("the value is a JSON {}, not a finite number", it.value().type_name()));
  // A baseline none of whose metrics a tolerance covers would check nothing: that is no pass.
  bool any = false;
  for (auto it = m->begin(); it != m->end() && !any; ++it) any = tolerance_for(it.key(), e, suite) != nullptr;
  if (!any) throw bad("metrics", "", "none of its metrics is one the suite's tolerances check");
  const auto en = base.find("entry");
  if (en == base.end()) throw bad("entry", "", fmt::format("it names no entry (a baseline of '{}' says so)", e.name));
  if (!(en->is_string() && en->get<std::string>() == e.name))
    throw bad("entry", en->dump().substr(0, 40), fmt::format("it is the baseline of another entry, not of '{}'", e.name));
  if (const Json* h = json_path(base, "scenario.hash"); h && !h->is_string()) throw bad("scenario.hash", h->dump().substr(0, 40), "the hash is not a string");
  if (const auto b = base.find("bands"); b != base.end()) {
    if (!b->is_object()) throw bad("bands", b->dump().substr(0, 40), "`bands` is not an object of [lo, hi] pairs");
    for (auto it = b->begin(); it != b->end(); ++it) {
      const Json& v = it.value();
      if (!(v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number() && std::isfinite(v[0].get<double>()) &&
            std::isfinite(v[1].get<double>()) && v[0].get<double>() <= v[1].get<double>()))
        throw bad("bands." + it.key(), v.dump().substr(0, 40), "a band is [lo, hi], two finite numbers with lo <= hi");
    }
  }
  return base;
}

}  // namespace

CheckReport run_check(const Suite& suite, const Registry& reg, int threads, bool update) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = suite.entries.size();
  std::vector<std::optional<Json>> baselines(n);
  for (size_t i = 0; i < n; ++i) {
    if (!suite.entries[i].published.empty()) continue;  // checked against published figures, not a baseline
    const fs::path file = fs::path(suite.baselines) / (suite.entries[i].name + ".json");
    if (!update) {
      baselines[i] = load_baseline(file, suite.entries[i], suite);
      continue;
    }
    // --update replaces earlier baselines of the same entry, never a file of someone else's.
    if (!fs::exists(fs::symlink_status(file))) continue;
    Json old;
    try {
      old = Json::parse(slurp(file));
    } catch (const std::exception&) {
    }
    const bool ours = path_is_regular_file(file) && old.is_object() && old.contains("metrics") && old.value("entry", Json()) == suite.entries[i].name;
    if (!ours)
      throw OutputError(fmt::format("'{}' is not a sluice baseline of entry '{}'; --update never replaces a file it did not write "
                                    "(choose another --baselines, or remove it yourself)", file.string(), suite.entries[i].name));
  }
  std::vector<Json> metrics(n), hashes(n), bands(n);
  std::vector<double> secs(n, 0);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      const auto s0 = std::chrono::steady_clock::now();
      try {
        Scenario sc = load_scenario(suite.entries[i].file, suite.entries[i].sets, reg);
        Recorder rec;
        run_into(sc, rec, {});
        metrics[i] = Json::parse(rec.metrics().dump());
        hashes[i] = sc.hash;
        // Bands: for a baseline (the scenario asks for them), or for published figures (the suite does).
        const bool published = !suite.entries[i].published.empty();
        const int reps = published ? suite.published_bands : update ? sc.band_replications : -1;
        if (reps >= 0) {
          std::vector<std::string> warnings;
          bands[i] = error_bands(BandRequest{suite.entries[i].file, suite.entries[i].sets, sc.seed, reps, 1}, metrics[i], reg, warnings);
        }
      } catch (...) {
        errors[i] = std::current_exception();
      }
      secs[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    }
  };
  std::vector<std::thread> pool;
  const int nt = std::max(1, std::min<int>(threads, static_cast<int>(n)));
  for (int t = 1; t < nt; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);

  CheckReport rep;
  rep.entry_seconds = secs;
  for (size_t i = 0; i < n; ++i) {
    const CheckEntry& e = suite.entries[i];
    std::vector<std::pair<std::string, double>> leaves;
    numeric_leaves(metrics[i], "", leaves);
    if (!e.published.empty()) {
      // A published figure: the metric against its value, within the relative tolerance.
      std::map<std::string, double> now(leaves.begin(), leaves.end());
      for (const auto& p : e.published) {
        ValidationCheck v;
        v.entry = e.name;
        v.figure = p;
        const auto found = now.find(p.metric);
        if (found == now.end() || !std::isfinite(found->second)) {
          v.verdict = "missing";
        } else {
          v.now = found->second;
          v.error = (v.now - p.value) / std::fabs(p.value);
          const bool within = std::fabs(v.error) <= p.tolerance;
          v.verdict = within ? (p.known_gap.empty() ? "pass" : "pass (was a known gap)") : p.known_gap.empty() ? "FAIL" : "known gap";
          if (const Json* b = bands[i].is_null() ? nullptr : find_band(bands[i], p.metric)) {
            v.banded = true;
            v.band_lo = (*b)["lo"].get<double>(), v.band_hi = (*b)["hi"].get<double>();
          }
        }
        rep.validation.push_back(std::move(v));
      }
      continue;
    }
    const fs::path file = fs::path(suite.baselines) / (e.name + ".json");
    if (update) {
      Json m = Json::object();
      for (const auto& [k, v] : leaves)
        if (tolerance_for(k, e, suite)) m[k] = v;
      Json doc{{"suite", suite.name},
               {"entry", e.name},
               {"scenario", Json{{"file", e.shown}, {"set", e.sets}, {"hash", hashes[i]}}},
               {"sluice_version", SLUICE_VERSION},
               {"metrics", m}};
      if (!bands[i].is_null()) {  // each checked metric's band, for tolerances with `band: true`
        Json b = Json::object();
        for (const auto& [k, v] : leaves)
          if (tolerance_for(k, e, suite))
            if (const Json* x = find_band(bands[i], k)) b[k] = Json::array({(*x)["lo"], (*x)["hi"]});
        if (!b.empty()) doc["bands"] = b;
      }
      write_file_atomically(file.string(), doc.dump(1) + "\n");
      rep.notes.push_back(fmt::format("{}: baseline written to {} ({} metrics)", e.name, file.string(), m.size()));
      continue;
    }
    if (!baselines[i]) {
      rep.failed_entries.push_back(e.name);
      rep.notes.push_back(fmt::format("{}: no baseline ({}); run `sluice check {} --update` to create it", e.name, file.string(), suite.file));
      continue;
    }
    const Json& base = *baselines[i];
    const Json* bh = json_path(base, "scenario.hash");
    if (bh && bh->get<std::string>() != hashes[i].get<std::string>())
      rep.notes.push_back(fmt::format("{}: the scenario differs from the baseline's (hash {} then, {} now): its inputs changed, not only the code",
                                      e.name, bh->get<std::string>().substr(0, 8), hashes[i].get<std::string>().substr(0, 8)));
    const Json& bm = base["metrics"];
    std::map<std::string, double> now(leaves.begin(), leaves.end());
    for (auto it = bm.begin(); it != bm.end(); ++it) {
      const Tolerance* t = tolerance_for(it.key(), e, suite);
      if (!t) continue;
      MetricCheck c;
      c.entry = e.name;
      c.metric = it.key();
      c.baseline = it.value().get<double>();
      c.tolerance = describe(*t);
      auto found = now.find(it.key());
      if (found == now.end() || !std::isfinite(found->second)) {
        c.verdict = "missing";
      } else {
        c.now = found->second;
        const double d = c.now - c.baseline, tol = std::max(t->absolute, t->relative * std::fabs(c.baseline));
        bool up = d > tol, down = -d > tol;
        if (t->band) {
          const Json* b = json_path(base, "bands");
          const auto band = b && b->contains(it.key()) ? &(*b)[it.key()] : nullptr;
          if (!band) {
            c.tolerance += " (the baseline has no band for it)";
          } else {
            const double lo = (*band)[0].get<double>(), hi = (*band)[1].get<double>();
            c.tolerance += fmt::format(" [{:.6g}, {:.6g}]", lo, hi);
            if (c.now >= lo && c.now <= hi) up = down = false;
          }
        }
        const bool bad = t->worse == Worse::Higher ? up : t->worse == Worse::Lower ? down : (up || down);
        c.verdict = bad ? "regression" : (up || down) ? "improved" : "ok";
      }
      rep.checks.push_back(c);
    }
    for (const auto& [k, v] : leaves)
      if (!bm.contains(k) && tolerance_for(k, e, suite)) {
        MetricCheck c;
        c.entry = e.name;
        c.metric = k;
        c.now = v;
        c.verdict = "new";
        c.tolerance = describe(*tolerance_for(k, e, suite));
        rep.checks.push_back(c);
      }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace sluice
