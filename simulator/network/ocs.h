// An optical circuit switch (OCS): N ports, each fibered to a device; a circuit joins two
// ports into a device-to-device link. Reprogramming tears down the circuits that change at
// once and brings the new ones up after the reconfiguration delay: meanwhile the affected
// links carry nothing, while circuits that stay are untouched.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "network/flow.h"

namespace sluice::net {

class Ocs {
 public:
  // `node` is the OCS vertex in the topology (kind Ocs).
  Ocs(int node, int ports, SimTime reconfig_delay, double link_Bps, int64_t link_latency_ns);
  // Fibers port `port` to device node `device`.
  void attach(int port, int device);
  // Programs `circuits` (port pairs; each port at most once). Returns when the new circuits
  // carry traffic. Throws std::invalid_argument on a bad port or a port used twice.
  SimTime program(Topology& topo, FlowSim& sim, const std::vector<std::pair<int, int>>& circuits);
  int ports() const { return static_cast<int>(port_device_.size()); }
  size_t circuits() const { return live_.size(); }
  uint64_t reconfigurations() const { return reconfigurations_; }
  // The forward link id of the live circuit between two ports, -1 when none.
  int circuit_link(int a, int b) const;

 private:
  int node_;
  std::vector<int> port_device_;
  SimTime delay_;
  double link_Bps_;
  int64_t latency_ns_;
  std::map<std::pair<int, int>, int> live_;   // (lo port, hi port) -> forward link
  std::map<std::pair<int, int>, int> known_;  // every link ever made for a port pair (reused)
  uint64_t reconfigurations_ = 0;
};

}  // namespace sluice::net
