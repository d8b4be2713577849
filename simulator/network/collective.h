// Collectives built from flows: ring, tree and hierarchical all-reduce, all-gather,
// reduce-scatter, all-to-all, send/recv. A Collective runs on a shared FlowSim, so several
// collectives (tensor-parallel inside servers, data-parallel across them) contend for links.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "network/flow.h"

namespace sluice::net {

enum class CollectiveKind {
  AllReduceRing, AllReduceTree, AllReduceHierarchical, AllGather, ReduceScatter, AllToAll, SendRecv,
  AllReduceNcclTree,  // NCCL's tree: chains inside servers, a double binary tree across them, per channel
  AllReduceAuto,      // NCCL's choice among its ring, its tree and NVLS, by their predicted times (allreduce_choice)
  AllReduceNvls,      // NVLink SHARP: the NVSwitch reduces and multicasts; across servers, rings per local rank between
  AllToAllHierarchical  // DeepEP's internode all-to-all: across servers once, rail to rail, then NVLink inside (a2a_dedup)
};
const char* collective_name(CollectiveKind k);
// The all-reduces a tensor-parallel group may run (fused per stage): ring, NVLS, auto.
std::vector<std::pair<std::string, CollectiveKind>> tp_allreduces();
std::optional<CollectiveKind> parse_collective(const std::string& name);
std::vector<std::string> collective_names();

// Tuning of a collective's flow pattern.
struct CollectiveOptions {
  int group_size = 0;  // hierarchical: devices per group (0: consecutive devices of one server/cube)
  int chunks = 1;      // tree: pipeline chunks
  int paths = 1;       // all-to-all: each pair's bytes split over this many ECMP-salted flows
  uint64_t salt = 0;   // spreads equal-cost routes between collectives
  // Rings: run the 2(n-1) (or n-1) steps as one flow per ring edge carrying every step's
  // bytes, plus the later steps' route latencies. Every link carries the same bytes as with
  // step-by-step flows and an idle ring takes the same time; under contention the steps'
  // share of bandwidth is averaged over the collective. Used on hot paths (serving iterations).
  bool fused_ring_steps = false;
  // Fused rings and all-to-alls: the collective stands for this many back-to-back collectives
  // of bytes/count each (a stage's per-layer all-reduces or MoE all-to-alls): each pays its
  // steps' latencies. A ring's count may be a multiple of a half: a reduce-scatter or an
  // all-gather is half an all-reduce (its n - 1 steps of the all-reduce's 2(n - 1), half the
  // bytes a device sends per buffer byte). 0 or less: one (fused()).
  double fused_count = 1;
  double fused() const { return fused_count > 0 ? fused_count : 1.0; }
  // All-to-all: each device's weight (mean 1; empty: all 1). The pair i -> j carries its even
  // share times f w_j + (1 - f) w_i (f: a2a_dispatch_fraction, 1/2 when the two are alike): an
  // MoE dispatch to j's experts in proportion to w_j and the combine from i's in proportion to
  // w_i, the total unchanged.
  std::vector<double> a2a_weights;
  // All-to-all with a2a_weights: the part of each pair's bytes that is the dispatch (the rest the
  // combine); an FP8 dispatch carries fewer bytes than its BF16 combine (CostModel).
  double a2a_dispatch_fraction = 0.5;
  // Hierarchical all-to-all: what a device sends to a server's devices crosses the network once,
  // to the device of its own local rank there, times a2a_dedup(positions of that server's
  // devices in the group) (a token whose experts are on several of them sent once: DeepEP);
  // null: 1.
  std::function<double(const std::vector<int>&)> a2a_dedup;
  // Rings (all-reduce, all-gather, reduce-scatter) over a group that spans servers with several
  // of its devices on each: 0 runs NCCL's channels (ring_channels: one per device a server
  // holds, so with a NIC per GPU every NIC carries a share); 1 a single ring through the
  // group's order, whose server crossings share one NIC each.
  int channels = 0;
  // NCCL tree: pipeline chunks per tree (0: one per MiB a tree carries, 1 to 64).
  int tree_chunks = 0;
};

// NCCL's choice for an all-reduce (its tuner, src/graph/tuning.cc, predicts each algorithm's
// time as latency + bytes / bandwidth from the topology and runs the fastest): here the ring
// and the tree's predicted times on an idle fabric, from the group's shape (servers K, devices
// a server M, channels m), the route latencies inside and between servers and a device's
// link capacity toward the others:
//   ring  2(n-1) steps of the slowest hop's latency + 2(n-1)/n S / (m b) through each NIC
//   tree  2(M-1) chain hops inside + 2 floor(log2 K) tree hops between servers, the busiest
//         server head's share (its parent and children in both trees, S/(2m) each) / b,
//         and the pipeline's fill (depth x one chunk's time)
//   nvls  (every device on an NVSwitch that reduces) two hops to the switch and back + S(1 + 1/M)
//         over a device's NVLink; across K servers plus a ring per local rank on S/M between
//         them (2(K-1) steps), after the switches' reduce-scatter and before their all-gather
//         (infinite where a device has no such switch)
struct AllReduceEstimate {
  double ring_ns = 0, tree_ns = 0, nvls_ns = std::numeric_limits<double>::infinity();
  CollectiveKind choice = CollectiveKind::AllReduceRing;
};
AllReduceEstimate allreduce_choice(const Topology& topo, Router& router, const std::vector<int>& devices, double bytes,
                                   const CollectiveOptions& opt = {});

// One collective over `devices` (node ids) moving `bytes`: the per-device buffer for
// all-reduce, reduce-scatter input, all-gather output and all-to-all (S/n to each peer);
// the message size for send/recv (devices[0] -> devices[1]).
class Collective final : public FlowSink, public EventHandler {
 public:
  Collective(FlowSim& sim, CollectiveKind kind, std::vector<int> devices, double bytes, CollectiveOptions opt = {});
  // Starts now; `on_done` runs when the last flow is delivered.
  void start(std::function<void(Engine&)> on_done = {});
  bool finished() const { return finished_; }
  SimTime started_at() const { return started_at_; }
  SimTime finished_at() const { return finished_at_; }
  SimTime duration() const { return finished_at_ - started_at_; }
  uint64_t flows_started() const { return flows_; }
  // The algorithm it runs: its kind, or for AllReduceAuto the one allreduce_choice picked.
  CollectiveKind algorithm() const { return algorithm_; }
  void on_flow_done(Engine& engine, uint64_t tag) override;
  void on_event(Engine& engine, uint32_t kind, uint32_t arg) override;
  // A failure voided it (a training job's): it starts nothing more, never finishes, and its
  // pending events are void. Its flows are the fabric's to cut (FlowSim::cancel).
  void cancel() { cancelled_ = true; }
  bool is_void(uint32_t, uint32_t, uint32_t) const override { return cancelled_; }
  // Nothing of it can still come: finished, or cancelled with its last event behind now.
  bool spent() const;

