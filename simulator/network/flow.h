// FlowSim: flow-level network simulation on the Engine. Each transfer is a flow on a route;
// concurrent flows share every link max-min fairly (progressive filling). Rates are
// recomputed when flows start or end, or a link's capacity changes, once per instant: every
// change at one timestamp marks links dirty and a single Priority::Network event recomputes.
// The recomputation is incremental: progressive filling below the lowest level a change can
// reach runs exactly as before, so only the flows at or above that level, connected to the
// change, are re-filled (see recompute()). A flow's bytes leave at its rate; its last byte
// arrives one route latency later.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "network/routing.h"
#include "network/topology.h"

namespace sluice::net {

// Exact sums (fixed point, 2^-16 of the unit): adding and removing never drifts, and a sum
// grown by the same additions is the same whatever else it held (rates on a link, bytes carried).
__extension__ typedef __int128 FixedSum;

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
  double bytes_started = 0;   // bytes of every flow started (what workloads put on the fabric)
  uint64_t recomputes = 0;
  uint64_t flows_rated = 0;   // sum over recomputes of the flows re-filled (the touched component above the change's level)
  uint64_t links_rated = 0;   // sum over recomputes of the links those flows cross
  uint64_t max_component_flows = 0;
  uint64_t max_active = 0;
  uint64_t reschedules = 0;   // completion events (re)scheduled after a rate change
  uint64_t rerouted = 0;      // flows moved off failed links
  uint64_t unsplit_completed = 0;  // completed flows that were not split (adaptive routing splits the others)
  uint64_t shared_bottleneck = 0;  // of those, the ones that at some time ran below their bottleneck link's capacity (shared it)
  uint64_t sprayed = 0;            // flows split over equal-cost paths (adaptive routing), each counted once
  uint64_t heaps_rebuilt = 0;      // link heaps a recompute rebuilt whole (most of their keys changed) rather than entry by entry
};

// What the fabric has counted, in exact sums: the counters of FlowStats that add up (not the
// maxima), the bytes started, and the bytes each link was given. The difference of two
// ledgers is what happened between them; FlowSim::replay adds it again n times, as n exact
// repetitions of that interval would (a training job's repeated iteration, see training.cpp).
struct FlowLedger {
  // The counters of FlowStats that add up, in this order.
  static constexpr uint64_t FlowStats::*kSummed[] = {
      &FlowStats::started,     &FlowStats::completed, &FlowStats::recomputes,        &FlowStats::flows_rated,       &FlowStats::links_rated,
      &FlowStats::reschedules, &FlowStats::rerouted,  &FlowStats::unsplit_completed, &FlowStats::shared_bottleneck, &FlowStats::sprayed,
      &FlowStats::heaps_rebuilt};
  std::array<uint64_t, std::size(kSummed)> counts{};
  FixedSum bytes = 0;
  std::vector<FixedSum> link_bytes;
  // after - before (same fabric; links added meanwhile count from zero).
  static FlowLedger between(const FlowLedger& before, const FlowLedger& after);
  bool operator==(const FlowLedger&) const = default;
};

// Hears every flow (each part of a split one) as it starts: its route and the bytes its links
// are given, in FlowLedger's fixed point (a training job taping an iteration). The route is
// valid during the call only, and the log starts no flow.
class FlowStartLog {
 public:
  virtual ~FlowStartLog() = default;
  virtual void on_start(std::span<const int> path, FixedSum bytes) = 0;
};

class FlowSim final : public EventHandler {
 public:
  FlowSim(Engine& engine, const Topology& topo, Router& router);

