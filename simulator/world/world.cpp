#include "world/world.h"

#include "engine/stall.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "network/generators.h"

namespace sluice {

namespace {
bool has_ocs(const net::Topology& t) {
  for (int v = 0; v < t.node_count(); ++v)
    if (t.node(v).kind == net::NodeKind::Ocs) return true;
  return false;
}
}  // namespace

// An OCS pod starts with no circuits: each slice programs its own (form_slice), so jobs on
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
      owner_(cluster_.topology->devices().size()) {
  router_.set_hash_seed(static_cast<uint64_t>(cluster_.hash_seed));
  flows_.set_adaptive(cluster_.adaptive_routing);
  const auto& t = *cluster_.topology;
  if (t.pod && t.torus) {  // the pod generator's own description, not guessed from names or counts
    pod_ocs_ = t.pod->ocs;
    pod_edge_ = t.pod->cube_edge;
    pod_grid_ = t.pod->grid;
    cube_at_.assign(static_cast<size_t>(device_count()), -1);
    for (int d = 0; d < device_count(); ++d) {
      const auto& c = t.node(device_node(d)).coord;
      cube_at_[static_cast<size_t>(t.torus->index(c[0], c[1], c[2]))] = d;
    }
  }
}

std::vector<int> World::form_slice(const std::vector<int>& cubes, std::array<int, 3> shape, bool twist, const std::string& who) {
  auto& t = *cluster_.topology;
  const int e = pod_edge_;
  const auto& g = pod_grid_;
  auto cube_coord = [&](int c) { return std::array<int, 3>{c % g[0], (c / g[0]) % g[1], c / (g[0] * g[1])}; };
  // Each cube's position in the slice, in cubes.
  std::vector<std::array<int, 3>> pos(cubes.size());
  std::array<int, 3> dims = shape;
  if (pod_ocs_) {
    for (size_t i = 0; i < cubes.size(); ++i) {
      const int k = static_cast<int>(i);
      pos[i] = {k % shape[0], (k / shape[0]) % shape[1], k / (shape[0] * shape[1])};
    }
  } else {
    // A contiguous block, possibly wrapping round the static torus: per dimension, its extent
    // and the first coordinate from which the block is consecutive.
    for (int d = 0; d < 3; ++d) {
      std::vector<char> used(static_cast<size_t>(g[static_cast<size_t>(d)]), 0);
      for (int c : cubes) used[static_cast<size_t>(cube_coord(c)[static_cast<size_t>(d)])] = 1;
      int extent = 0;
      for (char u : used) extent += u;
      int start = 0;
      for (int s0 = 0; s0 < g[static_cast<size_t>(d)]; ++s0)
        if (used[static_cast<size_t>(s0)] && !used[static_cast<size_t>((s0 + g[static_cast<size_t>(d)] - 1) % g[static_cast<size_t>(d)])]) start = s0;
      dims[static_cast<size_t>(d)] = extent;
      for (size_t i = 0; i < cubes.size(); ++i)
        pos[i][static_cast<size_t>(d)] = (cube_coord(cubes[i])[static_cast<size_t>(d)] - start + g[static_cast<size_t>(d)]) % g[static_cast<size_t>(d)];
    }
  }
  const int X = dims[0] * e, Y = dims[1] * e, Z = dims[2] * e;
  std::vector<int> at(static_cast<size_t>(X * Y * Z), -1);  // device by slice coordinate
  for (size_t i = 0; i < cubes.size(); ++i) {
    const auto cc = cube_coord(cubes[i]);
    for (int z = 0; z < e; ++z)
      for (int y = 0; y < e; ++y)
        for (int x = 0; x < e; ++x) {
          const int d = cube_at_[static_cast<size_t>(t.torus->index(cc[0] * e + x, cc[1] * e + y, cc[2] * e + z))];
          const int sx = pos[i][0] * e + x, sy = pos[i][1] * e + y, sz = pos[i][2] * e + z;
          at[static_cast<size_t>(sx + X * (sy + Y * sz))] = d;
        }
  }
  if (pod_ocs_) {
    // The slice's torus: a circuit for every neighbour pair that crosses a cube face
    // (through the OCS of that dimension and face position), wrap-around included.
    double bw = 0;
    int64_t lat = 0;
    for (int l = 0; l < t.link_count(); ++l)
      if (t.link(l).label == "ici") {
        bw = t.link(l).bandwidth_Bps;
        lat = t.link(l).latency_ns;
        break;
      }
    std::vector<int> ocs_ids;
    for (int v = 0; v < t.node_count(); ++v)
      if (t.node(v).kind == net::NodeKind::Ocs) ocs_ids.push_back(v);
    const std::array<int, 3> D{X, Y, Z};
    // Twisted (TPU v4's OCS slices of shape k×k×2k or k×2k×2k): a wrap-around link of a short
    // dimension (extent k) lands k further along every long one (extent 2k). k is a multiple
    // of the cube edge, so the far end keeps its face position: the same OCS carries it.
    const bool twisted = twist && net::twist_allowed({X, Y, Z});
    const int k_short = std::min({X, Y, Z});
    for (int z = 0; z < Z; ++z)
      for (int y = 0; y < Y; ++y)
        for (int x = 0; x < X; ++x) {
          const std::array<int, 3> c{x, y, z};
          for (int d = 0; d < 3; ++d) {
            if (c[static_cast<size_t>(d)] % e != e - 1) continue;  // inside a cube: electrical
            std::array<int, 3> n = c;
            n[static_cast<size_t>(d)] = (c[static_cast<size_t>(d)] + 1) % D[static_cast<size_t>(d)];
            if (twisted && c[static_cast<size_t>(d)] == D[static_cast<size_t>(d)] - 1 && D[static_cast<size_t>(d)] == k_short)
              for (int l = 0; l < 3; ++l)
                if (D[static_cast<size_t>(l)] == 2 * k_short) n[static_cast<size_t>(l)] = (n[static_cast<size_t>(l)] + k_short) % (2 * k_short);
            const int a = at[static_cast<size_t>(c[0] + X * (c[1] + Y * c[2]))];
            const int b = at[static_cast<size_t>(n[0] + X * (n[1] + Y * n[2]))];
            const int u = c[static_cast<size_t>((d + 1) % 3)] % e, w = c[static_cast<size_t>((d + 2) % 3)] % e;
            const size_t oi = static_cast<size_t>(d * e * e + u * e + w);
            const int e = t.add_link(device_node(a), device_node(b), bw, lat, "ici-ocs-slice", 0, true,
                                     oi < ocs_ids.size() ? ocs_ids[oi] : -1);
            if (running_ && cluster_.ocs_reconfigure_ns > 0)
              for (int l : {e, t.link(e).reverse}) {
                flows_.set_link_capacity(l, 0);
                flows_.set_link_capacity_at(engine_.now() + SimTime::ns(cluster_.ocs_reconfigure_ns), l, bw);
              }
          }
        }
    router_.invalidate();
    slices_.push_back(SliceRecord{who, {X, Y, Z}, twisted ? "twisted torus" : "torus"});
  } else {
    slices_.push_back(SliceRecord{who, {X, Y, Z}, "static block"});
  }
  // Ring order: a boustrophedon snake over the slice, so ring neighbours are torus neighbours.
  std::vector<int> order;
  long row = 0;
  for (int z = 0; z < Z; ++z)
    for (int yi = 0; yi < Y; ++yi) {
      const int y = (z % 2 == 0) ? yi : Y - 1 - yi;
      for (int xi = 0; xi < X; ++xi) {
        const int x = (row % 2 == 0) ? xi : X - 1 - xi;
        order.push_back(at[static_cast<size_t>(x + X * (y + Y * z))]);
      }
      ++row;
    }
  return order;
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

void World::workload_done() {
  if (--holding_ <= 0) engine_.stop();
}

void World::run(SimTime until) {
  holding_ = 0;
  for (const auto& w : workloads_) w->start(*this);
  for (const auto& w : workloads_) holding_ += w->holds_world() ? 1 : 0;
  for (const auto& f : faults_) f->start(*this);
  running_ = true;
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
  if (!slices_.empty()) {
    Json sl = Json::array();
    for (const auto& r : slices_)
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
    m["fabric"] = r;
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
  }
}

}  // namespace sluice
