#include "run/sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "config/paths.h"
#include "recorder/csv_format.h"
#include "recorder/output_dir.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "engine/rng.h"

namespace sluice {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> scalar_list(const Node& n, const std::string& path) {
  if (!n.is_seq() || n.seq.empty())
    throw ConfigError(n.origin, path, n.brief(), "expected a non-empty list of values", "e.g. [vllm, sarathi] or [50/s, 100/s]");
  std::vector<std::string> out;
  for (const auto& e : n.seq) {
    if (!e.is_scalar()) throw ConfigError(e.origin, path, e.brief(), "a swept value must be a scalar", "e.g. 100/s, vllm, 8");
    out.push_back(e.scalar);
  }
  return out;
}

std::vector<SweepAxis> axes_of(const Node& n, const std::string& path) {
  if (!n.is_map())
    throw ConfigError(n.origin, path, n.brief(), "expected a mapping of key: [values]", "e.g. {scheduler.kind: [vllm, orca]}");
  std::vector<SweepAxis> out;
  for (size_t i = 0; i < n.map.size(); ++i) {
    const auto& [k, v] = n.map[i];
    out.push_back(SweepAxis{k, scalar_list(v, path + "." + k), n.key_origins[i]});
  }
  return out;
}

// A CSV field: quoted when it holds a separator, a quote or a newline.

std::string fmt_num(double v) { return std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

// The unit a metric path carries in its name (latency_ms -> ms), as a factor to seconds.
std::optional<double> path_unit_s(const std::string& path) {
  static const std::vector<std::pair<std::string, double>> units = {{"_ns", 1e-9}, {"_us", 1e-6}, {"_ms", 1e-3}, {"_s", 1}};
  size_t start = 0;
  std::optional<double> found;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string seg = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    for (const auto& [suf, f] : units)
      if (seg.size() > suf.size() && seg.compare(seg.size() - suf.size(), suf.size(), suf) == 0) found = f;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return found;
}

}  // namespace

bool SweepConstraint::ok(double x) const {
  if (!std::isfinite(x)) return false;
  if (op == "<") return x < value;
  if (op == "<=") return x <= value;
  if (op == ">") return x > value;
  if (op == ">=") return x >= value;
  if (op == "==") return x == value;
  return x != value;
}

// `paths` null: the form alone is checked (before any point has run, the metric names are not
// known yet); the metric's name and its unit are checked once they are.
SweepConstraint parse_constraint(const std::string& text, const std::vector<std::string>* paths) {
  const Origin o{"--where", 0, 0};
  const size_t at = text.find_first_of("<>=!");
  if (at == std::string::npos || at == 0)
    throw ConfigError(o, "where", text, "a constraint needs the form METRIC OP VALUE", "e.g. --where 'ttft.p99<200ms' (ops < <= > >= == !=)");
  std::string op = text.substr(at, text.size() > at + 1 && text[at + 1] == '=' ? 2 : 1);
  if (op == "=" || op == "!")
    throw ConfigError(o, "where", text, fmt::format("unknown comparison '{}'", op), "one of < <= > >= == !=");
  auto trim = [](std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
    return s;
  };
  SweepConstraint c;
  c.text = text;
  c.op = op;
  c.metric = trim(text.substr(0, at));
  if (c.metric.empty())
    throw ConfigError(o, "where", text, "a constraint needs the form METRIC OP VALUE", "e.g. --where 'ttft.p99<200ms' (ops < <= > >= == !=)");
  if (paths) c.metric = resolve_metric(c.metric, *paths, "--where");
  const std::string rhs = trim(text.substr(at + op.size()));
  size_t used = 0;
  try {
    c.value = std::stod(rhs, &used);
  } catch (const std::exception&) {
    throw ConfigError(o, "where", text, fmt::format("'{}' is not a number", rhs), "a number, optionally with a time unit (200ms, 1.5s)");
  }
  const std::string unit = trim(rhs.substr(used));
  if (!unit.empty()) {
    static const std::map<std::string, double> to_s = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600}};
    auto u = to_s.find(unit);
    const auto pu = path_unit_s(c.metric);
    if (u == to_s.end())
      throw ConfigError(o, "where", text, fmt::format("unknown unit '{}'", unit), "a time unit: ns, us, ms, s, min, h (or none)");
    if (!paths) return c;
    if (!pu)
      throw ConfigError(o, "where", text, fmt::format("metric {} carries no time unit in its name", c.metric), "a plain number");
    c.value = c.value * u->second / *pu;
  }
  return c;
}

