// The world: one cluster (a topology of devices, switches and links, with the hardware of its
// devices), one engine and one flow network over the cluster's links, and the workloads placed
// on it. Every workload runs on this engine and every transfer it makes is a flow on this
// fabric, so workloads that share links slow each other. Built once per run.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "hardware/spec.h"
#include "network/flow.h"
#include "network/routing.h"
#include "network/topology.h"
#include "recorder/recorder.h"
#include "registry/registry.h"
#include "world/energy.h"
#include "world/slices.h"

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
  // Some of its devices failed (`up` false) or came back (true): a chip, a host, a node or a
  // rack that holds them changed state. Called at the instant of the change.
  virtual void on_devices_changed(World& world, const std::vector<int>& devices, bool up) {
    (void)world, (void)devices, (void)up;
  }
  // Some of its devices are failing: called at the instant of the failure before anything
  // else reacts to it (the fabric tears down their links and moves the flows over them
  // next; on_devices_changed follows). A workload that stops at once (a training job) lets
  // go of its transfers here, so none of them is moved.
  virtual void before_devices_fail(World& world, const std::vector<int>& devices) { (void)world, (void)devices; }
  // Hands its results to the recorder; `scoped` is true when the world has several workloads
  // (metrics go under workloads.<name>, files are prefixed with the name).
  virtual void report(Recorder& rec, bool scoped) const = 0;
  // Its metrics.json block when it is the world's only workload ("serving", "training", ...),
  // and the work its energy and cost are divided by (world/energy.h): {"output_token", n}, ...
  // The world adds its share of the cluster's energy, cost and carbon there (nothing when "").
  virtual std::string metrics_key() const { return ""; }
  virtual WorkUnits work_done() const { return {}; }

 private:
  std::string name_;
};

// The cluster: a topology and the hardware of its devices (one kind per cluster).
struct Cluster {
  std::shared_ptr<net::Topology> topology;
  HardwareSpec hardware;
  int rack_nodes = 4;            // servers per rack (a TPU pod's rack is its cube: one power domain)
  int chips_per_host = 4;        // TPU pods: chips per host (a GPU server is one host)
  int64_t reroute_penalty_ns = 0;  // what a flow pays to move off a failed link (path recomputation, transport restart)
  int64_t ocs_reconfigure_ns = 0;  // OCS pods: circuits programmed during the run carry traffic this long after (mirrors settle)
  bool adaptive_routing = false;   // flows split evenly over equal-cost paths (AR, packet spraying); else ECMP by hash
  int64_t hash_seed = 0;           // ECMP's hash seed (0: the built-in choice)
  int64_t flow_quantum_ns = 0;     // flow ends rounded up to this grid (0: exact; FlowSim::set_quantum)
  // Storage servers on the fabric (checkpoints written to them as flows): how many, each one's
  // link, its price; their topology nodes once added (world_study.cpp adds them).
  int storage_servers = 0;
  double storage_Bps = 0;
  double storage_usd = 0;
  std::vector<int> storage_nodes;
  Economics economics;  // power of what is not a device, the facility and its prices (world/energy.h)
};

// What can fail, by class. Correlated failures follow the cluster's structure: a rack takes
// its nodes, a node (server or TPU cube) its hosts, a host its chips, a chip its links; a
// switch takes its links, an OCS the circuits through it.
enum class FaultClass : uint8_t { Chip, Host, Node, Rack, Link, Switch, Ocs };
constexpr int kFaultClasses = 7;
const char* fault_class_name(FaultClass c);
// nullopt when `name` is not one of chip, host, node, rack, link, switch, ocs.
std::optional<FaultClass> parse_fault_class(const std::string& name);
std::string fault_class_list();

// One component that can fail: the devices and directed links it takes down with it.
struct FaultComponent {
  FaultClass cls = FaultClass::Chip;
  std::string name;          // chip: the device's node name; host3, node2, rack0; a switch's or OCS's node name; link a~b
  std::vector<int> devices;  // device indices
  std::vector<int> links;    // directed link ids (both directions)
  int node = -1;             // switch or OCS: its topology node
  int down = 0;              // fault processes holding it down (two may overlap)
  int64_t down_since_ns = 0, down_ns = 0;
  long failures = 0;
};

