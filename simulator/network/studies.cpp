// Network studies (category "study"): twisted against regular torus all-to-all. (The pod
// job stream, OCS against static placement, is workloads/cluster/pod_study.cpp.)
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "config/shapes.h"
#include "run/scenario.h"
#include "network/collective.h"
#include "network/generators.h"
#include "recorder/network_results.h"
#include "recorder/network_report.h"

namespace sluice::net {

namespace {


// ---------------------------------------------------------------- twisted vs regular torus

class TwistStudy final : public Study {
 public:
  explicit TwistStudy(const StudyContext& ctx) : p_(ctx.params) {
    const Node shapes = list_param(p_, "shapes", "[[4, 4, 8], [4, 8, 8]]");
    for (size_t i = 0; i < shapes.seq.size(); ++i) {
      const auto s = shape_triple(shapes.seq[i], fmt::format("shapes[{}]", i));
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

SLUICE_REGISTER(study, twisted_torus_study) {
  reg.add("study", "twisted-torus", "all-to-all on twisted vs regular tori (TPU v4 slice shapes), from flows",
          twist_schema(), StudyFactory([](const StudyContext& c) -> std::unique_ptr<Study> { return std::make_unique<TwistStudy>(c); }));
}

}  // namespace sluice::net