// An objective's direction and metric name ("min:ttft.p99", or a name alone).
std::pair<std::string, std::string> split_objective(const std::string& o) {
  const auto colon = o.find(':');
  std::string dir = colon == std::string::npos ? "" : o.substr(0, colon);
  std::string name = colon == std::string::npos ? o : o.substr(colon + 1);
  if (!dir.empty() && dir != "min" && dir != "max")
    throw ConfigError(Origin{"--objective", 0, 0}, "objective", o, fmt::format("unknown direction '{}'", dir), "min:METRIC or max:METRIC");
  if (name.empty()) throw ConfigError(Origin{"--objective", 0, 0}, "objective", o, "no metric named", "min:METRIC or max:METRIC");
  return {dir, name};
}

bool is_lower_better(const std::string& metric) {
  for (const char* w : {"latency", "ttft", "tpot", "e2e", "itl", "time", "_ms", "_s.", "delay", "preempt", "rejected", "capex", "cost",
                        "_J", "J_per", "energy", "power", "carbon"})
    if (metric.find(w) != std::string::npos) return true;
  return false;
}

void check_sweep_spec_form(const SweepSpec& spec) {
  for (const auto& w : spec.where) parse_constraint(w, nullptr);
  for (const auto& o : spec.objectives) split_objective(o);
  for (const auto& m : spec.metrics)
    if (m.empty()) throw ConfigError(Origin{"--metric", 0, 0}, "metric", m, "an empty metric name", "a metric path, e.g. ttft.p99");
}

SweepSpec parse_sweep_block(const Node& block, const std::string& name) {
  if (!block.is_map())
    throw ConfigError(block.origin, name, block.brief(), "expected a mapping", "keys: grid, zip, replications, seeds, metrics, objective, where");
  SweepSpec s;
  for (size_t i = 0; i < block.map.size(); ++i) {
    const auto& [k, v] = block.map[i];
    const std::string path = name + "." + k;
    if (k == "grid") {
      s.grid = axes_of(v, path);
    } else if (k == "zip") {
      s.zip = axes_of(v, path);
    } else if (k == "replications") {
      long long n = 0;
      try {
        size_t used = 0;
        n = v.is_scalar() ? std::stoll(v.scalar, &used) : 0;
        if (used != v.scalar.size()) n = 0;
      } catch (const std::exception&) {
        n = 0;
      }
      if (n < 1 || n > 100000) throw ConfigError(v.origin, path, v.brief(), "expected a whole number of replications", "an integer in [1, 100000]");
      s.replications = static_cast<int>(n);
    } else if (k == "seeds") {
      if (!v.is_scalar() || (v.scalar != "point" && v.scalar != "common"))
        throw ConfigError(v.origin, path, v.brief(), "unknown seed mode",
                          "point (derived from the base seed, the point and the replication) or common (base seed and replication only)");
      s.seeds = v.scalar == "point" ? SeedMode::Point : SeedMode::Common;
    } else if (k == "metrics") {
      s.metrics = string_list(v, path, "e.g. [ttft.p99, throughput.output_tokens_per_s]", true);
    } else if (k == "objective") {
      s.objectives = string_list(v, path, "e.g. [min:ttft.p99]", true);
    } else if (k == "where") {
      s.where = string_list(v, path, "e.g. ['ttft.p99<200ms']", true);
    } else {
      const std::string hint = closest(k, {"grid", "zip", "replications", "seeds", "metrics", "objective", "where"});
      throw ConfigError(block.key_origins[i], path, k, hint.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", hint),
                        "one of: grid, zip, replications, seeds, metrics, objective, where");
    }
  }
  size_t zip_len = 0;
  for (const auto& a : s.zip) {
    if (zip_len && a.values.size() != zip_len)
      throw ConfigError(a.origin, name + ".zip." + a.key, fmt::format("{} values", a.values.size()),
                        fmt::format("zipped axes go in lockstep, and an earlier one has {} values", zip_len), "lists of equal length");
    zip_len = a.values.size();
  }
  return s;
}

