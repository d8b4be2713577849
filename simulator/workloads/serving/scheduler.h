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
  // Data-parallel attention: the engine's devices each schedule their own sequences as a rank
  // of its own (SGLang's enable_dp_attention runs a scheduler a rank and divides the token
  // budget among them, chunked_prefill_size // dp_size), so a token budget is a share per
  // device (mech::TokenBudget). `ranks` is the engine's devices (1 otherwise) and rank_of the
  // device a request's tokens run on: a prompt new to a prefill engine is dealt the next in turn
  // when `deal` is set (as its scheduler first considers it), and told which it would get
  // otherwise.
  int ranks = 1;
  std::function<int(Request&, bool deal)> rank_fn;
  int rank_of(Request& q, bool deal = false) const { return ranks <= 1 ? 0 : rank_fn(q, deal); }
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
// One iteration's token budget: `total` for the engine, or where its devices schedule as ranks
// of their own (Replica::ranks > 1) an equal share of it for each, as SGLang divides its
// chunked_prefill_size by the data-parallel size (at least one token a device, so a budget
// smaller than the devices lets each take one).
class TokenBudget {
 public:
  TokenBudget(const Replica& r, int64_t total) : ranks_(r.ranks), each_(share(r, total)), one_(total) {
    if (ranks_ > 1) {
      many_.assign(static_cast<size_t>(ranks_), each_);
      open_ = ranks_;
    }
  }
  static int64_t share(const Replica& r, int64_t total) { return r.ranks > 1 ? std::max<int64_t>(1, total / r.ranks) : total; }
  // Tokens left to rank k's device, and a device's whole share.
  int64_t left(int k) const { return ranks_ <= 1 ? one_ : many_[static_cast<size_t>(k)]; }
  int64_t each() const { return each_; }
  // Some device has tokens left.
  bool any() const { return ranks_ <= 1 ? one_ > 0 : open_ > 0; }
  void take(int k, int64_t n) {
    if (ranks_ <= 1) {
      one_ -= n;
      return;
    }
    int64_t& l = many_[static_cast<size_t>(k)];
    if (l > 0 && l - n <= 0) --open_;
    l -= n;
  }

 private:
  int ranks_;
  int64_t each_, one_;
  std::vector<int64_t> many_;
  int open_ = 0;
};
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
// The same for the request at position `pos` of the waiting queue (q): where a replica's devices
// each admit their own (admit_waiting_by_device), the scan reaches past requests whose device's
// share is spent or refused them. (Brought to the head for admit, and put back where it was if
// refused.)
template <class Want>
bool admit_at(Replica& r, size_t pos, Request& q, Want want) {
  if (pos == 0) return admit(r, q, want);
  const uint32_t id = r.waiting[pos];
  r.waiting.erase(r.waiting.begin() + static_cast<std::ptrdiff_t>(pos));
  r.waiting.push_front(id);
  if (admit(r, q, want)) return true;
  r.waiting.pop_front();
  r.waiting.insert(r.waiting.begin() + static_cast<std::ptrdiff_t>(pos), id);
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
[[gnu::always_inline]] inline void add(Batch& b, Request& q, int32_t new_tokens) {
  if (q.first_scheduled_ns < 0) q.first_scheduled_ns = b.start_ns;
  b.entries.push_back(BatchEntry{q.id, new_tokens, q.computed, q.computed + new_tokens >= q.length()});
  if (q.in_prefill()) ++b.prefill_entries;
  else ++b.decode_entries;
}
// Admits waiting requests in queue order while the budget lasts, each with the tokens
// chunk(q, left) gives it (-1: refused), `left` being what its device's share has left. With one
// device: the queue's head alone, as a FCFS scheduler does, until one is refused or cannot be
// admitted; `ask_when_spent` asks the head even once the budget is spent (vLLM's prefill loop,
// whose chunk() refuses it then: kept as it was, since a refused admission still claims a
// cached prefix first, mech::admit). Where the devices schedule as ranks of their own (SGLang's
// keep a queue each), each takes its own requests in order: a request whose device's share is
// spent or refuses it is passed over for the next, its device closed for the rest of the pass
// (so a device's requests stay in order); one that cannot be admitted (no blocks) ends it.
template <class Chunk>
[[gnu::noinline]] void admit_waiting_by_device(Replica& r, Batch& out, TokenBudget& budget, size_t max_seqs, Chunk& chunk);
template <class Chunk>
void admit_waiting(Replica& r, Batch& out, TokenBudget& budget, size_t max_seqs, Chunk chunk, bool ask_when_spent = false) {
  if (r.ranks > 1) return admit_waiting_by_device(r, out, budget, max_seqs, chunk);
  int64_t n = -1;  // the tokens chunk() gave the request being admitted
  // The head alone, while the budget lasts (the serving hot path: no scan).
  while ((ask_when_spent || budget.any()) && !r.waiting.empty() && r.running.size() < max_seqs) {
    Request& q = r.req(r.waiting.front());
    const int64_t left = budget.left(0);
    if (!admit(r, q, [&](const Request& x) -> int64_t {
          n = chunk(x, left);
          return n < 0 ? -1 : x.computed + n;
        }))
      break;
    add(out, q, static_cast<int32_t>(n));
    budget.take(0, n);
  }
}
template <class Chunk>
void admit_waiting_by_device(Replica& r, Batch& out, TokenBudget& budget, size_t max_seqs, Chunk& chunk) {
  int64_t n = -1;
  size_t i = 0;
  while (budget.any() && i < r.waiting.size() && r.running.size() < max_seqs) {
    Request& q = r.req(r.waiting[i]);
    const int k = r.rank_of(q, /*deal=*/true);  // (a prompt new to a prefill engine is dealt its device as it is first considered)
    const int64_t left = budget.left(k);
    if (left <= 0) {
      ++i;  // its device's share is spent: the next request may be another device's
      continue;
    }
    n = -1;
    if (!admit_at(r, i, q, [&](const Request& x) -> int64_t {
          n = chunk(x, left);
          return n < 0 ? -1 : x.computed + n;
        })) {
      if (n >= 0) break;  // no blocks for it: nothing behind it is admitted either (FCFS)
      budget.take(k, left);  // refused by its device's share: the device takes nothing more this pass
      ++i;
      continue;
    }
    add(out, q, static_cast<int32_t>(n));
    budget.take(k, n);
  }
}
}  // namespace mech

}  // namespace sluice::serving
