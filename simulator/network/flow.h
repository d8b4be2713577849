// FlowSim: flow-level network simulation on the Engine. Each transfer is a flow on a route;
// concurrent flows share every link max-min fairly (progressive filling). Rates are
// recomputed when flows start or end, or a link's capacity changes, but only over the
// connected component of links and flows touched, and once per instant: every change at one
// timestamp marks links dirty and a single Priority::Network event recomputes them all.
// A flow's bytes leave at its rate; its last byte arrives one route latency later.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "network/routing.h"
#include "network/topology.h"

namespace sluice::net {

// Receives flow completions (delivery of the last byte).
class FlowSink {
 public:
  virtual ~FlowSink() = default;
  virtual void on_flow_done(Engine& engine, uint64_t tag) = 0;
};

// Counters that show how much work rate recomputation did.
struct FlowStats {
  uint64_t started = 0;
  uint64_t completed = 0;
  uint64_t recomputes = 0;
  uint64_t flows_rated = 0;   // sum over recomputes of the flows in the touched component
  uint64_t links_rated = 0;   // sum over recomputes of the links in the touched component
  uint64_t max_component_flows = 0;
  uint64_t max_active = 0;
  uint64_t reschedules = 0;   // completion events (re)scheduled after a rate change
};

class FlowSim final : public EventHandler {
 public:
  FlowSim(Engine& engine, const Topology& topo, Router& router);

  // Starts a flow of `bytes` from src to dst now; `salt` picks among equal-cost routes.
  // The sink's on_flow_done(tag) runs when the last byte is delivered. Returns the flow id.
  uint32_t start(int src, int dst, double bytes, FlowSink* sink, uint64_t tag, uint64_t salt = 0);
  // Starts a flow on an explicit route (a list of directed link ids, possibly empty).
  uint32_t start_on_path(const std::vector<int>& path, double bytes, FlowSink* sink, uint64_t tag);
  // Changes a directed link's capacity now (0: it carries nothing); flows re-share at once.
  void set_link_capacity(int link, double Bps);
  // The same at a later time `at` (an OCS circuit coming up after its reconfiguration).
  void set_link_capacity_at(SimTime at, int link, double Bps);
  double link_capacity(int link) const { return cap_[static_cast<size_t>(link)]; }
  // Current rate of an active flow (bytes/s); 0 before the first recomputation.
  double rate_Bps(uint32_t flow) const { return flows_[flow].rate_Bps; }
  bool flow_active(uint32_t flow) const { return flows_[flow].state == State::Sending; }
  size_t active_flows() const { return active_; }
  const FlowStats& stats() const { return stats_; }
  // Rounds every transmission end up to a multiple of `quantum` (0: exact, the default), so
  // completions that fall in one window share one rate recomputation. Each completion is
  // late by less than the quantum: a knob trading accuracy for speed on huge collectives.
  void set_quantum(SimTime quantum) { quantum_ns_ = quantum.count_ns(); }
  Engine& engine() { return engine_; }
  Router& router() { return router_; }
  const Topology& topology() const { return topo_; }

  void on_event(Engine& engine, uint32_t kind, uint32_t arg) override;

 private:
  enum class State : uint8_t { Free, Sending, Flying };
  enum EventType : uint32_t { kRecompute = 0, kTxDone = 1, kDeliver = 2, kCapacity = 3 };
  struct Flow {
    std::vector<int> path;
    std::vector<uint32_t> pos;  // index of this flow in link_flows_[path[h]]
    double left_bytes = 0;
    double rate_Bps = 0;
    double new_rate_Bps = 0;
    int64_t settled_ns = 0;
    int64_t latency_ns = 0;
    FlowSink* sink = nullptr;
    uint64_t tag = 0;
    uint32_t gen = 0;
    uint32_t mark = 0;
    uint32_t frozen = 0;
    State state = State::Free;
  };
  uint32_t alloc();
  void begin(uint32_t f);
  void sync_links();
  void mark_dirty(int link);
  void request_recompute();
  void recompute();
  void settle(Flow& f, int64_t now_ns);
  void schedule_finish(uint32_t f, int64_t now_ns);
  void detach(uint32_t f);

  Engine& engine_;
  const Topology& topo_;
  Router& router_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_;
  std::vector<std::vector<uint32_t>> link_flows_;
  std::vector<double> cap_, rem_;
  std::vector<uint32_t> cnt_, link_mark_;
  std::vector<std::pair<double, int>> heap_;
  std::vector<int> dirty_;
  std::vector<int> comp_links_;
  std::vector<uint32_t> comp_flows_;
  struct CapChange {
    int link;
    double Bps;
  };
  std::vector<CapChange> cap_changes_;
  uint32_t epoch_ = 0;
  int64_t quantum_ns_ = 0;
  bool recompute_pending_ = false;
  size_t active_ = 0;
  FlowStats stats_;
};

}  // namespace sluice::net