SweepAxis parse_axis(const std::string& text, const std::string& flag) {
  const Origin o{flag, 0, 0};
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw ConfigError(o, text, "", "an axis needs the form key=v1,v2,...", fmt::format("e.g. {} scheduler.kind=vllm,orca", flag));
  SweepAxis a{text.substr(0, eq), {}, o};
  size_t start = eq + 1;
  for (;;) {
    const size_t c = text.find(',', start);
    a.values.push_back(text.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (a.values.back().empty()) throw ConfigError(o, a.key, text, "an empty value", "comma-separated values, e.g. 50/s,100/s");
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return a;
}

void merge_axes(std::vector<SweepAxis>& into, const std::vector<SweepAxis>& extra) {
  for (const auto& e : extra) {
    auto it = std::find_if(into.begin(), into.end(), [&](const SweepAxis& a) { return a.key == e.key; });
    if (it != into.end()) *it = e;
    else into.push_back(e);
  }
}

uint64_t derive_seed(uint64_t base_seed, const std::vector<std::pair<std::string, std::string>>& values, int replication, SeedMode mode) {
  uint64_t x = splitmix64(base_seed ^ 0x5357454550ULL);  // "SWEEP"
  if (mode == SeedMode::Point)
    for (const auto& [k, v] : values) x = splitmix64(x ^ fnv1a(k + "=" + v));
  x = splitmix64(x ^ static_cast<uint64_t>(replication));
  return x % 9000000000000000ULL;  // the scenario's seed range
}

namespace {
uint64_t seed_value(const std::string& v, const Origin& at) {
  try {
    size_t used = 0;
    const unsigned long long x = std::stoull(v, &used);
    if (used == v.size() && v.find('-') == std::string::npos && x < 9000000000000000ULL) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError(at, "seed", v, "a swept seed must be a whole number", "an integer in [0, 9e15)");
}
// A sweep writes into its directory piece by piece (points/, sweep.csv, sweep.json) and
// resumes there, so the directory is claimed before any point runs: a new one is made and
// marked, an empty one is marked, one a sweep marked is resumed; anything else (a user's
// folder, a file, a symbolic link) is refused, so no user's sweep.csv is ever replaced.
void claim_sweep_dir(const std::string& out) {
  constexpr const char* kMarker = ".sluice-sweep";
  const fs::path dir(out);
  std::error_code ec;
  const auto st = fs::symlink_status(dir, ec);
  auto refuse = [&](const std::string& why) {
    throw OutputError(fmt::format("the sweep directory '{}' {}; sluice never writes over what it did not create (choose another --out)", out, why));
  };
  if (fs::exists(st)) {
    if (fs::is_symlink(st)) refuse("is a symbolic link");
    if (!fs::is_directory(st)) refuse("exists and is not a directory");
    if (path_is_regular_file(dir / kMarker)) {
      for (const char* f : {"sweep.csv", "sweep.json"})
        if (fs::exists(fs::symlink_status(dir / f, ec)) && !fs::is_regular_file(fs::symlink_status(dir / f, ec)))
          refuse(fmt::format("holds a {} that is not a regular file", f));
      return;  // an earlier sweep's: resumed
    }
    if (!fs::is_empty(dir, ec) || ec) {
      // Another rank of the same sweep (mpirun) may have made the directory and its marker
      // between the two looks above: look at the marker once more before refusing.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (path_is_regular_file(dir / kMarker)) return;
      refuse(fmt::format("is not empty and is not a sluice sweep (no {} in it)", kMarker));
    }
  } else {
    fs::create_directories(dir, ec);
    if (ec) refuse(fmt::format("cannot be created: {}", ec.message()));
  }
  std::ofstream(dir / kMarker) << "a sluice sweep: sweep.csv, sweep.json and points/ are written and resumed here\n";
  if (!path_is_regular_file(dir / kMarker)) refuse("cannot be written into");
}

}  // namespace

std::vector<SweepPoint> expand_sweep(const SweepSpec& spec, uint64_t base_seed, const std::vector<std::string>& base_sets) {
  Origin seed_at;
  for (const auto* axes : {&spec.grid, &spec.zip})
    for (const auto& a : *axes) {
      if (a.key == "seed") seed_at = a.origin;
      for (const auto* other : {&spec.grid, &spec.zip})
        for (const auto& b : *other)
          if (&a != &b && a.key == b.key)
            throw ConfigError(b.origin, a.key, "", "this key is swept twice (in grid and zip, or twice in one)", "each key on one axis");
    }
  // An absurd grid is refused before its points are made (each point is a simulation).
  {
    double points = std::max(1, spec.replications);
    for (const auto& a : spec.grid) points *= static_cast<double>(a.values.size());
    if (!spec.zip.empty()) points *= static_cast<double>(spec.zip.front().values.size());
    if (points > static_cast<double>(kMaxSweepPoints)) {
      std::string sizes;
      for (const auto& a : spec.grid) sizes += fmt::format("{}{} ({} values)", sizes.empty() ? "" : " x ", a.key, a.values.size());
      if (!spec.zip.empty()) sizes += fmt::format("{}zip ({} values)", sizes.empty() ? "" : " x ", spec.zip.front().values.size());
      if (spec.replications > 1) sizes += fmt::format(" x {} replications", spec.replications);
      const Origin at = !spec.grid.empty() ? spec.grid.front().origin : !spec.zip.empty() ? spec.zip.front().origin : Origin{};
      throw ConfigError(at, "sweep", fmt::format("{:.3g} points", points), fmt::format("{} make more points than a sweep may run", sizes),
                        fmt::format("at most {} points (each is a simulation)", kMaxSweepPoints));
    }
  }
  // Configurations: the product of the grid axes and the zip (as one axis).
  std::vector<std::vector<std::pair<std::string, std::string>>> configs{{}};
  for (const auto& a : spec.grid) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& c : configs)
      for (const auto& v : a.values) {
        auto d = c;
        d.emplace_back(a.key, v);
        next.push_back(std::move(d));
      }
    configs = std::move(next);
  }
  if (!spec.zip.empty()) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& c : configs)
      for (size_t j = 0; j < spec.zip.front().values.size(); ++j) {
        auto d = c;
        for (const auto& a : spec.zip) d.emplace_back(a.key, a.values.at(j));
        next.push_back(std::move(d));
      }
    configs = std::move(next);
  }
  std::vector<SweepPoint> out;
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    const bool seed_varied = std::any_of(configs[ci].begin(), configs[ci].end(), [](const auto& kv) { return kv.first == "seed"; });
    for (int r = 0; r < spec.replications; ++r) {
      SweepPoint p;
      p.index = out.size();
      p.config = ci;
      p.values = configs[ci];
      p.replication = r;
      p.sets = base_sets;
      for (const auto& [k, v] : p.values) p.sets.push_back(k + "=" + v);
      if (seed_varied && spec.replications == 1) {
        p.seed = seed_value(std::find_if(p.values.begin(), p.values.end(), [](const auto& kv) { return kv.first == "seed"; })->second, seed_at);
      } else {
        uint64_t base = base_seed;
        for (const auto& [k, v] : p.values)
          if (k == "seed") base = seed_value(v, seed_at);
        auto vals = p.values;
        std::erase_if(vals, [](const auto& kv) { return kv.first == "seed"; });
        p.seed = derive_seed(base, vals, r, spec.seeds);
        p.sets.push_back(fmt::format("seed={}", p.seed));
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

SweepFile load_sweep_file(const std::string& file) {
  SweepFile f;
  f.scenario = load_yaml_file(file);
  if (!f.scenario.is_map()) return f;  // load_scenario_tree reports it
  for (size_t i = 0; i < f.scenario.map.size(); ++i)
    if (f.scenario.map[i].first == "sweep") {
      f.spec = parse_sweep_block(f.scenario.map[i].second);
      f.scenario.map.erase(f.scenario.map.begin() + static_cast<long>(i));
      f.scenario.key_origins.erase(f.scenario.key_origins.begin() + static_cast<long>(i));
      break;
    }
  return f;
}

std::string point_dir(const std::string& out_dir, size_t index) { return fmt::format("{}/points/p{:04}", out_dir, index); }

std::string resolve_metric(const std::string& name, const std::vector<std::string>& paths, const std::string& flag) {
  if (std::find(paths.begin(), paths.end(), name) != paths.end()) return name;
  std::vector<std::string> hits;
  for (const auto& p : paths)
    if (p.size() > name.size() && p.compare(p.size() - name.size(), name.size(), name) == 0 && p[p.size() - name.size() - 1] == '.')
      hits.push_back(p);
  if (hits.size() == 1) return hits.front();
  const Origin o{flag, 0, 0};
  if (hits.empty()) {
    // Suggest among the paths' endings with as many segments as the name has.
    const size_t segs = static_cast<size_t>(std::count(name.begin(), name.end(), '.')) + 1;
    std::vector<std::string> endings;
    for (const auto& p : paths) {
      size_t cut = p.size(), n = 0;
      while (n < segs && cut != std::string::npos && cut > 0) {
        cut = p.rfind('.', cut - 1);
        ++n;
      }
      endings.push_back(cut == std::string::npos || n < segs ? p : p.substr(cut + 1));
    }
    std::string hint = closest(name, endings);
    if (hint.empty()) hint = closest(name, paths);
    throw ConfigError(o, "metric", name, hint.empty() ? "no such metric" : fmt::format("no such metric (did you mean '{}'?)", hint),
                      "a metric path of the points' metrics.json, or a unique ending of one, e.g. ttft.p99");
  }
  std::string all;
  for (size_t i = 0; i < hits.size() && i < 6; ++i) all += (i ? ", " : "") + hits[i];
  throw ConfigError(o, "metric", name, "ambiguous metric name", "one of: " + all);
}

std::vector<PointResult> run_sweep_points(const SweepFile& file, const std::string& file_name, const std::vector<SweepPoint>& points,
                                          const Registry& reg, const SweepOptions& opt) {
  std::vector<size_t> mine;
  for (const auto& p : points)
    if (static_cast<int>(p.index % static_cast<size_t>(opt.ranks)) == opt.rank && (opt.skip.empty() || !opt.skip[p.index]))
      mine.push_back(p.index);
  // Validate every point of this share before any simulates (exit 2 with the point named),
  // and keep each scenario's hash to recognise a finished point on resume.
  std::vector<std::string> hashes(points.size());
  for (size_t i : mine) {
    try {
      hashes[i] = load_scenario_tree(file.scenario, file_name, points[i].sets, reg).hash;
    } catch (const ConfigError& e) {
      std::string sets;
      for (const auto& [k, v] : points[i].values) sets += (sets.empty() ? "" : " ") + k + "=" + v;
      throw ConfigError(Origin{file_name, 0, 0}, fmt::format("point {}", i), sets, fmt::format("this sweep point is invalid: {}", e.what()),
                        "values that validate for every point");
    }
  }
  claim_sweep_dir(opt.out_dir);
  std::vector<PointResult> results(mine.size());
  std::vector<size_t> todo;
  for (size_t j = 0; j < mine.size(); ++j) {
    const size_t i = mine[j];
    results[j].index = i;
    const fs::path m = fs::path(point_dir(opt.out_dir, i)) / "metrics.json";
    if (!path_exists(m)) {
      // What is in the way of this point's directory is found now, not after the points
      // before it ran: a file, a link, or a directory that is not a sluice result.
      const fs::path dir = point_dir(opt.out_dir, i);
      std::error_code ec;
      const auto st = fs::symlink_status(dir, ec);
      if (fs::exists(st) && (!fs::is_directory(st) || (!fs::is_empty(dir, ec) && !path_exists(dir / ".sluice-result"))))
        throw OutputError(fmt::format("'{}' is in the way of point {}'s results ({}); sluice does not replace it (another --out, or "
                                      "remove it yourself)", dir.string(), i, fs::is_directory(st) ? "a directory of other files" : "not a directory"));
      todo.push_back(j);
      // A killed sweep leaves this point's hidden partial directory: it is never read, so drop it.
      const fs::path parent = dir.parent_path();
      const std::string prefix = "." + dir.filename().string() + ".partial.";
      if (path_is_directory(parent))
        for (const auto& e : fs::directory_iterator(parent, ec))
          if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path(), ec);
      continue;
    }
    Json doc;
    try {
      doc = Json::parse(slurp(m));
    } catch (const std::exception&) {
      doc = Json();
    }
    const Json* h = doc.is_object() ? json_path(doc, "scenario.hash") : nullptr;
    if (!h || !h->is_string() || h->get<std::string>() != hashes[i] || !doc.contains("metrics"))
      throw ConfigError(Origin{opt.out_dir, 0, 0}, fmt::format("point {}", i), point_dir(opt.out_dir, i),
                        "this directory holds the results of another scenario (a different sweep, or the scenario changed)",
                        "another --out directory, or remove it to rerun");
    results[j].resumed = true;
    results[j].metrics = std::move(doc["metrics"]);
  }
  std::atomic<size_t> next{0}, done{mine.size() - todo.size()};
  std::mutex mu;
  std::vector<std::exception_ptr> errors(todo.size());
  auto worker = [&] {
    for (;;) {
      const size_t t = next.fetch_add(1);
      if (t >= todo.size()) return;
      PointResult& r = results[todo[t]];
      try {
        Scenario sc = load_scenario_tree(file.scenario, file_name, points[r.index].sets, reg);
        Recorder rec;
        Json header = run_into(sc, rec, {});
        header["sweep_point"] = Json{{"index", r.index}, {"set", points[r.index].sets}};
        rec.write_atomically(point_dir(opt.out_dir, r.index), header);
        r.metrics = Json::parse(rec.metrics().dump());  // as a resumed point reads it back
      } catch (...) {
        errors[t] = std::current_exception();
      }
      const size_t d = ++done;
      if (opt.progress) {
        std::lock_guard<std::mutex> lock(mu);
        opt.progress(d, mine.size());
      }
    }
  };
  const int n = std::max(1, std::min<int>(opt.threads, static_cast<int>(todo.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);  // the lowest-index failure, whatever finished first
  return results;
}

SweepTable combine_sweep(const std::string& scenario_name, const SweepSpec& spec, const std::vector<SweepPoint>& points,
                         const std::vector<PointResult>& results) {
  SweepTable t;
  for (const auto& p : points)
    for (const auto& [k, _] : p.values)
      if (std::find(t.keys.begin(), t.keys.end(), k) == t.keys.end()) t.keys.push_back(k);
  // Metric columns: every numeric leaf, in the order they first appear by point index.
  std::vector<std::string> all;
  std::set<std::string> seen;
  std::vector<std::map<std::string, double>> values(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    std::vector<std::pair<std::string, double>> leaves;
    numeric_leaves(results[i].metrics, "", leaves);
    for (auto& [k, v] : leaves) {
      values[i][k] = v;
      if (seen.insert(k).second) all.push_back(k);
    }
  }
  if (spec.metrics.empty()) t.metrics = all;
  else
    for (const auto& m : spec.metrics) t.metrics.push_back(resolve_metric(m, all, "--metric"));
  auto value = [&](size_t i, const std::string& m) {
    auto it = values[i].find(m);
    return it == values[i].end() ? std::nan("") : it->second;
  };

  t.csv = "point,replication,seed";
  // A swept seed is the point's base seed (replications derive theirs from it): its column is
  // named for that, not a second `seed`.
  for (const auto& k : t.keys) {  // by append: GCC 12's -Wstringop-overflow misfires on "," + std::string&&
    t.csv += ',';
    t.csv += csv::field(k == "seed" ? "base_seed" : k);
  }
  for (const auto& m : t.metrics) {
    t.csv += ',';
    t.csv += csv::field(m);
  }
  t.csv += "\n";
  Json rows = Json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const SweepPoint& p = points[results[i].index];
    t.csv += fmt::format("{},{},{}", p.index, p.replication, p.seed);
    Json row = Json::object();
    row["point"] = p.index;
    row["replication"] = p.replication;
    row["seed"] = p.seed;
    Json keys = Json::object();
    for (const auto& k : t.keys) {
      auto it = std::find_if(p.values.begin(), p.values.end(), [&](const auto& kv) { return kv.first == k; });
      const std::string v = it == p.values.end() ? "" : it->second;
      t.csv += ',';  // by append: GCC 12's -Wrestrict misfires on "," + std::string&&
      t.csv += csv::field(v);
      keys[k] = v;
    }
    row["keys"] = keys;
    Json ms = Json::object();
    for (const auto& m : t.metrics) {
      const double v = value(i, m);
      t.csv += ',';
      t.csv += fmt_num(v);
      ms[m] = std::isfinite(v) ? Json(v) : Json(nullptr);
    }
    row["metrics"] = ms;
    rows.push_back(row);
    t.csv += "\n";
  }
  Json axes = Json::object();
  for (const auto& a : spec.grid) axes[a.key] = Json{{"mode", "grid"}, {"values", a.values}};
  for (const auto& a : spec.zip) axes[a.key] = Json{{"mode", "zip"}, {"values", a.values}};
  t.json = Json{{"schema_version", Recorder::kSchemaVersion},
                {"scenario", scenario_name},
                {"points", points.size()},
                {"replications", spec.replications},
                {"seeds", spec.seeds == SeedMode::Point ? "point" : "common"},
                {"axes", axes},
                {"keys", t.keys},
                {"metrics", t.metrics},
                {"rows", rows}};

  // The planner's view: each configuration's mean over its replications, filtered by the
  // constraints, and the best configuration per objective.
  std::vector<SweepConstraint> where;
  for (const auto& w : spec.where) where.push_back(parse_constraint(w, &all));
  std::vector<std::pair<bool, std::string>> objectives;  // (minimize, metric)
  for (const auto& o : spec.objectives) {
    const auto [dir, name] = split_objective(o);
    const std::string m = resolve_metric(name, all, "--objective");
    objectives.emplace_back(dir.empty() ? is_lower_better(m) : dir == "min", m);
  }
  size_t nconfig = 0;
  for (const auto& p : points) nconfig = std::max(nconfig, p.config + 1);
  std::vector<std::map<std::string, double>> mean(nconfig);
  std::vector<int> count(nconfig, 0);
  std::vector<size_t> first_point(nconfig, 0);
  for (size_t i = 0; i < results.size(); ++i) {
    const SweepPoint& p = points[results[i].index];
    if (count[p.config]++ == 0) first_point[p.config] = p.index;
    for (const auto& [k, v] : values[i]) mean[p.config][k] += v;
  }
  for (size_t c = 0; c < nconfig; ++c)
    for (auto& [k, v] : mean[c]) v /= std::max(1, count[c]);
  auto describe = [&](size_t c) {
    std::string s;
    for (const auto& [k, v] : points[first_point[c]].values)
      if (k != "seed" || spec.replications == 1) s += (s.empty() ? "" : ", ") + k + "=" + v;
    return s.empty() ? std::string("the base scenario") : s;
  };
  auto mval = [&](size_t c, const std::string& m) {
    auto it = mean[c].find(m);
    return it == mean[c].end() ? std::nan("") : it->second;
  };
  std::vector<size_t> feasible;
  for (size_t c = 0; c < nconfig; ++c)
    if (std::all_of(where.begin(), where.end(), [&](const SweepConstraint& w) { return w.ok(mval(c, w.metric)); })) feasible.push_back(c);
  std::string cond;
  for (const auto& w : where) cond += (cond.empty() ? "" : " and ") + w.text;
  t.summary.push_back(fmt::format("sweep {}: {} points ({} configurations × {} replications){}", scenario_name, points.size(), nconfig,
                                  spec.replications, where.empty() ? "" : fmt::format("; {} of {} meet {}", feasible.size(), nconfig, cond)));
  // A small sweep shows every configuration's objective metrics (mean of its replications).
  if (!objectives.empty() && nconfig <= 40) {
    auto last = [](const std::string& k, bool stat) {
      // The last segment, or the last two when it is a statistic (ttft.p99).
      const size_t a = k.rfind('.');
      if (a == std::string::npos) return k;
      const std::string seg = k.substr(a + 1);
      const bool is_stat = stat && (seg == "mean" || seg == "max" || seg == "min" || (seg.size() > 1 && seg[0] == 'p' && std::isdigit(static_cast<unsigned char>(seg[1]))));
      const size_t b = is_stat && a > 0 ? k.rfind('.', a - 1) : a;
      return k.substr(b == std::string::npos ? 0 : b + 1);
    };
    std::string head = fmt::format("  {:<40}", "configuration");
    for (const auto& [_, m] : objectives) head += fmt::format(" {:>20}", last(m, true).substr(0, 20));
    t.summary.push_back(head + (where.empty() ? "" : "  meets"));
    for (size_t c = 0; c < nconfig; ++c) {
      std::string d;
      for (const auto& [k, v] : points[first_point[c]].values)
        if (k != "seed" || spec.replications == 1) d += (d.empty() ? "" : " ") + last(k, false) + "=" + v;
      std::string line = fmt::format("  {:<40}", d.size() > 40 ? d.substr(0, 39) + "…" : d);
      for (const auto& [_, m] : objectives) line += fmt::format(" {:>20.6g}", mval(c, m));
      if (!where.empty()) line += std::find(feasible.begin(), feasible.end(), c) != feasible.end() ? "  yes" : "  no";
      t.summary.push_back(line);
    }
    t.summary.push_back("best:");
  }
  Json best = Json::array();
  for (const auto& [minimize, m] : objectives) {
    std::optional<size_t> b;
    for (size_t c : feasible) {
      const double v = mval(c, m);
      if (!std::isfinite(v)) continue;
      if (!b || (minimize ? v < mval(*b, m) : v > mval(*b, m))) b = c;
    }
    const std::string what = fmt::format("{} {}", minimize ? "min" : "max", m);
    if (!b) {
      t.summary.push_back(fmt::format("  {:<52} no point {}", what, where.empty() ? "has this metric" : "meets the constraints"));
      best.push_back(Json{{"objective", what}, {"point", nullptr}});
      continue;
    }
    t.summary.push_back(fmt::format("  {:<52} {:>12.6g}  at {} (point {})", what, mval(*b, m), describe(*b), first_point[*b]));
    best.push_back(Json{{"objective", what}, {"value", mval(*b, m)}, {"point", first_point[*b]}, {"configuration", describe(*b)}});
  }
  if (!objectives.empty()) t.json["best"] = Json{{"where", spec.where}, {"objectives", best}};
  return t;
}

}  // namespace sluice
