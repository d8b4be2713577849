// Recovery of a serving deployment from a replica's failure (world faults): the replica
// stops at once (its iteration in flight void, its KV cache lost), its requests go back to
// the global scheduler (a healthy replica prefills them again), and it serves again
// `reload_ns` after its repair.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

void ServingSim::enable_faults() {
  faults_enabled_ = true;
  global_.watch_decode_pool(pool_split_ > 0);
}

void ServingSim::replica_down(int r) {
  if (down_since_ns_[static_cast<size_t>(r)] >= 0) {
    // Already out (reloading after an earlier failure): the reload starts over after this repair.
    for (int k = 0; k < pp_; ++k) ++epoch_[static_cast<size_t>(r * pp_ + k)];
    return;
  }
  const int64_t now = engine_.now().count_ns();
  ++replica_failures_;
  down_since_ns_[static_cast<size_t>(r)] = now;
  std::vector<uint32_t> back;
  for (int k = 0; k < pp_; ++k) {
    const int ri = r * pp_ + k;
    const size_t i = static_cast<size_t>(ri);
    account_kv(ri, now);
    ++epoch_[i];  // its events and flows in flight are void
    busy_[i] = false;
    if (i < inflight_.size()) {
      InFlight& f = inflight_[i];
      for (auto& ps : f.passes)
        for (auto* c : {&ps.collective, &ps.alltoall})  // their flows are still on the fabric, and name them
          if (*c) graveyard_.bury(std::move(*c));
      f.passes.clear();
      for (auto& q : f.parked) q.clear();
      f.swaps_pending = 0;
      f.waiting_swap = false;
    }
    if (i < stage_busy_.size()) {
      stage_busy_[i] = 0;
      stage_queue_[i].clear();
    }
    if (i < stage_free_ns_.size()) stage_free_ns_[i] = now;
    Replica& rep = *replicas_[i];
    rep.set_health(false);
    const size_t from = back.size();
    for (uint32_t id : rep.running) back.push_back(id);
    for (uint32_t id : rep.swapped) back.push_back(id);
    for (uint32_t id : rep.waiting) back.push_back(id);
    // A prefill engine's requests had their prompt's last token held back for the decode engine.
    if (ri < pool_split_)
      for (size_t k = from; k < back.size(); ++k) front_.requests()[back[k]].input_tokens += 1;
    rep.running.clear();
    rep.swapped.clear();
    rep.waiting.clear();
    rep.routed = 0;
    rep.swapped_tokens = 0;
    // The KV cache is gone with the device (resident conversation caches included).
    rep.kv = BlockManager(rep.kv.total_blocks(), rep.kv.block_size(), cfg_.watermark, rep.reuse, cfg_.prefix_caching);
    set_kv_tiers(rep.kv, rep.kv_bytes_per_token, static_cast<int>(i));
    batches_[i].clear();
    if (pool_split_ > 0) fail_handoffs(ri, back);
  }
  for (uint32_t id : back) send_back(id);
}

// A request whose KV cache a failure took goes back to the global scheduler: tokens already
// streamed stay delivered; the prompt and those tokens are prefilled again.
void ServingSim::send_back(uint32_t id) {
  Request& q = front_.requests()[id];
  if (q.computed > 0 || q.generated > 0) {
    ++q.reprefills;
    ++reprefilled_;
  }
  q.computed = q.cached_tokens = q.blocks = q.shared_blocks = 0;
  q.handoff_from = -1;
  q.handoff_blocks = 0;
  q.handoff_pick = -1;  // its next prefill asks the decode router afresh
  ++q.retries;
  ++retried_;
  q.state = ReqState::Pending;
  global_.dispatch(id);
}

void ServingSim::replica_repaired(int r) {
  if (down_since_ns_[static_cast<size_t>(r)] < 0) return;
  engine_.schedule_in(SimTime::ns(cfg_.reload_ns), Priority::Fault, this, kReplicaUp, static_cast<uint32_t>(r),
                      epoch(r * pp_));
}

// Down time within the deployment's own run: once every request has ended (the world may go
// on for other workloads), an outage in progress counts up to the deployment's end only.
int64_t ServingSim::down_until_ns() const {
  const int64_t now = engine_.now().count_ns();
  return front_.all_ended() ? std::min(now, end_ns()) : now;
}

int64_t ServingSim::replica_down_ns() const {
  int64_t t = down_ns_;
  const int64_t until = down_until_ns();
  for (int64_t s : down_since_ns_)
    if (s >= 0) t += std::max<int64_t>(0, until - s);
  return t;
}

// Repaired and reloaded (kReplicaUp of the current epoch): an empty cache, healthy; the
// parked requests go to the router again.
void ServingSim::replica_up(int r, int64_t now) {
  if (down_since_ns_[static_cast<size_t>(r)] < 0) return;
  const int64_t out = now - down_since_ns_[static_cast<size_t>(r)];
  outages_ns_.push_back(out);
  down_ns_ += std::max<int64_t>(0, down_until_ns() - down_since_ns_[static_cast<size_t>(r)]);
  down_since_ns_[static_cast<size_t>(r)] = -1;
  for (int k = 0; k < pp_; ++k) {
    Replica& rep = *replicas_[static_cast<size_t>(r * pp_ + k)];
    rep.set_health(true);
    rep.kv = BlockManager(rep.kv.total_blocks(), rep.kv.block_size(), cfg_.watermark, rep.reuse, cfg_.prefix_caching);
    set_kv_tiers(rep.kv, rep.kv_bytes_per_token, r * pp_ + k);
    kv_last_ns_[static_cast<size_t>(r * pp_ + k)] = now;
  }
  if (trace_ && trace_->enabled() && r < 64) trace_->complete(cfg_.trace_pid, r * pp_, "down", "fault", now - out, out);
  global_.unpark_all();
}

}  // namespace sluice::serving
