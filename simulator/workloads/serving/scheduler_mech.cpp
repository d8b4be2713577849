#include <algorithm>

#include "workloads/serving/scheduler.h"

namespace sluice::serving::mech {

void preempt(Replica& r, uint32_t victim, Batch& batch) {
  Request& q = r.req(victim);
  r.running.erase(std::find(r.running.begin(), r.running.end(), victim));
  ++q.preemptions;
  ++r.preemptions;
  const bool can_swap = r.preemption == PreemptionMode::Swap && r.swapped_tokens + q.computed <= r.swap_capacity_tokens;
  if (can_swap && q.computed > 0) {
    const double bytes = static_cast<double>(q.computed) * r.kv_bytes_per_token;
    batch.extra_ns += bytes / r.swap_Bps * 1e9;
    batch.swap_bytes += bytes;
    r.swap_bytes += bytes;
    r.swapped_tokens += q.computed;
    r.kv.release(q);
    q.state = ReqState::Swapped;
    r.swapped.push_back(victim);
    return;
  }
  // Recompute: the KV is dropped; prompt and generated tokens are prefilled again.
  r.kv.release(q);
  q.computed = 0;
  q.state = ReqState::Waiting;
  r.waiting.push_front(victim);
}

int reserve_decode_slots(Replica& r, Batch& batch) {
  int preempted = 0;
  for (size_t i = 0; i < r.running.size();) {
    Request& q = r.req(r.running[i]);
    if (q.in_prefill()) { ++i; continue; }  // prefill chunks get their blocks when chunked
    bool ok = r.kv.grow_to(q, decode_slots(r, q));
    while (!ok) {
      const uint32_t victim = r.running.back();
      preempt(r, victim, batch);
      ++preempted;
      if (victim == q.id) break;
      ok = r.kv.grow_to(q, decode_slots(r, q));
    }
    if (ok) ++i;
  }
  return preempted;
}

void swap_in(Replica& r, Batch& batch, size_t max_running) {
  while (!r.swapped.empty() && r.running.size() < max_running) {
    Request& q = r.req(r.swapped.front());
    if (!r.kv.grow_to(q, decode_slots(r, q))) break;
    const double bytes = static_cast<double>(q.computed) * r.kv_bytes_per_token;
    batch.extra_ns += bytes / r.swap_Bps * 1e9;
    batch.swap_bytes += bytes;
    r.swap_bytes += bytes;
    r.swapped_tokens -= q.computed;
    q.state = ReqState::Running;
    r.running.push_back(q.id);
    r.swapped.pop_front();
    add(batch, q, 1);
  }
}

}  // namespace sluice::serving::mech
