// Network studies (category "study"): a tensor+data-parallel job on several topologies, OCS
// against static placement on a TPU v4 pod, and twisted against regular torus all-to-all.
#include <cmath>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "run/scenario.h"
#include "network/collective.h"
#include "network/generators.h"
#include "network/pod.h"
#include "network/study_results.h"
#include "recorder/network_report.h"

namespace sluice::net {

namespace {

// A list parameter, or its default when absent (list defaults cannot be schema defaults).
Node list_param(const Params& p, const std::string& key, const std::string& fallback) {
  if (p.has(key)) return p.node(key);
  return load_yaml_string(fallback, "(default)");
}

// A list of [x, y, z] triples, each element checked, errors at the element.
std::array<int, 3> triple(const Node& n, const std::string& path) {
  if (!n.is_seq() || n.seq.size() != 3)
    throw ConfigError(n.origin, path, n.brief(), "expected a shape of 3 extents", "a list such as [4, 4, 8]");
  std::array<int, 3> out{};
  for (size_t i = 0; i < 3; ++i) {
    auto v = n.seq[i].is_scalar() ? parse_int(n.seq[i].scalar) : std::nullopt;
    if (!v || *v < 1 || *v > 4096)
      throw ConfigError(n.seq[i].origin, fmt::format("{}[{}]", path, i), n.seq[i].brief(), "not a valid extent", "an integer in [1, 4096]");
    out[i] = static_cast<int>(*v);
  }
  return out;
}

std::string shape_text(const std::array<int, 3>& s) { return fmt::format("{}x{}x{}", s[0], s[1], s[2]); }

// ---------------------------------------------------------------- OCS vs static pod

class PodStudy final : public Study {
 public:
  explicit PodStudy(const StudyContext& ctx) : seed_(ctx.seed) {
    const Params& p = ctx.params;
    const Params& pod = p.section("pod");
    const Node cubes = list_param(pod, "cubes", "[4, 4, 4]");
    const auto g = triple(cubes, "pod.cubes");
    if (g[0] * g[1] * g[2] > 64) pod.fail("cubes", "more than 64 cubes", "at most 64 cubes (a TPU v4 pod has 4×4×4)");
    cfg_.grid = g;
    edge_ = static_cast<int>(pod.integer("cube_edge"));
    cfg_.chips_per_cube = edge_ * edge_ * edge_;
    cfg_.hosts_per_cube = static_cast<int>(pod.integer("hosts_per_cube"));
    cfg_.backfill = p.flag("backfill");
    cfg_.reconfig_s = p.time("ocs_reconfig").to_seconds();
    const Params& f = p.section("failures");
    cfg_.host_mtbf_s = f.time("host_mtbf").to_seconds();
    cfg_.host_repair_s = f.time("host_repair").to_seconds();
    cfg_.restart_penalty_s = f.time("restart_penalty").to_seconds();
    const Params& j = p.section("jobs");
    cfg_.horizon_s = j.time("horizon").to_seconds();
    auto shape_of = [&](const Node& n, const std::string& path) {
      const auto s = triple(n, path);
      for (size_t i = 0; i < 3; ++i)
        if (s[i] % edge_ != 0 || s[i] / edge_ > std::max({g[0], g[1], g[2]}))
          throw ConfigError(n.seq[i].origin, fmt::format("{}[{}]", path, i), n.seq[i].brief(),
                              fmt::format("a slice extent must be a multiple of the cube edge ({}) and fit the pod", edge_),
                              fmt::format("one of {}, {}, ... up to {}", edge_, 2 * edge_, edge_ * std::max({g[0], g[1], g[2]})));
      return CubeShape{s[0] / edge_, s[1] / edge_, s[2] / edge_};
    };
    const Node& shapes = j.node("shapes");
    std::vector<std::pair<CubeShape, double>> mix;
    double wsum = 0;
    for (size_t i = 0; i < shapes.seq.size(); ++i) {
      const Node& e = shapes.seq[i];
      const std::string path = fmt::format("jobs.shapes[{}]", i);
      if (!e.is_map() || !e.find("shape"))
        throw ConfigError(e.origin, path, e.brief(), "expected {shape: [x, y, z], weight: w}", "e.g. {shape: [4, 4, 8], weight: 2}");
      for (size_t k = 0; k < e.map.size(); ++k)
        if (e.map[k].first != "shape" && e.map[k].first != "weight")
          throw ConfigError(e.key_origins[k], path + "." + e.map[k].first, "", "unknown key", "one of: shape, weight");
      double w = 1;
      if (const Node* wn = e.find("weight")) {
        auto v = wn->is_scalar() ? parse_real(wn->scalar) : std::nullopt;
        if (!v || *v <= 0) throw ConfigError(wn->origin, path + ".weight", wn->brief(), "not a positive weight", "a number > 0");
        w = *v;
      }
      mix.push_back({shape_of(*e.find("shape"), path + ".shape"), w});
      wsum += w;
    }
    if (mix.empty()) j.fail("shapes", "no slice shapes", "a list of {shape: [x, y, z], weight: w}");
    const Node probes = list_param(p, "probes", "[]");
    for (size_t i = 0; i < probes.seq.size(); ++i) {
      cfg_.probes.push_back(shape_of(probes.seq[i], fmt::format("probes[{}]", i)));
      probe_names_.push_back(shape_text(triple(probes.seq[i], "probes")));
    }
    // The job stream: Poisson arrivals, shapes by weight, lognormal (or exponential) durations.
    RngStream rng(ctx.seed, "pod.jobs");
    const double rate = j.real("rate");
    const double mean = j.time("duration_mean").to_seconds();
    const double sigma = j.real("duration_sigma");
    // Every job is kept (and indexed by a 32-bit event argument): bound the stream before drawing it.
    constexpr double kMaxJobs = 1e6;
    if (rate * cfg_.horizon_s > kMaxJobs)
      j.fail("rate", fmt::format("{:.3g} jobs/s over a horizon of {:.3g} s is {:.3g} jobs; at most {:.0f} are simulated", rate,
                                 cfg_.horizon_s, rate * cfg_.horizon_s, kMaxJobs),
             "a lower rate or a shorter horizon");
    for (double t = rng.exponential(1.0 / rate); t <= cfg_.horizon_s; t += rng.exponential(1.0 / rate)) {
      double u = rng.uniform() * wsum;
      size_t k = 0;
      while (k + 1 < mix.size() && u >= mix[k].second) u -= mix[k++].second;
      const double d = sigma > 0 ? mean * std::exp(sigma * rng.normal() - 0.5 * sigma * sigma) : rng.exponential(mean);
      jobs_.push_back(PodJob{t, mix[k].first, d});
    }
    const Node& vars = p.node("variants");
    for (size_t i = 0; i < vars.seq.size(); ++i) {
      const Node& v = vars.seq[i];
      const std::string path = fmt::format("variants[{}]", i);
      if (!v.is_map()) throw ConfigError(v.origin, path, v.brief(), "expected a mapping", "{ocs: true, placement: first-fit}");
      Variant var;
      for (size_t k = 0; k < v.map.size(); ++k) {
        const auto& [key, val] = v.map[k];
        if (key == "ocs") {
          if (val.scalar != "true" && val.scalar != "false") throw ConfigError(val.origin, path + ".ocs", val.brief(), "not a boolean", "true or false");
          var.ocs = val.scalar == "true";
        } else if (key == "placement") {
          if (val.scalar == "first-fit") var.placement = PlacementPolicy::FirstFit;
          else if (val.scalar == "best-fit") var.placement = PlacementPolicy::BestFit;
          else throw ConfigError(val.origin, path + ".placement", val.brief(), "unknown placement policy", "one of: first-fit, best-fit");
        } else {
          throw ConfigError(v.key_origins[k], path + "." + key, "", "unknown key", "one of: ocs, placement");
        }
      }
      variants_.push_back(var);
    }
    if (variants_.empty()) p.fail("variants", "no variants", "a list of {ocs: true|false, placement: first-fit|best-fit}");
  }

