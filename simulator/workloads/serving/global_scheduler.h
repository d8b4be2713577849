// The global scheduler: where an admitted request goes. The router (a registered policy)
// picks a healthy replica engine; a request no replica could ever hold is rejected; with no
// healthy replica the request is parked until one is (or failed once the failover timeout
// passes). It owns nothing of the replicas: it puts the request in the chosen engine's queue
// and asks that engine (a ReplicaPool) to decide its next iteration.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "workloads/serving/frontend.h"
#include "workloads/serving/router.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

// The replica engines as the global scheduler sees them.
class ReplicaPool {
 public:
  virtual ~ReplicaPool() = default;
  // A request joined engine `e`'s waiting queue: it decides its next iteration at the end of
  // this instant (unless it is busy).
  virtual void request_schedule(int e) = 0;
};

class GlobalScheduler final : public RequestDispatcher, public EventHandler {
 public:
  GlobalScheduler(Engine& engine, FrontEnd& front, Router& router, const std::vector<std::unique_ptr<Replica>>& engines,
                  ReplicaPool& pool, int64_t failover_timeout_ns)
      : engine_(engine), front_(front), router_(router), engines_(engines), pool_(pool), failover_timeout_ns_(failover_timeout_ns) {}
  void dispatch(uint32_t id) override;
  // Disaggregated serving: arrivals go to the first `prefill_engines` engines (the prefill
  // pool), which compute all but a prompt's last token; the decode pool computes that one as
  // its first step. A prompt of one token goes to the decode pool directly.
  void set_prefill_pool(size_t prefill_engines) { prefill_engines_ = prefill_engines; }
  // With failures, a prompt for the prefill pool waits parked while no decode engine is healthy
  // (its KV cache would have nowhere to go).
  void watch_decode_pool(bool on) { watch_decode_ = on; }
  // Request classes: waiting queues ordered by priority (lower first; FCFS within one), and
  // shedding of a request not yet scheduled once its class's TTFT objective (ns per class,
  // 0: none) has passed: it can no longer meet it, and the work it would take goes to others.
  void set_priority_order(bool on) { by_priority_ = on; }
  void set_shed_late(std::vector<int64_t> class_ttft_ns) { shed_ttft_ns_ = std::move(class_ttft_ns); }
  // Puts a request in an engine's waiting queue, in the order the deployment keeps.
  void enqueue(Replica& r, uint32_t id);
  void on_event(Engine& e, uint32_t kind, uint32_t arg) override;
  // A replica is healthy again: every parked request goes to the router again, in order.
  void unpark_all();
  size_t parked() const { return parked_.size(); }

 private:
  bool watch_decode_ = false;
  enum Kind : uint32_t { kParkTimeout = 1, kShed };
  void shed(uint32_t id);
  bool by_priority_ = false;
  std::vector<int64_t> shed_ttft_ns_;
  Engine& engine_;
  FrontEnd& front_;
  Router& router_;
  const std::vector<std::unique_ptr<Replica>>& engines_;
  ReplicaPool& pool_;
  int64_t failover_timeout_ns_;
  std::deque<uint32_t> parked_;
  size_t prefill_engines_ = 0;  // 0: one pool
};

}  // namespace sluice::serving
