// Batching schedulers: each decides, per iteration of one replica, which sequences run and
// how many tokens each processes, allocating (and if needed preempting) KV cache.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "config/schema.h"
#include "workloads/serving/kv_cache.h"
#include "workloads/serving/request.h"

namespace sluice::serving {

enum class PreemptionMode { Recompute, Swap };

// One model replica's queues and KV cache, as the scheduler sees and changes them.
struct Replica {
  std::vector<Request>* reqs = nullptr;
  // What a router reads of every replica for every arrival, together in the object's first
  // cache line. Requests routed here and not yet ended (waiting + running + swapped), kept by
  // the simulation as it routes, ends and requeues them (summing three queues' sizes over
  // every replica cost a tenth of a serving run):
  // On a disaggregated decode engine it also counts the prefilled requests assigned here whose
  // KV cache is still on its way (`incoming` of them, not yet in its queues).
  size_t routed = 0;
  size_t incoming = 0;
  // Routers send here: healthy and not draining, kept in one byte beside `routed` (routers read
  // it for every replica on every arrival). Written through set_health and set_draining only.
  bool accepting = true;
  bool healthy = true;  // false from a failure of one of its devices until repaired and reloaded: routers skip it
  bool draining = false;  // being scaled down: it finishes what it holds and takes nothing new
  bool routable() const { return accepting; }
  void set_health(bool h) {
    healthy = h;
    accepting = healthy && !draining;
  }
  void set_draining(bool d) {
    draining = d;
    accepting = healthy && !draining;
  }
  std::deque<uint32_t> waiting;   // arrived, not admitted (FCFS; preempted go to the front)
  std::vector<uint32_t> running;  // admitted, in admission order
  std::deque<uint32_t> swapped;   // preempted to host memory
  BlockManager kv;
  PreemptionMode preemption = PreemptionMode::Recompute;
  double kv_bytes_per_token = 0;  // over the whole replica (all its GPUs)
  double swap_Bps = 0;            // host link bandwidth over all the replica's GPUs
  double ssd_Bps = 0;             // its host's drives' read bandwidth, over all its GPUs
  int64_t swap_capacity_tokens = 0;
  int64_t swapped_tokens = 0;
  // Speculative decoding's proposals per step: a decode step holds KV for this many more tokens
  // (the drafts it verifies; vLLM's lookahead slots).
  int lookahead = 0;
  bool reuse = false;
  // Counters.
  int64_t preemptions = 0;
  double swap_bytes = 0;

  Replica(int64_t blocks, int block_size, double watermark, bool reuse_cache, bool prefix_caching = false)
      : kv(blocks, block_size, watermark, reuse_cache, prefix_caching), reuse(reuse_cache) {}
  Request& req(uint32_t id) { return (*reqs)[id]; }
  size_t outstanding() const { return waiting.size() + running.size() + swapped.size(); }
};

// The scheduler interface. Implementations are registered by name (category "scheduler").
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Fills `out` with the next iteration of `r` (empty: nothing to run now).
  virtual void schedule(Replica& r, Batch& out, int64_t now_ns) = 0;
  // For schedulers that wait to fill a batch: when to try again (-1: only on arrivals).
  virtual int64_t wake_at(const Replica&, int64_t /*now_ns*/) const { return -1; }
  // Steady decode: true when, with nothing arriving, the next schedule() is exactly this:
  // every running sequence in order grows its KV by one token (reserve_decode_slots) and
  // decodes one token, and nothing else joins (no admission, no swap-in); the same for every
  // iteration after it until a sequence ends, a request arrives or blocks run out. The
  // simulation then runs such iterations without asking (a fast-forward with the same
  // results); false (the default) always asks.
  virtual bool steady_decode(const Replica&) const { return false; }
  // The largest number of new tokens one iteration may carry (sizes activation memory).
  virtual int64_t max_tokens_per_iteration() const = 0;
};

using SchedulerFactory = std::function<std::unique_ptr<Scheduler>(const Params&)>;

// Shared mechanics used by the policies.
namespace mech {
// Admits the request at the head of the waiting queue if its KV can grow to want(q) tokens
// (want returns -1 to refuse, e.g. over a token budget). A first admission takes over the
// conversation's resident cache before `want` is asked; the claim is undone if admission
// fails, so a waiting request never pins blocks.
template <class Want>
bool admit(Replica& r, Request& q, Want want) {
  int64_t claimed = 0;
  bool shared = false;
  if (r.reuse && q.first_scheduled_ns < 0 && q.computed == 0 && q.blocks == 0 && q.history_tokens > 0 &&
      !q.history_truncated) {
    claimed = r.kv.claim(q, q.history_tokens);
    q.computed = q.cached_tokens = static_cast<int32_t>(claimed);
  } else if (q.computed == 0 && q.blocks == 0 && q.history_tokens == 0 && q.prefix_id >= 0 && r.kv.prefix_caching()) {
    claimed = r.kv.claim_prefix(q);  // its prompt's shared prefix, if resident here
    shared = claimed > 0;
    q.computed = q.cached_tokens = static_cast<int32_t>(claimed);
  }
  const int64_t target = want(static_cast<const Request&>(q));
  if (target >= 0 && r.kv.grow_to(q, target, /*admission=*/true)) {
    r.waiting.pop_front();
    q.state = ReqState::Running;
    r.running.push_back(q.id);
    return true;
  }
  if (shared) {
    r.kv.unshare(q);
    q.computed = q.cached_tokens = 0;
  } else if (claimed > 0) {
    r.kv.restore(q, claimed);
    q.computed = q.cached_tokens = 0;
  }
  return false;
}
// Preempts `victim` (recompute: drop its KV and requeue at the front; swap: copy its KV to
// host over the host link, charging the time to `batch`). Removes it from `running`.
void preempt(Replica& r, uint32_t victim, Batch& batch);
// Ensures every running decode has room for one more token (and r.lookahead drafts), preempting the most recently
// admitted sequences when blocks run out (vLLM's policy). Returns the number preempted.
int reserve_decode_slots(Replica& r, Batch& batch);
// The KV a decode step of q needs: its next token, and with speculative decoding the drafts
// verified with it (never past the request's last token: drafts beyond it are thrown away).
inline int32_t decode_slots(const Replica& r, const Request& q) {
  const int32_t next = q.computed + 1;
  return r.lookahead == 0 ? next : std::min(next + r.lookahead, std::max(next, q.prompt_len() + q.output_tokens));
}
// Brings swapped sequences back while blocks allow (charging the copy time) and adds each
// to the batch as a decode.
void swap_in(Replica& r, Batch& batch, size_t max_running);
// Adds `new_tokens` of `q` to the batch (the first time it is scheduled, at the batch's start).
inline void add(Batch& b, Request& q, int32_t new_tokens) {
  if (q.first_scheduled_ns < 0) q.first_scheduled_ns = b.start_ns;
  b.entries.push_back(BatchEntry{q.id, new_tokens, q.computed, q.computed + new_tokens >= q.length()});
  if (q.in_prefill()) ++b.prefill_entries;
  else ++b.decode_entries;
}
}  // namespace mech

}  // namespace sluice::serving
