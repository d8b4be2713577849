// A TPU pod's slices (a topology whose generator describes its pod, Topology::pod: cubes of
// edge^3 chips on a grid of cubes): which chip sits where, forming a slice (with OCS, the
// circuits of its own torus), tearing one down when its job moves, and the record of every
// slice formed. The world holds one (World::slices()); placement, the pod study and training's
// recovery form slices through it.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "network/flow.h"
#include "network/routing.h"
#include "network/topology.h"

namespace sluice {

class SliceManager {
 public:
  // On a topology that is no pod the manager is inert (is_pod() false).
  SliceManager(net::Topology& t, net::Router& router, net::FlowSim& flows, Engine& engine, int64_t reconfigure_ns);
  SliceManager(const SliceManager&) = delete;
  SliceManager& operator=(const SliceManager&) = delete;

  bool is_pod() const { return edge_ > 0; }
  bool has_ocs() const { return ocs_; }
  int cube_edge() const { return edge_; }
  std::array<int, 3> grid() const { return grid_; }

  // Forms a slice of `shape` (in cubes) from `cubes` (cube indices; for a static pod a
  // contiguous block): returns its chips as device indices in the slice's ring order (a
  // snake over the slice's own torus coordinates). With OCS the slice is wired as a torus of
  // its own: the circuits between its cubes' faces are programmed (the pod starts with none).
  // A slice formed while the run goes on (a re-formed slice) has its circuits up only
  // `cluster.ocs_reconfigure` later; flows on them wait until then. `twist` (OCS only): the
  // wrap-around links of the slice's short dimensions are shifted half-way along its long
  // ones where the shape in chips allows (k×k×2k, k×2k×2k, k >= 3), as TPU v4 wires such
  // slices; a static block keeps the pod's own links. `who` names the slice in the metrics.
  std::vector<int> form(const std::vector<int>& cubes, std::array<int, 3> shape, bool twist, const std::string& who);
  // OCS pods: removes the circuits a slice of these devices had programmed (it re-forms elsewhere).
  void tear_down(const std::vector<int>& devices);
  // The run has started: slices formed from now on pay the OCS reconfiguration time.
  void started() { running_ = true; }
  // The world's fault state, told of the circuits a slice programs (link ids [first, end), both
  // directions) and of each circuit torn down (up or held down by a fault), so that a circuit
  // through a failed OCS or at a failed chip is born down, and one torn down while a fault holds
  // it stays down at the repair.
  struct FaultHooks {
    std::function<void(int first, int end)> added;
    std::function<void(int link)> torn;
  };
  void set_fault_hooks(FaultHooks h) { hooks_ = std::move(h); }

  // Every slice formed so far (re-formed ones again), for the metrics.
  struct Record {
    std::string workload;
    std::array<int, 3> chips;
    std::string wiring;  // "twisted torus", "torus" (OCS) or "static block"
  };
  const std::vector<Record>& formed() const { return formed_; }

 private:
  int device_node(int device) const { return topo_.devices()[static_cast<size_t>(device)]; }
  net::Topology& topo_;
  net::Router& router_;
  net::FlowSim& flows_;
  Engine& engine_;
  int64_t reconfigure_ns_ = 0;
  bool running_ = false;
  int edge_ = 0;
  bool ocs_ = false;
  std::array<int, 3> grid_{0, 0, 0};
  std::vector<int> cube_at_;  // device index by physical chip linear coordinate
  std::vector<Record> formed_;
  FaultHooks hooks_;
};

}  // namespace sluice