  void run(RunEnv& env) override {
    PodResults res;
    res.cubes = cfg_.grid;
    res.chips_per_cube = cfg_.chips_per_cube;
    res.hosts_per_cube = cfg_.hosts_per_cube;
    res.host_mtbf_s = cfg_.host_mtbf_s;
    res.host_repair_s = cfg_.host_repair_s;
    res.jobs = jobs_.size();
    res.probe_names = probe_names_;
    for (size_t i = 0; i < variants_.size(); ++i) {
      PodRunConfig c = cfg_;
      c.ocs = variants_[i].ocs;
      c.placement = variants_[i].placement;
      PodRunResult r = run_pod(c, jobs_, seed_);
      res.variants.push_back(PodVariantResult{.ocs = c.ocs,
                                              .placement = placement_name(c.placement),
                                              .utilization = r.utilization,
                                              .healthy_fraction = r.healthy_fraction,
                                              .fragmentation = r.fragmentation,
                                              .stranded_fraction = r.stranded_fraction,
                                              .queue_delay_s = std::move(r.queue_delay_s),
                                              .jobs = r.jobs,
                                              .started = r.started,
                                              .completed = r.completed,
                                              .never_ran = r.never_ran,
                                              .rejected = r.rejected,
                                              .interruptions = r.interruptions,
                                              .host_failures = r.host_failures,
                                              .probe_availability = std::move(r.probe_availability)});
      if (env.progress) env.progress(static_cast<double>(i + 1) / static_cast<double>(variants_.size()));
    }
    report_pod_scheduling(res, env.recorder);
  }

