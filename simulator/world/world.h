// The world: one cluster (a topology of devices, switches and links, with the hardware of its
// devices), one engine and one flow network over the cluster's links, and the workloads placed
// on it. Every workload runs on this engine and every transfer it makes is a flow on this
// fabric, so workloads that share links slow each other. Built once per run.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "hardware/spec.h"
#include "network/flow.h"
#include "network/routing.h"
#include "network/topology.h"
#include "recorder/recorder.h"
#include "registry/registry.h"

namespace sluice {

class World;

// Something that runs on the world: a serving deployment, a training job. It gets the
// engine, the fabric and its devices from the world; it hands plain results to the recorder.
class Workload {
 public:
  explicit Workload(std::string name) : name_(std::move(name)) {}
  virtual ~Workload() = default;
  const std::string& name() const { return name_; }
  // Schedules its first events.
  virtual void start(World& world) = 0;
  // True while the run must go on for this workload (false once it is done, and always for a
  // background job that runs as long as the others do).
  virtual bool holds_world() const = 0;
  // After the engine stopped: end-of-run accounting (stalls, truncation).
  virtual void finish(World& world) = 0;
  // Hands its results to the recorder; `scoped` is true when the world has several workloads
  // (metrics go under workloads.<name>, files are prefixed with the name).
  virtual void report(Recorder& rec, bool scoped) const = 0;

 private:
  std::string name_;
};

// The cluster: a topology and the hardware of its devices (one kind per cluster).
struct Cluster {
  std::shared_ptr<net::Topology> topology;
  HardwareSpec hardware;
};

class World {
 public:
  World(uint64_t seed, Cluster cluster);
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  Engine& engine() { return engine_; }
  net::FlowSim& fabric() { return flows_; }
  const net::Topology& topology() const { return *cluster_.topology; }
  const HardwareSpec& hardware() const { return cluster_.hardware; }

  // Devices are numbered 0..device_count()-1 in the topology's device order.
  int device_count() const { return static_cast<int>(topology().devices().size()); }
  int device_node(int device) const { return topology().devices()[static_cast<size_t>(device)]; }
  // The server (or TPU cube) of a device, -1 when the topology has none.
  int group_of(int device) const { return topology().node(device_node(device)).group; }
  // Claims devices for a workload; throws std::invalid_argument naming the holder when one is taken.
  void claim(const std::vector<int>& devices, const std::string& who);
  // The workload holding a device, or "" when free.
  const std::string& holder(int device) const { return owner_[static_cast<size_t>(device)]; }

  // TPU v4 pods (topology family tpu-v4-pod-*): cubes of edge^3 chips on a grid of cubes.
  bool is_pod() const { return pod_edge_ > 0; }
  bool pod_has_ocs() const { return pod_ocs_; }
  int pod_cube_edge() const { return pod_edge_; }
  std::array<int, 3> pod_grid() const { return pod_grid_; }
  // Forms a slice of `shape` (in cubes) from `cubes` (cube indices; for a static pod a
  // contiguous block): returns its chips as device indices in the slice's ring order (a
  // snake over the slice's own torus coordinates). With OCS the slice is wired as a torus of
  // its own: the circuits between its cubes' faces are programmed (the pod starts with none).
  std::vector<int> form_slice(const std::vector<int>& cubes, std::array<int, 3> shape);

  void add(std::unique_ptr<Workload> w) { workloads_.push_back(std::move(w)); }
  const std::vector<std::unique_ptr<Workload>>& workloads() const { return workloads_; }

  // A workload that held the world open calls this when it is done; the run stops when none holds it.
  void workload_done();
  // Runs every workload to its end (or `until`), then lets each finish its accounting.
  void run(SimTime until = SimTime::max());
  // Results of every workload, and the world's own counters (events, flows).
  void report(Recorder& rec) const;
  // The timeline every workload writes to (handed to the recorder after the run).
  TraceWriter& trace() { return trace_; }
  // Reports the fraction done (0..1) while running; set by the run layer, may be empty.
  std::function<void(double)> progress;
  // A fresh Perfetto process id for a workload's tracks.
  int trace_pid() { return next_pid_++; }

 private:
  static Cluster prepare(Cluster c);
  Engine engine_;
  Cluster cluster_;
  net::Router router_;
  net::FlowSim flows_;
  std::vector<std::string> owner_;
  std::vector<std::unique_ptr<Workload>> workloads_;
  int holding_ = 0;
  SimTime ran_until_;
  TraceWriter trace_;
  int next_pid_ = 1;
  int pod_edge_ = 0;
  bool pod_ocs_ = false;
  std::array<int, 3> pod_grid_{0, 0, 0};
  std::vector<int> cube_at_;  // pod: device index by physical chip linear coordinate
};

// What a workload factory gets besides its own parameters.
struct WorkloadContext {
  const Registry& registry;
  uint64_t seed;
  std::string name;
};
// Builds a workload of one kind (category "workload") from its validated parameters, placing
// it on devices of `world` (see world/placement.h). Throws ConfigError on a bad setting.
using WorkloadKindFactory = std::function<std::unique_ptr<Workload>(const Params& p, World& world, const WorkloadContext& ctx)>;

}  // namespace sluice