 private:
  struct Op {  // one ring, tree, all-to-all, send or in-switch reduction within a phase
    enum Type { Ring, Tree, AllToAll, Send, Switch } type;
    std::vector<int> dev;
    double chunk_bytes = 0;
    int steps = 0;
    int64_t tail_latency_ns = 0;  // fused rings: the later steps' latencies, paid after the last byte
    // tree state: parent of each position (-1: the root), children listed from kid_off[p]
    int chunks = 1, root = 0;
    std::vector<int> parent, kid_off, kids;
    std::vector<int> recv, next_up, next_down;  // recv[p*chunks+c], next_down[kid_off[p]+k]
    std::vector<char> busy_up, busy_down, have;
    uint64_t pending = 0;
    // in-switch reduction (NVLS): each device sends chunk_bytes to switch `sw` and receives
    // down_bytes from it, both ways at once (the reduction and the multicast pipelined)
    int sw = -1;
    double down_bytes = 0;
    // an all-to-all of listed pairs (hierarchical): (from position, to position, bytes)
    struct Pair {
      int from, to;
      double bytes;
    };
    std::vector<Pair> pairs;
    int64_t layer_latency_ns = 0;  // listed pairs: one fused all-to-all's latency (a network hop, then NVLink)
  };
  void plan_hierarchical_alltoall();
  void plan();
  static Op tree_op(std::vector<int> dev, std::vector<int> parent, double bytes, int chunks);
  std::vector<Op> nccl_trees() const;
  void start_phase(Engine& e);
  void start_op(size_t oi);
  void reserve_alltoall(const Op& o, size_t pairs);
  void send(size_t oi, int from_pos, int to_pos, double bytes, uint64_t info, uint64_t salt);
  void tree_try_up(size_t oi, int p);
  void tree_try_down(size_t oi, int p, int k);
  void tree_down_all(size_t oi, int p);
  void op_done(Engine& e);