  // Starts a flow of `bytes` from src to dst now; `salt` picks among equal-cost routes (with
  // adaptive routing the flow is split evenly over them instead: Router::route_part).
  // The sink's on_flow_done(tag) runs when the last byte is delivered. Returns the flow id
  // (of its first part when split).
  uint32_t start(int src, int dst, double bytes, FlowSink* sink, uint64_t tag, uint64_t salt = 0);
  // Adaptive routing / packet spraying (InfiniBand AR, Spectrum-X): every flow started from
  // now on is split into Router::spray_width equal parts, one per equal-cost path, and is
  // delivered when its last part is. Off: per-flow ECMP by hash.
  void set_adaptive(bool on) { adaptive_ = on; }
  bool adaptive() const { return adaptive_; }
  // At most one log of the flows that start (nullptr: none).
  void set_start_log(FlowStartLog* log) { start_log_ = log; }
  FlowStartLog* start_log() const { return start_log_; }
  // Bytes each directed link has carried by now: what the flows started on it were given
  // (moved with reroutes), less what the flows still sending there have left (a cut flow's
  // rest counts as carried: see cancel).
  std::vector<double> carried_link_bytes() const;
  // Starts a flow on an explicit route (a list of directed link ids, possibly empty).
  uint32_t start_on_path(const std::vector<int>& path, double bytes, FlowSink* sink, uint64_t tag);
  // Cuts every flow whose sink `cut` names, still sending or in flight to its last byte (a
  // training job's transfers when the job fails: its processes are killed, its communicators
  // aborted). A cut flow never completes (its sink hears nothing, its pending events are void)
  // and stays counted on its links' ledger as given (link bytes, bytes started: what it was
  // handed, not what it carried). The other flows re-share at the recomputation this asks for
  // at the same instant; when none is left, none is owed. Returns how many were cut.
  size_t cancel(const std::function<bool(const FlowSink*)>& cut);
  // Changes a directed link's capacity now (0: it carries nothing); flows re-share at once.
  void set_link_capacity(int link, double Bps);
  // The same at a later time `at` (an OCS circuit coming up after its reconfiguration).
  void set_link_capacity_at(SimTime at, int link, double Bps);
  double link_capacity(int link) const { return cap_[static_cast<size_t>(link)]; }
  // When the last capacity given to `link` for later (set_link_capacity_at, a bandwidth) comes:
  // until then a repair must leave it empty (a circuit still being programmed). 0: none.
  int64_t ready_ns(int link) const { return static_cast<size_t>(link) < ready_ns_.size() ? ready_ns_[static_cast<size_t>(link)] : 0; }
  // After links failed (their capacity set to 0 and marked down in the topology): every flow
  // still sending over one of `links` moves to a route that avoids failed links when one
  // exists, its last byte `penalty_ns` later; the others stay and stall at rate 0 until their
  // link returns. Returns {moved, stalled}.
  std::pair<int, int> reroute(const std::vector<int>& links, int64_t penalty_ns);
  // Run-time invariants, once rates are settled (no recomputation pending): on every link the
  // flows' rates sum to at most its capacity, no rate is negative or not finite, and its heap of
  // flows is in order with every entry where its slot says. Throws std::logic_error naming the link.
  void check_invariants() const;
  // Current rate of an active flow (bytes/s); 0 before the first recomputation.
  double rate_Bps(uint32_t flow) const { return flows_[flow].rate_Bps; }
  bool flow_active(uint32_t flow) const { return flows_[flow].state == State::Sending; }
  size_t active_flows() const { return active_; }
  // True when nothing on the fabric moves: every active flow (if any) is rated and stalled at
  // rate 0 (a link of its route carries nothing; only a capacity change revives it), and no
  // recomputation is pending. O(flows ever held at once).
  bool still() const;
  // The fabric's counts so far (see FlowLedger), and n more repetitions of a difference of
  // two of them added at once: only while the fabric is still (nothing in between to settle).
  FlowLedger ledger() const;
  void replay(const FlowLedger& delta, uint64_t n);
  size_t ledger_links() const { return link_bytes_.size(); }  // the links a ledger of it counts
  // A digest of everything about the fabric that routes and rates a flow: every link's ends,
  // state (up or torn down), bandwidth, capacity, latency and routing penalty. Equal digests
  // on an empty fabric (no flow held, nothing pending) route and rate the same flows the same
  // way (the router is a function of the links: tests/test_fabrics_frontier.cpp). O(links).
  uint64_t shape_digest() const;
  // Nothing on the fabric at all: no flow held (not even one stalled) and nothing pending.
  bool empty() const { return active_ == 0 && !recompute_pending_; }
  // The completion rounding quantum (0 or 1: exact); rounding to multiples of an absolute
  // time makes a run depend on when it starts (the training fast-forward never skips under it).
  int64_t quantum_ns() const { return quantum_ns_; }
  const FlowStats& stats() const { return stats_; }
  // Rounds every transmission end up to a multiple of `quantum` (0: exact, the default), so
  // completions that fall in one window share one rate recomputation. Each completion is
  // late by less than the quantum: a knob trading accuracy for speed on huge collectives.
  void set_quantum(SimTime quantum) { quantum_ns_ = quantum.count_ns(); }
  // Room for `flows` more flows at once, of routes up to `hops` links, before they start (a
  // collective of a million pairs): the tables grow once to their size instead of doubling
  // their way there, a copy and fresh pages each time. Flows ended and free to reuse count.
  void reserve(size_t flows, size_t hops);
  size_t free_flows() const { return free_.size(); }  // records of ended flows, reused first
  size_t flow_capacity() const { return flows_.capacity(); }  // (tests)
  Engine& engine() { return engine_; }
  Router& router() { return router_; }
  const Topology& topology() const { return topo_; }

  void on_event(Engine& engine, uint32_t kind, uint32_t arg) override;
  // A completion superseded by a rate change (or of a flow no longer sending) is void.
  bool is_void(uint32_t kind, uint32_t arg, uint32_t generation) const override;

