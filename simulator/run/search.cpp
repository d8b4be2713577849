#include "run/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>

#include <fmt/format.h>

#include "config/error.h"
#include "recorder/csv_format.h"
#include "recorder/recorder.h"
#include "run/runner.h"
#include "run/scenario.h"
#include "workloads/serving/serving_sim.h"

namespace sluice {

namespace {

// A serving deployment's own share (its devices, and theirs of the hosts and fabric): the
// fleet view, where a server's other devices serve something else.
const std::vector<std::string> kDefaultObjectives = {"min:serving.cost.usd_per_million_output_tokens", "min:serving.energy.average_power_W",
                                                     "min:serving.latency_ms.ttft.p99"};

std::vector<std::string> strings_of(const Node& v, const std::string& path, const char* example) {
  if (!v.is_seq() || v.seq.empty()) throw ConfigError(v.origin, path, v.brief(), "expected a non-empty list", example);
  std::vector<std::string> out;
  for (const auto& e : v.seq) {
    if (!e.is_scalar()) throw ConfigError(e.origin, path, e.brief(), "expected a string", example);
    out.push_back(e.scalar);
  }
  return out;
}

// A sum of money: 2500000, 2.5M, 800k, $2.5M (USD).
double parse_usd(const Node& v, const std::string& path) {
  const char* valid = "US dollars the deployment's accelerators may cost at catalog prices, e.g. 2500000, 2.5M or 800k";
  if (!v.is_scalar()) throw ConfigError(v.origin, path, v.brief(), "expected an amount", valid);
  std::string t = v.scalar;
  if (!t.empty() && t.front() == '$') t.erase(0, 1);
  double scale = 1;
  if (!t.empty() && (t.back() == 'k' || t.back() == 'K')) scale = 1e3, t.pop_back();
  else if (!t.empty() && t.back() == 'M') scale = 1e6, t.pop_back();
  else if (!t.empty() && (t.back() == 'G' || t.back() == 'B')) scale = 1e9, t.pop_back();
  try {
    size_t used = 0;
    const double x = std::stod(t, &used) * scale;
    if (used == t.size() && x > 0 && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  throw ConfigError(v.origin, path, v.scalar, "not a positive amount", valid);
}

SearchSpec parse_search_block(const Node& block) {
  if (!block.is_map())
    throw ConfigError(block.origin, "search", block.brief(), "expected a mapping", "keys: grid, zip, slo, objectives, budget");
  SearchSpec s;
  s.origin = block.origin;
  Node space = block;  // grid and zip, read as a sweep's
  space.map.clear();
  space.key_origins.clear();
  for (size_t i = 0; i < block.map.size(); ++i) {
    const auto& [k, v] = block.map[i];
    if (k == "grid" || k == "zip") {
      space.map.push_back(block.map[i]);
      space.key_origins.push_back(block.key_origins[i]);
    } else if (k == "slo") {
      s.slo = strings_of(v, "search.slo", "e.g. ['ttft.p99<1s', 'tpot.p99<40ms']");
    } else if (k == "objectives") {
      s.objectives = strings_of(v, "search.objectives", "e.g. [min:cost.usd_per_million_output_tokens, min:latency_ms.ttft.p99]");
    } else if (k == "budget") {
      s.budget_usd = parse_usd(v, "search.budget");
      s.budget_origin = v.origin;
    } else {
      throw ConfigError(block.key_origins[i], "search." + k, k, "unknown key", "one of: grid, zip, slo, objectives, budget");
    }
  }
  const SweepSpec sw = parse_sweep_block(space, "search");
  s.grid = sw.grid;
  s.zip = sw.zip;
  if (s.grid.empty() && s.zip.empty()) throw ConfigError(block.origin, "search", "", "no space to search", "grid: {key: [values]} and/or zip");
  if (s.slo.empty()) throw ConfigError(block.origin, "search.slo", "", "a search needs the SLO its answers must meet", "e.g. ['tpot.p99<40ms']");
  if (s.objectives.empty()) s.objectives = kDefaultObjectives;
  SweepSpec form;
  form.where = s.slo;
  form.objectives = s.objectives;
  check_sweep_spec_form(form);
  return s;
}

std::string first_line(const std::string& s) {
  const size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

SearchFile load_search_file(const std::string& file) {
  SearchFile f;
  f.scenario = load_yaml_file(file);
  bool found = false;
  if (f.scenario.is_map())
    for (size_t i = 0; i < f.scenario.map.size(); ++i)
      if (f.scenario.map[i].first == "search") {
        f.spec = parse_search_block(f.scenario.map[i].second);
        f.scenario.map.erase(f.scenario.map.begin() + static_cast<long>(i));
        f.scenario.key_origins.erase(f.scenario.key_origins.begin() + static_cast<long>(i));
        found = true;
        break;
      }
  if (!found)
    throw ConfigError(Origin{file, 0, 0}, "search", "", "the scenario has no `search:` block",
                      "search: {grid: {key: [values]}, zip: ..., slo: ['tpot.p99<40ms'], objectives: [...]}");
  return f;
}

namespace {

// The active non-embedding weights every step reads at least once, and their bytes at the
// deployment's precision.
struct ActiveWeights {
  double count = 0, bytes = 0;
};
ActiveWeights active_weights(const serving::ServingConfig& c) {
  ModelSpec m = c.model;
  m.weights = c.precision;
  const double n = m.active_parameters() - static_cast<double>(m.vocab) * m.hidden;
  return {n, n * m.weight_element_bytes()};
}

double tpot_bound_ms(const serving::ServingConfig& c) {
  if (c.speculative.on()) return 0;  // a step may make several tokens
  const ActiveWeights w = active_weights(c);
  const double bw = c.hardware.hbm_bandwidth_Bps;
  if (w.count <= 0 || bw <= 0) return 0;
  return w.bytes / (static_cast<double>(c.tensor_parallel) * bw) * 1e3;
}

// The datasheet dense peak a precision's GEMMs run at (weight-only INT4 computes in bf16).
double datasheet_peak(const HardwareSpec& hw, Precision p) {
  const double fp8 = hw.peak_fp8_flops > 0 ? hw.peak_fp8_flops : hw.peak_bf16_flops;
  switch (p) {
    case Precision::FP8: return fp8;
    case Precision::FP4: return hw.peak_fp4_flops > 0 ? hw.peak_fp4_flops : fp8;
    default: return hw.peak_bf16_flops;
  }
}

double ttft_bound_ms(const serving::ServingConfig& c) {
  const ActiveWeights w = active_weights(c);
  const HardwareSpec& hw = c.prefill_pool ? c.prefill_pool->hardware : c.hardware;
  const double tp = c.prefill_pool ? c.prefill_pool->tensor_parallel : c.tensor_parallel;
  if (w.count <= 0) return 0;
  double ns = hw.hbm_bandwidth_Bps > 0 ? w.bytes / (tp * hw.hbm_bandwidth_Bps) * 1e9 : 0;
  // (The load's fewest: 1 where a shared prefix or a conversation's history may come from a cache.)
  const double tokens = c.workload ? static_cast<double>(c.workload->fewest_new_tokens()) : 1.0;
  if (const double peak = datasheet_peak(hw, c.precision); peak > 0) ns = std::max(ns, 2 * w.count * tokens / (tp * peak) * 1e9);
  return ns * 1e-6;
}

double capex_usd(const serving::ServingConfig& c, const Params& p) {
  auto priced = [&](const HardwareSpec& hw) {
    if (hw.price_usd <= 0)
      throw ConfigError(p.value("hardware").origin, "hardware", hw.name, fmt::format("{} has no price (price_usd): a budget cannot be checked", hw.name),
                        "a device whose catalog entry (or inline definition) sets price_usd");
    return hw.price_usd;
  };
  const double decode_devices = static_cast<double>(c.replicas - (c.prefill_pool ? c.prefill_replicas : 0)) * c.tensor_parallel * c.pipeline_parallel;
  double usd = decode_devices * priced(c.hardware);
  if (c.prefill_pool) usd += static_cast<double>(c.prefill_replicas) * c.prefill_pool->tensor_parallel * priced(c.prefill_pool->hardware);
  return usd;
}

serving::ServingConfig config_of(const Params& p, const Registry& reg) { return serving::build_serving_config(p, reg, 1, nullptr, nullptr); }

}  // namespace

double tpot_lower_bound_ms(const Params& p, const Registry& reg) { return tpot_bound_ms(config_of(p, reg)); }
double ttft_lower_bound_ms(const Params& p, const Registry& reg) { return ttft_bound_ms(config_of(p, reg)); }
double deployment_capex_usd(const Params& p, const Registry& reg) { return capex_usd(config_of(p, reg), p); }

SearchOutcome run_search(const SearchFile& file, const std::string& file_name, const Registry& reg, const SearchOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  SearchOutcome out;
  SweepSpec spec;
  spec.grid = file.spec.grid;
  spec.zip = file.spec.zip;
  spec.seeds = SeedMode::Common;  // every configuration sees the same load
  // The base scenario need not build (its own values may be ones the space replaces): only its
  // name and seed are read from it.
  std::string base_name = std::filesystem::path(file_name).stem().string();
  uint64_t base_seed = 1;
  if (const Node* n = file.scenario.find("name"); n && n->is_scalar()) base_name = n->scalar;
  if (const Node* n = file.scenario.find("seed"); n && n->is_scalar()) {
    try {
      base_seed = std::stoull(n->scalar);
    } catch (const std::exception&) {
      throw ConfigError(n->origin, "seed", n->scalar, "not a seed", "an integer in [0, 9e15)");
    }
  }
  const std::vector<SweepPoint> points = expand_sweep(spec, base_seed, opt.sets);

  // Constraints on TPOT a roofline bound can decide before simulating: 'tpot.<stat> < X'.
  static const std::regex tpot_re(R"(^\s*(serving\.)?(latency_ms\.)?tpot\.(p25|p50|p75|p90|p95|p99|mean|max|min)\s*(<|<=)[^<>=!]+$)");
  static const std::regex ttft_re(R"(^\s*(serving\.)?(latency_ms\.)?ttft\.(p25|p50|p75|p90|p95|p99|mean|max|min)\s*(<|<=)[^<>=!]+$)");
  std::vector<std::pair<std::string, SweepConstraint>> tpot_slo, ttft_slo;
  for (const auto& c : file.spec.slo) {
    std::smatch mt;
    for (auto [re, what, into] : {std::tuple{&tpot_re, "tpot", &tpot_slo}, std::tuple{&ttft_re, "ttft", &ttft_slo}}) {
      if (!std::regex_match(c, mt, *re)) continue;
      const std::vector<std::string> paths{fmt::format("serving.latency_ms.{}.{}", what, mt[3].str())};
      into->emplace_back(c, parse_constraint(c, &paths));
    }
  }
  // What the objectives, the SLO or a budget need of every device in the space: power figures
  // for energy, power, carbon or cost (its electricity); a price for cost or a budget.
  bool need_power = false, need_price = file.spec.budget_usd > 0;
  std::string needs_what = need_price ? "search.budget" : "";
  for (const auto& o : file.spec.objectives) {
    for (const char* k : {"energy", "power", "carbon", "cost"})
      if (o.find(k) != std::string::npos) need_power = true, needs_what = needs_what.empty() ? o : needs_what;
    if (o.find("cost") != std::string::npos || o.find("usd") != std::string::npos) need_price = true;
  }

  // Prune: what does not build, then what a lower bound excludes.
  out.rows.resize(points.size());
  SweepOptions so;
  so.out_dir = opt.out_dir;
  so.threads = opt.threads;
  so.quiet = true;
  so.skip.assign(points.size(), false);
  for (const auto& p : points) {
    SearchRow& r = out.rows[p.index];
    r.point = p.index;
    r.values = p.values;
    r.seed = p.seed;
    std::optional<ConfigError> fatal;  // the space's mistake, found while building a point: thrown below, not counted as the point's
    try {
      const Scenario sc = load_scenario_tree(file.scenario, file_name, p.sets, reg);
      r.status = SearchRow::Status::Infeasible;  // until it runs and meets the SLO
      const bool serving = sc.study && sc.study->name == "serving";
      const std::optional<serving::ServingConfig> config = serving ? std::optional(config_of(*sc.params, reg)) : std::nullopt;
      if (config && (need_power || need_price)) {
        // A device the objectives cannot price is the space's mistake: named before anything runs.
        const serving::ServingConfig& c = *config;
        for (const HardwareSpec* hw : {&c.hardware, c.prefill_pool ? &c.prefill_pool->hardware : nullptr}) {
          if (!hw) continue;
          std::string lacks;
          if (need_power && (hw->tdp_w <= 0 || hw->idle_w <= 0 || hw->memory_bound_w <= 0)) lacks = "power figures (tdp, idle_power, memory_bound_power)";
          else if (need_price && hw->price_usd <= 0) lacks = "price (price_usd)";
          if (!lacks.empty())
            fatal = ConfigError(file.spec.origin, needs_what, hw->name,
                              fmt::format("point {} ({}) runs on {}, which has no {}, so {} cannot be computed for it", p.index,
                                          [&] {
                                            std::string s;
                                            for (const auto& [k, v] : p.values) s += (s.empty() ? "" : ", ") + k + "=" + v;
                                            return s;
                                          }(),
                                          hw->name, lacks, needs_what),
                              "devices whose catalog entries set them (models/hardware/*.yaml), or objectives that do not need them");
        }
      }
      if (opt.prune && config && !fatal) {
        auto bound = [&](const std::vector<std::pair<std::string, SweepConstraint>>& slo, double lb, const char* step, const char* why) {
          for (const auto& [text, c] : slo)
            if (r.status == SearchRow::Status::Infeasible && lb > 0 && !c.ok(lb)) {
              r.status = SearchRow::Status::Bound;
              r.why = fmt::format("{}: no {} can be faster than {:.3g} ms ({})", text, step, lb, why);
            }
        };
        if (!tpot_slo.empty())
          bound(tpot_slo, tpot_bound_ms(*config), "decode step", "its weights at the datasheet HBM bandwidth");
        if (!ttft_slo.empty())
          bound(ttft_slo, ttft_bound_ms(*config), "first token",
                "its prefill reads the weights once at the datasheet HBM bandwidth and computes the shortest prompt at the datasheet peak");
        if (r.status == SearchRow::Status::Infeasible && file.spec.budget_usd > 0) {
          const double usd = capex_usd(*config, *sc.params);
          if (usd > file.spec.budget_usd) {
            r.status = SearchRow::Status::Budget;
            r.why = fmt::format("budget: its accelerators cost ${:.4g}M at catalog prices, more than ${:.4g}M", usd / 1e6, file.spec.budget_usd / 1e6);
          }
        }
      }
    } catch (const ConfigError& e) {
      // A misspelt key or value is the space's mistake, not a point that cannot be: fatal, as
      // in a sweep.
      const std::string what = e.what();
      if (what.find("unknown key") != std::string::npos || what.find("did you mean") != std::string::npos) throw;
      r.status = SearchRow::Status::Invalid;
      r.why = first_line(what);
    } catch (const std::exception& e) {  // a deployment the cluster cannot hold, found while building it
      r.status = SearchRow::Status::Invalid;
      r.why = first_line(e.what());
    }
    if (fatal) throw *fatal;
    so.skip[p.index] = r.status != SearchRow::Status::Infeasible;
  }
  if (std::all_of(out.rows.begin(), out.rows.end(), [](const SearchRow& r) { return r.status == SearchRow::Status::Invalid; }))
    throw ConfigError(file.spec.origin, "search", "", fmt::format("no point of the space builds; point 0: {}", out.rows.front().why),
                      "a space with at least one deployment that fits its cluster");

  // Simulate the rest, as a sweep's points (resumable).
  SweepFile sf;
  sf.scenario = file.scenario;
  if (opt.share_only) {  // one MPI rank's share of the points; the answer comes from a resumed run
    SweepOptions mine = so;
    mine.rank = opt.rank;
    mine.ranks = opt.ranks;
    run_sweep_points(sf, file_name, points, reg, mine);
    return out;
  }
  std::vector<std::string> all;
  std::vector<std::map<std::string, double>> values(points.size());
  std::vector<std::string> hardware(points.size());  // each simulated point's device (serving), to name it
  auto gather = [&](const std::vector<PointResult>& rs) {
    for (const auto& pr : rs) {
      if (const Json* h = json_path(pr.metrics, "serving.deployment.hardware"); h && h->is_string()) hardware[pr.index] = h->get<std::string>();
      std::vector<std::pair<std::string, double>> leaves;
      numeric_leaves(pr.metrics, "", leaves);
      for (const auto& [k, v] : leaves) {
        values[pr.index][k] = v;
        if (std::find(all.begin(), all.end(), k) == all.end()) all.push_back(k);
      }
    }
  };
  // The first point to simulate runs alone, so that a constraint or objective naming no metric
  // fails now, not after the whole space ran; the rest follow (it is then resumed, not rerun).
  std::vector<SweepConstraint> slo;
  std::vector<std::pair<bool, std::string>> obj;  // (minimize, metric)
  const auto first = std::find(so.skip.begin(), so.skip.end(), false);
  if (first != so.skip.end()) {
    SweepOptions one = so;
    one.skip.assign(points.size(), true);
    one.skip[static_cast<size_t>(first - so.skip.begin())] = false;
    gather(run_sweep_points(sf, file_name, points, reg, one));
    auto named = [&](const std::string& key, const std::string& text, auto&& read) {
      try {
        read();
      } catch (const ConfigError& e) {
        throw ConfigError(file.spec.origin, key, text, first_line(e.what()), "a metric the runs write (sluice list metrics)");
      }
    };
    for (const auto& c : file.spec.slo) named("search.slo", c, [&] { slo.push_back(parse_constraint(c, &all)); });
    for (const auto& o : file.spec.objectives)
      named("search.objectives", o, [&] {
        const auto [dir, name] = split_objective(o);
        const std::string m = resolve_metric(name, all, "search.objectives");
        obj.emplace_back(dir.empty() ? is_lower_better(m) : dir == "min", m);
        out.objective_metrics.push_back(m);
      });
  }
  const std::vector<PointResult> results = run_sweep_points(sf, file_name, points, reg, so);  // (none to run: it claims the directory)
  gather(results);
  auto val = [&](size_t i, const std::string& m) {
    const auto it = values[i].find(m);
    return it == values[i].end() ? std::nan("") : it->second;
  };
  std::map<std::string, size_t> broke;  // constraint -> simulated points it excluded (first broken)
  for (const auto& pr : results) {
    SearchRow& r = out.rows[pr.index];
    for (const auto& [minimize, m] : obj) r.objectives.push_back(val(pr.index, m));
    r.status = SearchRow::Status::Feasible;
    for (const auto& c : slo)
      if (!c.ok(val(pr.index, c.metric))) {
        r.status = SearchRow::Status::Infeasible;
        r.why = fmt::format("{} ({:.4g})", c.text, val(pr.index, c.metric));
        ++broke[c.text];
        break;
      }
  }
  // The Pareto front: feasible points no other feasible point matches or beats on every
  // objective while beating on one.
  auto better = [&](const SearchRow& a, const SearchRow& b) {  // a dominates b
    bool strictly = false;
    for (size_t k = 0; k < obj.size(); ++k) {
      const double x = obj[k].first ? a.objectives[k] : -a.objectives[k], y = obj[k].first ? b.objectives[k] : -b.objectives[k];
      if (!(x <= y)) return false;
      strictly |= x < y;
    }
    return strictly;
  };
  // Feasible points with an objective they do not report (a device with no power figures) meet
  // the SLO but cannot be ranked: counted apart, never on the front.
  std::vector<size_t> feasible;
  size_t unranked = 0, meets = 0;
  std::string unranked_what;  // the first such point's missing objective and device
  for (size_t i = 0; i < out.rows.size(); ++i) {
    if (out.rows[i].status != SearchRow::Status::Feasible) continue;
    ++meets;
    const auto& o = out.rows[i].objectives;
    const auto missing = std::find_if(o.begin(), o.end(), [](double v) { return !std::isfinite(v); });
    if (missing == o.end()) {
      feasible.push_back(i);
      continue;
    }
    if (unranked++ == 0)
      unranked_what = fmt::format("point {} has no {}{}", out.rows[i].point, obj[static_cast<size_t>(missing - o.begin())].second,
                                  hardware[i].empty() ? "" : fmt::format(" ({} has no power figures: tdp, idle_power, memory_bound_power?)", hardware[i]));
  }
  // The best: the front's point first on the first objective, ties broken by the next ones.
  auto ahead = [&](const SearchRow& a, const SearchRow& b) {
    for (size_t k = 0; k < obj.size(); ++k) {
      const double x = obj[k].first ? a.objectives[k] : -a.objectives[k], y = obj[k].first ? b.objectives[k] : -b.objectives[k];
      if (x != y) return x < y;
    }
    return false;
  };
  for (size_t i : feasible) {
    out.rows[i].pareto = std::none_of(feasible.begin(), feasible.end(), [&](size_t j) { return j != i && better(out.rows[j], out.rows[i]); });
    if (out.rows[i].pareto && (out.best < 0 || ahead(out.rows[i], out.rows[static_cast<size_t>(out.best)]))) out.best = static_cast<int>(i);
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The outputs: search.json, search.csv and the summary.
  auto status_name = [](SearchRow::Status s) {
    switch (s) {
      case SearchRow::Status::Invalid: return "pruned: does not build";
      case SearchRow::Status::Bound: return "pruned: lower bound";
      case SearchRow::Status::Budget: return "pruned: over budget";
      case SearchRow::Status::Infeasible: return "misses the SLO";
      case SearchRow::Status::Feasible: return "meets the SLO";
    }
    return "";
  };
  auto describe = [](const SearchRow& r) {
    std::string s;
    for (const auto& [k, v] : r.values) s += (s.empty() ? "" : ", ") + k + "=" + v;
    return s;
  };
  size_t invalid = 0, bound = 0, budget = 0, pareto = 0;
  for (const auto& r : out.rows) {
    invalid += r.status == SearchRow::Status::Invalid;
    bound += r.status == SearchRow::Status::Bound;
    budget += r.status == SearchRow::Status::Budget;
    pareto += r.pareto;
  }
  Json rows = Json::array();
  out.csv = "point";
  for (const auto& a : points.empty() ? std::vector<std::pair<std::string, std::string>>{} : points.front().values) {
    out.csv += ',';
    out.csv += csv::field(a.first);
  }
  out.csv += ",status,pareto,best,why";
  for (const auto& m : out.objective_metrics) {
    out.csv += ',';
    out.csv += csv::field(m);
  }
  out.csv += "\n";
  for (size_t i = 0; i < out.rows.size(); ++i) {
    const SearchRow& r = out.rows[i];
    Json keys = Json::object();
    out.csv += fmt::format("{}", r.point);
    for (const auto& [k, v] : r.values) {
      keys[k] = v;
      out.csv += ',';
      out.csv += csv::field(v);
    }
    out.csv += fmt::format(",{},{},{},", csv::field(status_name(r.status)), r.pareto ? 1 : 0, static_cast<int>(i) == out.best ? 1 : 0);
    out.csv += csv::field(r.why);
    Json o = Json::object();
    for (size_t k = 0; k < r.objectives.size(); ++k) {
      o[out.objective_metrics[k]] = std::isfinite(r.objectives[k]) ? Json(r.objectives[k]) : Json(nullptr);
      out.csv += ',';
      out.csv += std::isfinite(r.objectives[k]) ? fmt::format("{}", r.objectives[k]) : std::string();
    }
    for (size_t k = r.objectives.size(); k < out.objective_metrics.size(); ++k) out.csv += ',';
    out.csv += "\n";
    rows.push_back(Json{{"point", r.point}, {"seed", r.seed}, {"keys", keys}, {"status", status_name(r.status)}, {"why", r.why}, {"pareto", r.pareto},
                        {"objectives", o}});
  }
  Json front = Json::array();
  for (size_t i = 0; i < out.rows.size(); ++i)
    if (out.rows[i].pareto) front.push_back(out.rows[i].point);
  out.json = Json{{"schema_version", Recorder::kSchemaVersion},
                  {"scenario", base_name},
                  {"slo", file.spec.slo},
                  {"objectives", out.objective_metrics},
                  {"points", points.size()},
                  {"pruned_does_not_build", invalid},
                  {"pruned_lower_bound", bound},
                  {"pruned_over_budget", budget},
                  {"budget_usd", file.spec.budget_usd > 0 ? Json(file.spec.budget_usd) : Json(nullptr)},
                  {"simulated", results.size()},
                  {"feasible", meets},
                  {"unranked", unranked},
                  {"pareto", front},
                  {"best", out.best < 0 ? Json(nullptr) : Json(out.rows[static_cast<size_t>(out.best)].point)},
                  {"rows", rows}};
  std::string cond;
  for (const auto& c : file.spec.slo) cond += (cond.empty() ? "" : " and ") + c;
  out.summary.push_back(fmt::format("search {}: {} points; pruned {} that do not build (memory, parallelism) and {} by a lower bound{}; "
                                    "simulated {}; {} meet {}",
                                    base_name, points.size(), invalid, bound,
                                    file.spec.budget_usd > 0 ? fmt::format(" and {} over the ${:.4g}M budget", budget, file.spec.budget_usd / 1e6) : "",
                                    results.size(), meets, cond));
  if (unranked > 0)
    out.summary.push_back(fmt::format("  {} of them report no value for an objective and are not ranked: {}", unranked, unranked_what));
  if (out.best >= 0) {
    const SearchRow& b = out.rows[static_cast<size_t>(out.best)];
    std::string objs;
    for (size_t k = 0; k < obj.size(); ++k) objs += fmt::format("{}{} {:.4g}", k ? ", " : "", obj[k].second, b.objectives[k]);
    out.summary.push_back(fmt::format("  best by {}: {} (point {}): {}", obj[0].second, describe(b), b.point, objs));
    out.summary.push_back(fmt::format("  Pareto front ({} of {} feasible; {}):", pareto, feasible.size(), [&] {
      std::string s;
      for (size_t k = 0; k < obj.size(); ++k) s += fmt::format("{}{} {}", k ? ", " : "", obj[k].first ? "min" : "max", obj[k].second);
      return s;
    }()));
    for (size_t i = 0; i < out.rows.size(); ++i) {
      const SearchRow& r = out.rows[i];
      if (!r.pareto) continue;
      std::string line = fmt::format("    point {:>4}  {}", r.point, describe(r));
      for (double v : r.objectives) line += fmt::format("  {:.4g}", v);
      out.summary.push_back(line);
    }
  } else if (meets == 0) {
    // Nothing meets the SLO: say what excluded what.
    std::string s = fmt::format("  no configuration meets {}: {} do not build", cond, invalid);
    if (invalid > 0) {
      const auto it = std::find_if(out.rows.begin(), out.rows.end(), [](const SearchRow& r) { return r.status == SearchRow::Status::Invalid; });
      s += fmt::format(" (e.g. point {}: {})", it->point, it->why);
    }
    s += fmt::format("; {} excluded by a lower bound (TPOT, TTFT)", bound);
    if (bound > 0) {
      const auto it = std::find_if(out.rows.begin(), out.rows.end(), [](const SearchRow& r) { return r.status == SearchRow::Status::Bound; });
      s += fmt::format(" (e.g. point {}: {})", it->point, it->why);
    }
    if (file.spec.budget_usd > 0) s += fmt::format("; {} over the budget", budget);
    for (const auto& [c, n] : broke) s += fmt::format("; {} simulated missed {}", n, c);
    out.summary.push_back(s);
  }
  return out;
}

}  // namespace sluice