class World;
// A fault process (category "fault"): schedules failures and repairs of components on the
// world's engine, each process with its own random streams.
class FaultProcess {
 public:
  virtual ~FaultProcess() = default;
  virtual void start(World& world) = 0;
  virtual std::string describe() const = 0;
  // False for a process that never takes a component down (stragglers only slow devices):
  // a world with no process that can fail needs no checkpoints, restarts or watchdogs.
  virtual bool can_fail() const { return true; }
  // The component (class, index) that its pending event (kind, arg) takes down, if it takes one
  // down: a workload alone in the world until that event can tell ahead that it is a failure of
  // its own devices (World::devices_failing; the training job's replayed partial iteration).
  virtual std::optional<std::pair<FaultClass, int>> failing(uint32_t kind, uint32_t arg) const {
    (void)kind, (void)arg;
    return std::nullopt;
  }
};
using FaultProcessFactory = std::function<std::unique_ptr<FaultProcess>(const Params& p, World& world, const std::string& name)>;

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
  // What a device did (its workload says so in finish(); world/energy.h): added up, so a
  // device two workloads used in turn sums both. `hw` names its hardware where it is not the
  // cluster's (a prefill pool of its own device type); it must outlive the world's report.
  void add_activity(int device, const DeviceActivity& a, const HardwareSpec* hw = nullptr);

  // A TPU pod's slices (forming, tearing down, the record); inert on a topology that is no pod.
  SliceManager& slices() { return slices_; }
  const SliceManager& slices() const { return slices_; }

  // --- Faults ------------------------------------------------------------------------------
  // The components of a class (built on first use from the topology).
  const std::vector<FaultComponent>& components(FaultClass c);
  // Index of a component by name, -1 when absent.
  int find_component(FaultClass c, const std::string& name);
  // A fault process takes a component down (`down` true) or releases it. Devices and links
  // change state when the first holder takes them down or the last one releases them: failed
  // links carry nothing, the flows that crossed them move to another route when one exists
  // (paying the re-route penalty) or stall until repair; workloads hear of their devices.
  void set_component(FaultClass c, int index, bool down, const std::string& cause = "");
  // While set_component tells the workloads of a change: the fault process that made it (its
  // name: a cause, when processes are named by cause), else "".
  const std::string& fault_cause() const { return fault_cause_; }
  // The devices that component `index` of class c failing now would take down (those not
  // down already; none when another process holds the component down).
  std::vector<int> devices_failing(FaultClass c, int index);
  bool device_up(int device) const { return dev_down_.empty() || dev_down_[static_cast<size_t>(device)] == 0; }
  // Stragglers: a device computing `factor` times slower than its peers (thermal throttling, a
  // degraded HBM stack, a noisy neighbour), 1 at full speed. A straggler process sets it; a
  // workload reads it when it starts a computation (training: a stage's forward, backward and
  // optimizer step take the slowest of its devices' factors, and the data-parallel
  // collectives make every replica wait for the slow one). The last setting wins.
  double device_slowdown(int device) const { return dev_slow_.empty() ? 1.0 : dev_slow_[static_cast<size_t>(device)]; }
  void set_slowdown(const std::vector<int>& devices, double factor);
  bool link_failed(int link) const { return !link_down_.empty() && link_down_[static_cast<size_t>(link)] > 0; }
  void add_fault(std::unique_ptr<FaultProcess> f) { faults_.push_back(std::move(f)); }
  const std::vector<std::unique_ptr<FaultProcess>>& faults() const { return faults_; }
  // Whether some fault process can take a component down (not only slow one).
  bool can_fail() const {
    for (const auto& f : faults_)
      if (f->can_fail()) return true;
    return false;
  }
  // Called after every fault event, for the run-time invariants (set by the monkey and tests).
  std::function<void(World&)> after_fault;
  // Releases devices a workload held (to move elsewhere after a failure).
  void release(const std::vector<int>& devices);
  // Counters of the fault layer, for the report.
  struct FaultStats {
    long failures = 0, repairs = 0, flows_rerouted = 0, flows_stalled = 0;
  };
  const FaultStats& fault_stats() const { return fstats_; }
  int rack_nodes() const { return cluster_.rack_nodes; }
  // The storage servers' topology nodes (none unless cluster.storage_servers is set).
  const std::vector<int>& storage_nodes() const { return cluster_.storage_nodes; }

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
  // The run's recorder, set before run(): workloads stream their per-request records into it
  // while they run (null: a world run without one, e.g. in a unit test).
  Recorder* recorder = nullptr;
  // A fresh Perfetto process id for a workload's tracks.
  int trace_pid() { return next_pid_++; }

 private:
  static Cluster prepare(Cluster c);
  Engine engine_;
  Cluster cluster_;
  net::Router router_;
  net::FlowSim flows_;
  SliceManager slices_;
  std::vector<std::string> owner_;
  std::vector<DeviceActivity> activity_;
  std::vector<const HardwareSpec*> device_hw_;
  std::vector<std::unique_ptr<Workload>> workloads_;
  int holding_ = 0;
  SimTime ran_until_;
  TraceWriter trace_;
  int next_pid_ = 1;
  // Faults.
  void build_components(FaultClass c);
  void grow_link_state();
  void circuits_added(int first, int end);  // SliceManager's fault hooks (world_faults.cpp)
  void circuit_torn(int link);
  std::array<std::vector<FaultComponent>, kFaultClasses> comps_;
  std::array<bool, kFaultClasses> built_{};
  std::vector<int> dev_down_, link_down_;
  std::vector<double> dev_slow_;       // per device, empty until a straggler process sets one
  std::vector<int64_t> dev_slow_since_;  // when a slow device became slow
  double slow_device_s_ = 0;             // device-seconds spent slow (ended spells)
  long slowdowns_ = 0;
  std::vector<char> link_was_up_;
  std::vector<std::unique_ptr<FaultProcess>> faults_;
  FaultStats fstats_;
  std::string fault_cause_;  // see fault_cause()
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
