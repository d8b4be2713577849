#include "workloads/serving/global_scheduler.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace sluice::serving {

void GlobalScheduler::dispatch(uint32_t id) {
  Request& q = front_.requests()[id];
  std::span<const std::unique_ptr<Replica>> pool(engines_);
  size_t offset = 0;
  const bool to_prefill = prefill_engines_ > 0 && q.prompt_len() > 1;
  if (prefill_engines_ > 0) {
    pool = to_prefill ? pool.first(prefill_engines_) : pool.subspan(prefill_engines_);
    offset = to_prefill ? 0 : prefill_engines_;
  }
  const bool nowhere_to_decode =
      watch_decode_ && to_prefill &&
      std::none_of(engines_.begin() + static_cast<long>(prefill_engines_), engines_.end(), [](const auto& e) { return e->routable(); });
  const int picked = nowhere_to_decode ? -1 : router_.route(q, pool);
  const int to = picked < 0 ? picked : picked + static_cast<int>(offset);
  if (to < 0) {
    // No healthy replica: parked until one is (or the failover timeout).
    const int64_t now = engine_.now().count_ns();
    q.state = ReqState::Pending;
    q.parked = true;
    parked_.push_back(id);
    // Parked again before it was ever routed (a repair that did not let it through): its
    // first deadline stands.
    if (failover_timeout_ns_ > 0 && q.park_deadline_ns <= now) {
      q.park_deadline_ns = now + failover_timeout_ns_;
      engine_.schedule_at(SimTime::ns(q.park_deadline_ns), Priority::Arrival, this, kParkTimeout, id);
    }
    return;
  }
  q.park_deadline_ns = 0;
  q.replica = to;
  Replica& r = *engines_[static_cast<size_t>(to)];
  if (q.prompt_len() + q.output_tokens > r.kv.admissible_blocks() * r.kv.block_size()) {
    // Longer than a replica can ever hold: ignored, as vLLM does, and counted.
    front_.reject(q, FrontEnd::Rejection::TooLong);
    return;
  }
  if (to_prefill) q.input_tokens -= 1;  // its last token is the decode engine's first step (restored at the handoff)
  q.state = ReqState::Waiting;
  enqueue(r, id);
  ++r.routed;
  if (q.class_id >= 0 && static_cast<size_t>(q.class_id) < shed_ttft_ns_.size() && shed_ttft_ns_[static_cast<size_t>(q.class_id)] > 0 &&
      q.first_scheduled_ns < 0) {
    const int64_t at = std::max(engine_.now().count_ns(), q.arrival_ns + shed_ttft_ns_[static_cast<size_t>(q.class_id)]);
    engine_.schedule_at(SimTime::ns(at), Priority::Arrival, this, kShed, id, Generation(q.serial));
  }
  pool_.request_schedule(to);
}

void GlobalScheduler::enqueue(Replica& r, uint32_t id) {
  if (!by_priority_) {
    r.waiting.push_back(id);
    return;
  }
  const auto& reqs = front_.requests();
  const int32_t p = reqs[id].priority;
  auto at = r.waiting.end();
  while (at != r.waiting.begin() && reqs[*std::prev(at)].priority > p) --at;  // behind every request of its priority or higher
  r.waiting.insert(at, id);
}

void GlobalScheduler::shed(uint32_t id) {
  Request& q = front_.requests()[id];
  if (q.state != ReqState::Waiting || q.first_scheduled_ns >= 0 || q.parked || q.replica < 0) return;
  Replica& r = *engines_[static_cast<size_t>(q.replica)];
  const auto it = std::find(r.waiting.begin(), r.waiting.end(), id);
  if (it == r.waiting.end()) return;
  r.waiting.erase(it);
  --r.routed;
  if (static_cast<size_t>(q.replica) < prefill_engines_) q.input_tokens += 1;  // the prompt's last token, held back for the decode pool
  front_.reject(q, FrontEnd::Rejection::Late);
}

void GlobalScheduler::on_event(Engine& e, uint32_t kind, uint32_t arg) {
  if (kind == kShed) {
    if (e.event_generation() == Generation(front_.requests()[arg].serial)) shed(arg);  // still the request it was set for
    return;
  }
  if (kind != kParkTimeout) throw std::logic_error(fmt::format("internal: the global scheduler got event kind {}", kind));
  const int64_t now = e.now().count_ns();
  Request& q = front_.requests()[arg];
  if (q.parked && now >= q.park_deadline_ns) {
    parked_.erase(std::find(parked_.begin(), parked_.end(), arg));
    q.parked = false;
    front_.fail(q, now);
  }
}

void GlobalScheduler::unpark_all() {
  std::deque<uint32_t> again;
  again.swap(parked_);
  for (uint32_t id : again) {
    front_.requests()[id].parked = false;
    dispatch(id);
  }
}

}  // namespace sluice::serving