 private:
  struct Variant {
    bool ocs = true;
    PlacementPolicy placement = PlacementPolicy::FirstFit;
  };
  uint64_t seed_;
  PodRunConfig cfg_;
  int edge_ = 4;
  std::vector<PodJob> jobs_;
  std::vector<Variant> variants_;
  std::vector<std::string> probe_names_;
};

Schema pod_study_schema() {
  Schema s = common_study_schema();
  auto pod = std::make_shared<Schema>();
  pod->add("cubes", ParamType::List, "cubes along x, y, z, at most 64 cubes (default [4, 4, 4])").optional();
  pod->add("cube_edge", ParamType::Int, "chips along a cube edge").def("4").range(1, 16);
  pod->add("hosts_per_cube", ParamType::Int, "hosts per cube (TPU v4: 16 hosts of 4 chips)").def("16").range(1, 64);
  s.section("pod", pod, "the pod");
  auto jobs = std::make_shared<Schema>();
  jobs->quantity("rate", UnitKind::Rate, "job arrival rate (Poisson)").def("1/h").positive();
  jobs->quantity("horizon", UnitKind::Time, "simulated time (at most 100 years)").def("720h").range(1, 3.15e18);
  jobs->add("shapes", ParamType::List, "slice shapes in chips with weights: [{shape: [4, 4, 8], weight: 2}, ...]");
  jobs->quantity("duration_mean", UnitKind::Time, "mean job duration").def("8h").positive();
  jobs->add("duration_sigma", ParamType::Real, "lognormal sigma of durations (0: exponential)").def("1").range(0, 5);
  s.section("jobs", jobs, "the job stream (seeded: every variant sees the same jobs)");
  auto fail = std::make_shared<Schema>();
  fail->quantity("host_mtbf", UnitKind::Time, "mean time between failures per host (0: no failures)").def("0").nonneg();
  fail->quantity("host_repair", UnitKind::Time, "mean repair time per host").def("24h").nonneg();
  fail->quantity("restart_penalty", UnitKind::Time, "work redone after an interrupted slice restarts (time since checkpoint)").def("30min").nonneg();
  s.section("failures", fail, "host failures: a failed host makes its cube unhealthy and interrupts the job on it");
  s.add("variants", ParamType::List, "fabrics and policies to compare: [{ocs: true, placement: first-fit}, ...]");
  s.add("backfill", ParamType::Bool, "later jobs may start while the head of the queue waits").def("true");
  s.quantity("ocs_reconfig", UnitKind::Time, "OCS reprogramming before a slice starts (OCS variants)").def("1s").nonneg();
  s.add("probes", ParamType::List, "slice shapes (chips) whose availability on an empty pod is tracked (default none)").optional();
  return s;
}

// ---------------------------------------------------------------- twisted vs regular torus

class TwistStudy final : public Study {
 public:
  explicit TwistStudy(const StudyContext& ctx) : p_(ctx.params) {
    const Node shapes = list_param(p_, "shapes", "[[4, 4, 8], [4, 8, 8]]");
    for (size_t i = 0; i < shapes.seq.size(); ++i) {
      const auto s = triple(shapes.seq[i], fmt::format("shapes[{}]", i));
      if (!twist_allowed({s[0], s[1], s[2]}))
        throw ConfigError(shapes.seq[i].origin, fmt::format("shapes[{}]", i), shapes.seq[i].brief(), "this shape cannot be twisted",
                          "a shape k×k×2k or k×2k×2k, e.g. [4, 4, 8] or [4, 8, 8]");
      if (s[0] * s[1] * s[2] > 4096)
        throw ConfigError(shapes.seq[i].origin, fmt::format("shapes[{}]", i), shapes.seq[i].brief(), "too many chips for an all-to-all study", "at most 4096 chips");
      shapes_.push_back(s);
    }
    if (shapes_.empty()) p_.fail("shapes", "no shapes", "e.g. [[4, 4, 8], [4, 8, 8]]");
    const Node pub = list_param(p_, "published_gains", "[]");
    for (size_t i = 0; i < pub.seq.size(); ++i) {
      auto v = pub.seq[i].is_scalar() ? parse_real(pub.seq[i].scalar) : std::nullopt;
      if (!v) throw ConfigError(pub.seq[i].origin, fmt::format("published_gains[{}]", i), pub.seq[i].brief(), "not a number", "e.g. 1.63");
      published_.push_back(*v);
    }
    if (!published_.empty() && published_.size() != shapes_.size())
      p_.fail("published_gains", fmt::format("{} gains for {} shapes", published_.size(), shapes_.size()), "one gain per shape, or none");
  }