 private:
  enum class State : uint8_t { Free, Sending, Flying };
  enum EventType : uint32_t { kRecompute = 0, kTxDone = 1, kDeliver = 2, kCapacity = 3 };
  // One flow on one link: an entry of the link's max-heap of flows by rate.
  struct LinkFlow {
    double key;     // the flow's rate; +infinity until its first rating
    uint32_t flow;
    uint32_t slot;  // pos_[slot]: where this entry sits in its heap (the flow's pos_base + hop)
  };
  struct Flow {
    // Its route, hop h the link hop_link_[pos_base + h], and its entries' places in the link
    // heaps: pos_[pos_base + h] is its index in link_flows_[that link]; pos_cap slots are
    // reserved (a power of two, kept when the record is reused; a longer route takes a new
    // block and leaves the old one, at most its size again). No allocation of its own.
    uint32_t pos_base = 0;
    uint32_t pos_cap = 0;
    double left_bytes = 0;
    double rate_Bps = 0;
    double new_rate_Bps = 0;
    int64_t settled_ns = 0;
    int64_t latency_ns = 0;
    FlowSink* sink = nullptr;
    uint64_t tag = 0;
    uint64_t salt = 0;  // what picked its route among equal-cost ones (start's)
    uint64_t seq = 0;   // FlowStats::started when it began: an order of flows that no fast-forward changes (slots do)
    uint32_t gen = 0;
    uint32_t hops = 0;  // its route's length
    State state = State::Free;
    bool keyed = false;  // its link-heap keys hold rate_Bps (false until its first rating)
    bool shared = false; // it ran below its bottleneck link's capacity at some rating
    uint32_t spray = kNoSpray;  // the split flow it is a part of, if any
  };
  static constexpr uint32_t kNoSpray = 0xFFFFFFFFu;
  struct Spray {  // a flow split over equal-cost paths: delivered when its last part is
    uint32_t left = 0;
  };
  uint32_t alloc();
  void set_path(uint32_t f, std::span<const int> route);
  std::span<const int> path(const Flow& fl) const { return {hop_link_.data() + fl.pos_base, fl.hops}; }
  void begin(uint32_t f);
  void sync_links();
  void mark_dirty(int link);
  void clear_marks();
  void request_recompute();
  void recompute();
  void settle(Flow& f, int64_t now_ns);
  void schedule_finish(uint32_t f, int64_t now_ns);
  void attach(uint32_t f);
  void detach(uint32_t f);
  void heap_place(std::vector<LinkFlow>& h, size_t i, const LinkFlow& e);
  void heap_fix(int link, size_t i);
  void heap_build(int link);
  size_t sift_down(std::vector<LinkFlow>& h, size_t i, const LinkFlow& e);
  template <class Fn>
  void for_each_at_least(int link, double level, Fn&& fn);

  Engine& engine_;
  const Topology& topo_;
  Router& router_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_;
  // Exact sums of rates (fixed point, 2^-16 B/s): adding and removing a rate never drifts.
  std::vector<std::vector<LinkFlow>> link_flows_;  // per link, a max-heap of its flows by rate
  // Every flow's heap positions in one array: a heap move writes its slot straight from the
  // entry, with no load of the flow's own record first (that dependent miss was most of the
  // cost of heap maintenance on a million flows).
  std::vector<uint32_t> pos_;
  std::vector<int> hop_link_;  // every flow's route, in the same slots as pos_
  // Per flow, the recomputation (epoch_) that last found it and froze it. Apart from the flow
  // records so that the checks, several per flow and recomputation, read a dense array.
  std::vector<uint32_t> flow_mark_, flow_frozen_;
  std::vector<FixedSum> load_;   // per link: exact sum of its flows' current rates
  std::vector<FixedSum> part_;   // per link, during a recompute: the part of load_ being re-filled
  std::vector<double> cap_, rem_;
  std::vector<uint32_t> cnt_, link_mark_;
  std::vector<std::pair<double, int>> heap_;
  std::vector<int> dirty_;
  std::vector<int> comp_links_;
  std::vector<uint32_t> comp_flows_;
  std::vector<uint32_t> order_;  // the flows whose rates (or keys) a recompute changes, as found
  std::vector<int> rebuild_;     // links whose heaps a recompute rebuilds whole
  std::vector<size_t> stack_;
  std::vector<int> grown_;    // links that gained flows since the last recompute
  std::vector<uint8_t> link_flag_;  // per link: kDirty (in dirty_), kGrown (in grown_)
  static constexpr uint8_t kDirty = 1, kGrown = 2;
  double level_bound_ = std::numeric_limits<double>::infinity();  // lowest rate a change since the last recompute can alter
  struct CapChange {
    int link;
    double Bps;
  };
  std::vector<CapChange> cap_changes_;
  std::vector<int64_t> ready_ns_;  // per link: ready_ns()
  std::vector<Spray> sprays_;
  std::vector<uint32_t> free_sprays_;
  std::vector<FixedSum> link_bytes_;  // per link, bytes given to it (fixed point, 2^-16 B)
  FixedSum bytes_started_ = 0;        // stats_.bytes_started exactly
  std::vector<int> part_path_;  // a route being computed (start)
  bool adaptive_ = false;
  FlowStartLog* start_log_ = nullptr;
  uint32_t epoch_ = 0;
  int64_t quantum_ns_ = 0;
  bool recompute_pending_ = false;
  size_t active_ = 0;
  FlowStats stats_;
};

}  // namespace sluice::net