  FlowSim& sim_;
  CollectiveKind kind_, algorithm_;
  std::vector<int> devices_;
  double bytes_;
  CollectiveOptions opt_;
  std::vector<std::vector<Op>> phases_;
  size_t phase_ = 0;
  size_t ops_left_ = 0;
  uint64_t flows_ = 0;
  bool finished_ = false, cancelled_ = false;
  int64_t last_event_ns_ = -1;  // the latest event it scheduled (a fused ring's tail latency)
  SimTime started_at_, finished_at_;
  std::function<void(Engine&)> on_done_;
};

// Collectives a failure voided. Their flows may still be on the fabric and name them (a
// serving replica's drain), or their events be pending (a cancelled one's), so they stay alive
// until spent; spent ones are let go as more are buried (a long run with many failures keeps
// only those still draining, not every one it ever voided).
class Graveyard {
 public:
  void bury(std::unique_ptr<Collective> c);
  size_t size() const { return dead_.size(); }

 private:
  std::vector<std::unique_ptr<Collective>> dead_;
  size_t prune_at_ = 64;
};

// Runs one collective alone on an idle topology and returns how long it takes.
SimTime collective_time(const Topology& topo, CollectiveKind kind, const std::vector<int>& devices, double bytes,
                        CollectiveOptions opt = {}, RoutePolicy policy = RoutePolicy::Auto, SimTime quantum = SimTime::zero());

// NCCL's rings over `devices` (its channels): when the group spans two or more servers (node
// groups) holding the same number m >= 2 of its devices each, m rings through every device.
// Ring c enters an even-numbered server at local rank c and walks up to rank c - 1, then
// enters the next server at rank c - 1 and walks down to rank c, and so on: every device's
// NIC sends one ring's share and receives one, and every crossing joins the same local rank
// (rail to rail) but, with an odd number of servers, the one closing the ring. A group of one
// server whose devices are a full mesh (xGMI) gets a ring for every stride coprime with its
// size (8 devices: strides 1, 3, 5, 7), on disjoint links. Otherwise (and on a torus, whose
// rings follow its wiring) one ring, in the given order.
std::vector<std::vector<int>> ring_channels(const Topology& topo, const std::vector<int>& devices);

// The group's devices by server (node group), in order of first appearance; a device with no
// group, or any device on a torus, is its own server.
std::vector<std::vector<int>> by_server(const Topology& topo, const std::vector<int>& devices);

// The NVSwitch that reduces in the network (NodeInfo::reduces) a device is linked to, or -1.
int nvls_switch(const Topology& topo, int device);
// Throws std::runtime_error naming `key` and the device when one of `devices` has none.
void require_nvls(const Topology& topo, const std::vector<int>& devices, const std::string& key);

// Throws std::runtime_error naming `key` when the devices' servers hold different numbers of
// them (a hierarchical all-to-all needs a rail for every local rank).
void require_even_servers(const Topology& topo, const std::vector<int>& devices, const std::string& key);

// A ring order of all devices that keeps ring neighbours adjacent: a boustrophedon snake on
// a torus (closing through the wrap-around), the device list order elsewhere.
std::vector<int> ring_order(const Topology& topo);

}  // namespace sluice::net
