#include "network/ocs.h"

#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace sluice::net {

Ocs::Ocs(int node, int ports, SimTime reconfig_delay, double link_Bps, int64_t link_latency_ns)
    : node_(node), port_device_(static_cast<size_t>(ports), -1), delay_(reconfig_delay), link_Bps_(link_Bps), latency_ns_(link_latency_ns) {
  if (ports < 2) throw std::invalid_argument("an OCS needs at least 2 ports");
}

void Ocs::attach(int port, int device) {
  if (port < 0 || port >= ports()) throw std::invalid_argument(fmt::format("OCS port {} out of range 0..{}", port, ports() - 1));
  port_device_[static_cast<size_t>(port)] = device;
}

int Ocs::circuit_link(int a, int b) const {
  auto it = live_.find({std::min(a, b), std::max(a, b)});
  return it == live_.end() ? -1 : it->second;
}

SimTime Ocs::program(Topology& topo, FlowSim& sim, const std::vector<std::pair<int, int>>& circuits) {
  std::set<int> used;
  std::map<std::pair<int, int>, int> want;
  for (auto [a, b] : circuits) {
    for (int p : {a, b}) {
      if (p < 0 || p >= ports()) throw std::invalid_argument(fmt::format("OCS circuit {}-{}: port {} out of range 0..{}", a, b, p, ports() - 1));
      if (port_device_[static_cast<size_t>(p)] < 0) throw std::invalid_argument(fmt::format("OCS port {} has no fiber attached", p));
      if (!used.insert(p).second) throw std::invalid_argument(fmt::format("OCS port {} is used by two circuits", p));
    }
    if (a == b) throw std::invalid_argument(fmt::format("OCS circuit from port {} to itself", a));
    want[{std::min(a, b), std::max(a, b)}] = -1;
  }
  ++reconfigurations_;
  const SimTime up_at = sim.engine().now() + delay_;
  // Tear down circuits that change: they carry nothing from now on.
  for (auto it = live_.begin(); it != live_.end();) {
    if (want.count(it->first)) { ++it; continue; }
    const int e = it->second;
    sim.set_link_capacity(e, 0);
    sim.set_link_capacity(topo.link(e).reverse, 0);
    topo.mutable_link(e).up = false;
    topo.mutable_link(topo.link(e).reverse).up = false;
    it = live_.erase(it);
  }
  // New circuits: dark during the reconfiguration, full bandwidth after it.
  for (auto& [pp, link] : want) {
    if (live_.count(pp)) continue;
    auto k = known_.find(pp);
    int e;
    if (k != known_.end()) {
      e = k->second;
    } else {
      e = topo.add_link(port_device_[static_cast<size_t>(pp.first)], port_device_[static_cast<size_t>(pp.second)], link_Bps_, latency_ns_,
                        "ocs-circuit", 0, true, node_);
      known_[pp] = e;
    }
    topo.mutable_link(e).up = true;
    topo.mutable_link(topo.link(e).reverse).up = true;
    sim.set_link_capacity(e, 0);
    sim.set_link_capacity(topo.link(e).reverse, 0);
    sim.set_link_capacity_at(up_at, e, link_Bps_);
    sim.set_link_capacity_at(up_at, topo.link(e).reverse, link_Bps_);
    live_[pp] = e;
  }
  sim.router().invalidate();
  return up_at;
}

}  // namespace sluice::net