  void run(RunEnv& env) override {
    TwistResults res;
    res.bytes_per_device = p_.real("bytes");
    res.paths_per_pair = p_.integer("paths");
    res.regular_routing = p_.str("regular_routing");
    res.flow_quantum_ns = p_.time("flow_quantum").count_ns();
    CollectiveOptions opt;
    opt.paths = static_cast<int>(p_.integer("paths"));
    const SimTime quantum = p_.time("flow_quantum");
    const RoutePolicy regular_policy = p_.str("regular_routing") == "dimension-order" ? RoutePolicy::DimensionOrder : RoutePolicy::ShortestPath;
    for (size_t i = 0; i < shapes_.size(); ++i) {
      TorusSpec spec;
      spec.dims = {shapes_[i][0], shapes_[i][1], shapes_[i][2]};
      spec.link_Bps = p_.real("link_bandwidth");
      spec.link_latency_ns = p_.time("link_latency").count_ns();
      const Topology reg = build_torus(spec, "regular-" + shape_text(shapes_[i]));
      spec.twisted = true;
      const Topology tw = build_torus(spec, "twisted-" + shape_text(shapes_[i]));
      const double bytes = res.bytes_per_device;
      const SimTime t_reg = collective_time(reg, CollectiveKind::AllToAll, reg.devices(), bytes, opt, regular_policy, quantum);
      const SimTime t_tw = collective_time(tw, CollectiveKind::AllToAll, tw.devices(), bytes, opt, RoutePolicy::ShortestPath, quantum);
      res.rows.push_back(TwistRow{.shape = shape_text(shapes_[i]),
                                  .regular_ms = t_reg.to_ms(),
                                  .twisted_ms = t_tw.to_ms(),
                                  .gain = t_reg.to_seconds() / t_tw.to_seconds(),
                                  .published_gain = published_.empty() ? std::nullopt : std::optional<double>(published_[i]),
                                  .regular_bisection_Bps = bisection_bandwidth(reg).bandwidth_Bps,
                                  .twisted_bisection_Bps = bisection_bandwidth(tw).bandwidth_Bps,
                                  .regular_diameter = diameter_hops(reg),
                                  .twisted_diameter = diameter_hops(tw)});
      if (env.progress) env.progress(static_cast<double>(i + 1) / static_cast<double>(shapes_.size()));
    }
    report_twisted_torus(res, env.recorder);
  }

 private:
  const Params& p_;
  std::vector<std::array<int, 3>> shapes_;
  std::vector<double> published_;
};

Schema twist_schema() {
  Schema s = common_study_schema();
  s.add("shapes", ParamType::List, "slice shapes in chips, each k×k×2k or k×2k×2k (default [[4, 4, 8], [4, 8, 8]])").optional();
  s.add("published_gains", ParamType::List, "published twisted/regular all-to-all throughput per shape, for comparison (default none)").optional();
  s.quantity("bytes", UnitKind::Bytes, "all-to-all buffer per device (1/n of it to each peer)").def("64MiB").positive();
  s.add("paths", ParamType::Int, "flows per pair, each on an ECMP-salted shortest path").def("4").range(1, 64);
  s.enumeration("regular_routing", {"shortest-path", "dimension-order"}, "routing on the regular torus (the twisted one uses shortest paths)")
      .def("shortest-path");
  s.quantity("link_bandwidth", UnitKind::Bandwidth, "ICI link per direction").def("50GB/s").positive();
  s.quantity("link_latency", UnitKind::Time, "per hop").def("500ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  s.quantity("flow_quantum", UnitKind::Time, "flow ends rounded up to this grid so near-simultaneous ends share one rate recomputation (0: exact)")
      .def("0").range(0, 1e9);  // at most 1 s: a larger grid would swamp any all-to-all (100000d made 0.2 ms into 274 years)
  return s;
}

}  // namespace

SLUICE_REGISTER(study, network_studies) {
  reg.add("study", "pod-scheduling",
          "a job stream on a TPU v4 pod: OCS any-cube vs static contiguous placement, first/best fit, host failures",
          pod_study_schema(), StudyFactory([](const StudyContext& c) -> std::unique_ptr<Study> { return std::make_unique<PodStudy>(c); }));
  reg.add("study", "twisted-torus", "all-to-all on twisted vs regular tori (TPU v4 slice shapes), from flows",
          twist_schema(), StudyFactory([](const StudyContext& c) -> std::unique_ptr<Study> { return std::make_unique<TwistStudy>(c); }));
}

}  // namespace sluice::net
