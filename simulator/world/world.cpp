#include "world/world.h"

#include "engine/stall.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>


namespace sluice {

namespace {
bool has_ocs(const net::Topology& t) {
  for (int v = 0; v < t.node_count(); ++v)
    if (t.node(v).kind == net::NodeKind::Ocs) return true;
  return false;
}
}  // namespace

// An OCS pod starts with no circuits: each slice programs its own (SliceManager::form), so jobs on
// different slices never share a link. Routes then follow the links that exist.
Cluster World::prepare(Cluster c) {
  auto& t = *c.topology;
  if (has_ocs(t))
    for (int e = 0; e < t.link_count(); ++e)
      if (t.link(e).ocs >= 0) {
        t.mutable_link(e).up = false;
        t.mutable_link(e).bandwidth_Bps = 0;
      }
  return c;
}

World::World(uint64_t seed, Cluster cluster)
    : engine_(seed),
      cluster_(prepare(std::move(cluster))),
      router_(*cluster_.topology, has_ocs(*cluster_.topology) ? net::RoutePolicy::ShortestPath : net::RoutePolicy::Auto),
      flows_(engine_, *cluster_.topology, router_),
      slices_(*cluster_.topology, router_, flows_, engine_, cluster_.ocs_reconfigure_ns),
      owner_(cluster_.topology->devices().size()),
      activity_(cluster_.topology->devices().size()),
      device_hw_(cluster_.topology->devices().size(), &cluster_.hardware) {
  router_.set_hash_seed(static_cast<uint64_t>(cluster_.hash_seed));
  flows_.set_adaptive(cluster_.adaptive_routing);
  flows_.set_quantum(SimTime::ns(cluster_.flow_quantum_ns));
  slices_.set_fault_hooks({[this](int first, int end) { circuits_added(first, end); }, [this](int link) { circuit_torn(link); }});
}

void World::claim(const std::vector<int>& devices, const std::string& who) {
  for (int d : devices) {
    if (d < 0 || d >= device_count())
      throw std::invalid_argument(fmt::format("device {} does not exist: the cluster has devices 0-{}", d, device_count() - 1));
    auto& o = owner_[static_cast<size_t>(d)];
    if (!o.empty())
      throw std::invalid_argument(fmt::format("device {} ({}) is already held by workload '{}'", d,
                                              topology().node(device_node(d)).name, o));
  }
  for (int d : devices) owner_[static_cast<size_t>(d)] = who;
}

void World::add_activity(int device, const DeviceActivity& a, const HardwareSpec* hw) {
  auto& x = activity_.at(static_cast<size_t>(device));
  x.busy_s += a.busy_s;
  x.compute_s += a.compute_s;
  x.off_s += a.off_s;
  if (a.profile) {
    if (!x.profile) x.profile = a.profile;
    else {
      auto both = std::make_shared<BusyProfile>(*x.profile);
      both->merge(*a.profile);
      x.profile = std::move(both);
    }
  }
  if (hw) device_hw_[static_cast<size_t>(device)] = hw;
}

void World::workload_done() {
  if (--holding_ <= 0) engine_.stop();
}

void World::run(SimTime until) {
  holding_ = 0;
  for (const auto& w : workloads_) w->start(*this);
  for (const auto& w : workloads_) holding_ += w->holds_world() ? 1 : 0;
  for (const auto& f : faults_) f->start(*this);
  slices_.started();
  if (holding_ > 0) engine_.run(until);
  ran_until_ = engine_.now();
  flows_.check_invariants();
  for (const auto& w : workloads_) w->finish(*this);
  // Every workload agrees: one that still holds the run open when nothing is left to happen
  // has stalled, and the run fails (workloads say why in finish(); this is the backstop).
  if (engine_.pending() == 0)
    for (const auto& w : workloads_)
      if (w->holds_world())
        throw WorkloadStalled(fmt::format("workload '{}' stalled at {}: it is not done and nothing is left to happen", w->name(),
                                             engine_.now().str()));
}

void World::report(Recorder& rec) const {
  const bool scoped = workloads_.size() > 1;
  for (const auto& w : workloads_) w->report(rec, scoped);
  rec.trace() = trace_;
  const auto& fs = flows_.stats();
  Json& m = rec.metrics()["world"];
  m["topology"] = topology().name();
  m["devices"] = device_count();
  m["capex_usd"] = net::capex(topology()).total_usd();
  m["workloads"] = workloads_.size();
  m["simulated_s"] = ran_until_.to_seconds();
  m["events"] = engine_.events_processed();
  if (!slices_.formed().empty()) {
    Json sl = Json::array();
    for (const auto& r : slices_.formed())
      sl.push_back(Json{{"workload", r.workload}, {"chips", fmt::format("{}x{}x{}", r.chips[0], r.chips[1], r.chips[2])}, {"wiring", r.wiring}});
    m["slices"] = sl;
  }
  m["flows"] = Json{{"started", fs.started}, {"completed", fs.completed}, {"rate_recomputations", fs.recomputes},
                    {"max_concurrent", fs.max_active}};
  // How the fabric was used: the routing, the link that carried the most bytes, and how many
  // flows ran below their bottleneck link's capacity because another flow shared it.
  {
    const auto& topo = topology();
    Json r{{"routing", cluster_.adaptive_routing ? "adaptive" : "ecmp"}, {"hash_seed", cluster_.hash_seed},
           {"flows_split", fs.sprayed},
           {"shared_bottleneck_fraction",
            fs.unsplit_completed > 0 ? static_cast<double>(fs.shared_bottleneck) / static_cast<double>(fs.unsplit_completed) : 0.0}};
    if (cluster_.flow_quantum_ns > 1) r["flow_quantum_ns"] = cluster_.flow_quantum_ns;  // (only when set: exact runs' outputs unchanged)
    // The most loaded link is the busiest for its bandwidth (bytes carried over capacity x
    // run time), so a 50 GB/s uplink outranks an NVLink port that moved more bytes.
    const auto lb = flows_.carried_link_bytes();
    const double T = ran_until_.to_seconds();
    auto util = [&](size_t l) {
      const double bw = topo.link(static_cast<int>(l)).bandwidth_Bps;
      return T > 0 && bw > 0 ? lb[l] / (bw * T) : 0.0;
    };
    int top = -1;
    for (size_t l = 0; l < lb.size(); ++l)
      if (lb[l] > 0 && (top < 0 || util(l) > util(static_cast<size_t>(top)))) top = static_cast<int>(l);
    if (top >= 0) {
      const auto& link = topo.link(top);
      r["most_loaded_link"] = Json{{"link", fmt::format("{} -> {}", topo.node(link.src).name, topo.node(link.dst).name)},
                                   {"bytes", lb[static_cast<size_t>(top)]},
                                   {"mean_utilization", util(static_cast<size_t>(top))}};
    }
    // The hottest links, busiest first (ties by link index): where a planner looks for the
    // fabric's bottleneck, beyond the single most loaded one.
    std::vector<size_t> used;
    for (size_t l = 0; l < lb.size(); ++l)
      if (lb[l] > 0) used.push_back(l);
    const size_t k = std::min<size_t>(used.size(), 10);
    std::partial_sort(used.begin(), used.begin() + static_cast<std::ptrdiff_t>(k), used.end(), [&](size_t a, size_t b) {
      const double ua = util(a), ub = util(b);
      return ua != ub ? ua > ub : a < b;
    });
    Json hot = Json::array();
    for (size_t i = 0; i < k; ++i) {
      const auto& link = topo.link(static_cast<int>(used[i]));
      hot.push_back(Json{{"link", fmt::format("{} -> {}", topo.node(link.src).name, topo.node(link.dst).name)},
                         {"id", used[i]},
                         {"capacity_Bps", link.bandwidth_Bps},
                         {"bytes", lb[used[i]]},
                         {"mean_utilization", util(used[i])}});
    }
    if (!hot.empty()) r["hottest_links"] = hot;
    m["fabric"] = r;
    // How routes were found: the simulator's own work, as the event count is (not a metric: a
    // fast-forward walks fewer routes for the same results).
    const auto& ws = router_.walk_stats();
    if (ws.walks > 0)
      rec.summary(fmt::format("routes: {} walked over shortest-path distances, {} of them from the fabric's structure; {} shortest-path "
                              "searches for the rest",
                              ws.walks, ws.structural, ws.searches));
  }
  if (!faults_.empty()) {
    // Availability per component class: 1 − (time components were down) / (components × run time).
    Json& f = m["faults"];
    Json procs = Json::array();
    for (const auto& p : faults_) procs.push_back(p->describe());
    f["processes"] = procs;
    f["failures"] = fstats_.failures;
    f["repairs"] = fstats_.repairs;
    f["flows_rerouted"] = fstats_.flows_rerouted;
    f["flows_stalled"] = fstats_.flows_stalled;
    const int64_t T = ran_until_.count_ns();
    for (int c = 0; c < kFaultClasses; ++c) {
      if (!built_[static_cast<size_t>(c)]) continue;
      const auto& v = comps_[static_cast<size_t>(c)];
      if (v.empty()) continue;
      double down = 0;
      long failures = 0;
      for (const auto& comp : v) {
        down += static_cast<double>(comp.down_ns + (comp.down > 0 ? T - comp.down_since_ns : 0));
        failures += comp.failures;
      }
      Json& k = f["classes"][fault_class_name(static_cast<FaultClass>(c))];
      k["components"] = v.size();
      k["failures"] = failures;
      k["availability"] = T > 0 ? 1.0 - down / (static_cast<double>(v.size()) * static_cast<double>(T)) : 1.0;
    }
    rec.summary(fmt::format("faults: {} failures, {} repairs; {} flows re-routed, {} stalled", fstats_.failures, fstats_.repairs,
                            fstats_.flows_rerouted, fstats_.flows_stalled));
    if (slowdowns_ > 0) {
      // Spells still going at the end count up to it.
      double slow_s = slow_device_s_;
      for (size_t d = 0; d < dev_slow_.size(); ++d)
        if (dev_slow_[d] != 1.0) slow_s += static_cast<double>(T - dev_slow_since_[d]) / 1e9;
      f["slowdowns"] = slowdowns_;
      f["slow_device_s"] = slow_s;
      rec.summary(fmt::format("stragglers: {} slowdowns, {:.1f} device-hours slow", slowdowns_, slow_s / 3600));
    }
  }
  {
    // Energy, cost and carbon: the whole cluster's, then each workload's share (last: `m` may move
    // as keys are added at the top level).
    const EnergyLedger ledger(topology(), device_hw_, activity_, ran_until_.to_seconds(), cluster_.economics);
    ledger.report_world(rec.metrics()["world"]);
    rec.summary(ledger.world_summary());
    for (const auto& w : workloads_) {
      const std::string key = w->metrics_key();
      if (key.empty()) continue;
      std::vector<int> held;
      for (int d = 0; d < device_count(); ++d)
        if (owner_[static_cast<size_t>(d)] == w->name()) held.push_back(d);
      Json& target = scoped ? rec.metrics()["workloads"][w->name()] : rec.metrics()[key];
      const WorkUnits units = w->work_done();
      ledger.report_workload(target, held, units);
      const std::string line = ledger.workload_summary(held, units);
      if (!line.empty()) rec.summary(scoped ? fmt::format("[{}] {}", w->name(), line) : line);
    }
  }
}

}  // namespace sluice
