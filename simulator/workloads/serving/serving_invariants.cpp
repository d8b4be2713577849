// The deployment's bookkeeping checked against itself as a run ends: every request counted
// once by state, routing counts, the KV blocks and the busy time within bounds.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

void ServingSim::check_conservation() const {
  // Ended requests give their slot back, so the table holds only the requests in flight:
  // those are counted by state, the ended ones by the counters kept as they end.
  const RequestCounts& n = front_.counts();
  const auto& reqs = front_.requests();
  int64_t used = 0, ended_in_use = 0, queued = 0, running = 0, swapped = 0, parked = 0, pending = 0, handoff = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!front_.slot_used(i)) continue;
    const Request& q = reqs[i];
    ++used;
    if (q.state == ReqState::Done) {
      ++ended_in_use;  // must not happen: a slot is released as its request ends
    } else if (q.parked) {
      ++parked;
    } else if (q.state == ReqState::Waiting) {
      ++queued;
    } else if (q.state == ReqState::Running) {
      ++running;
    } else if (q.state == ReqState::Swapped) {
      ++swapped;
    } else if (q.state == ReqState::Handoff) {
      ++handoff;
    } else {
      ++pending;  // made, not yet arrived
    }
  }
  int64_t held = 0;
  for (const auto& r : replicas_) held += static_cast<int64_t>(r->outstanding());
  const bool ok = ended_in_use == 0 && used == n.live && n.made - n.released == n.live && n.released == n.completed &&
                  n.completed == n.answered + n.rejected_too_long + n.failed + n.rejected_overload + n.rejected_late && held == queued + running + swapped &&
                  parked == static_cast<int64_t>(global_.parked()) &&
                  n.made - n.completed == queued + running + swapped + parked + handoff + pending && n.made <= n.announced &&
                  handoff == in_handoff_;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i]->routed != replicas_[i]->outstanding() + replicas_[i]->incoming)
      throw std::logic_error(fmt::format("routing count broken on engine {}: the routers see {} requests, its queues hold {}", i,
                                         replicas_[i]->routed, replicas_[i]->outstanding()));
    const auto& kv = replicas_[i]->kv;
    if (kv.free_blocks() < 0 || kv.cached_blocks() < 0 || kv.used_blocks() < 0 || kv.free_blocks() + kv.cached_blocks() > kv.total_blocks())
      throw std::logic_error(fmt::format("KV invariant broken on engine {}: {} free, {} cached, {} used of {} blocks", i, kv.free_blocks(),
                                         kv.cached_blocks(), kv.used_blocks(), kv.total_blocks()));
    if (rstats_[i].busy_ns < 0 || rstats_[i].busy_ns > std::max(last_activity_ns_, engine_.now().count_ns()) + 1)
      throw std::logic_error(fmt::format("utilization invariant broken on engine {}: busy {} ns in a run of {} ns", i, rstats_[i].busy_ns,
                                         std::max(last_activity_ns_, engine_.now().count_ns())));
  }
  if (!ok)
    throw std::logic_error(fmt::format("request conservation broken at {}: {} requests made of {} announced; {} ended ({} answered, "
                                       "{} rejected, {} rejected as overload, {} failed; {} slots released), {} queued + {} running + "
                                       "{} swapped (replicas hold {}), {} parked (router holds {}), {} not arrived; {} slots in use "
                                       "(counted {}), {} of them ended",
                                       engine_.now().str(), n.made, n.announced, n.completed, n.answered, n.rejected_too_long,
                                       n.rejected_overload, n.failed, n.released, queued, running, swapped, held, parked,
                                       global_.parked(), pending, used, n.live,
                                       ended_in_use));
}

}  // namespace sluice::serving
