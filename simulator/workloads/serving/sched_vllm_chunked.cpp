// vLLM with chunked prefill (`enable_chunked_prefill`, always on in vLLM's V1 engine): one
// token budget per step (max_num_batched_tokens) filled from the running requests in the order
// they were admitted (a decode takes one token, a prefill in progress the rest of its prompt
// or what the budget leaves), then from the waiting queue, first come first served. A prompt
// longer than long_prefill_token_threshold (when set) takes at most that many tokens a step.
//
// What differs from `sarathi`: Sarathi-Serve sizes a small budget to the TPOT objective (512
// here by default) and serves every decode before any prefill chunk; vLLM's default budget is
// large (8192: most prompts prefill in one step beside the decodes, lower TTFT, longer steps
// for the decodes that ride along) and serves running requests in admission order.
#include <algorithm>
#include <limits>

#include "config/binding.h"
#include "registry/registry.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

namespace {

struct VllmChunkedConfig {
  size_t max_seqs = 256;
  int64_t budget = 8192;
  int64_t long_prefill = 0;  // 0: no cap on one prompt's chunk
};

class VllmChunkedScheduler final : public Scheduler {
 public:
  explicit VllmChunkedScheduler(const VllmChunkedConfig& c)
      : max_seqs_(c.max_seqs), budget_(c.budget), long_prefill_(c.long_prefill > 0 ? c.long_prefill : std::numeric_limits<int64_t>::max()) {}

  void schedule(Replica& r, Batch& out, int64_t) override {
    mech::reserve_decode_slots(r, out);  // every running decode has room (the latest admitted preempted if not)
    mech::TokenBudget budget(r, budget_);  // (a share a device under data-parallel attention)
    for (size_t i = 0; i < r.running.size() && budget.any(); ++i) {
      Request& q = r.req(r.running[i]);
      const int k = r.rank_of(q, /*deal=*/true);
      if (budget.left(k) <= 0) continue;  // its device's budget is spent (another's may not be)
      if (!q.in_prefill()) {
        mech::add(out, q, 1);
        budget.take(k, 1 + r.lookahead);  // a speculative step scores its drafts too, and they count (as vLLM counts them)
        continue;
      }
      const int32_t chunk = static_cast<int32_t>(std::min({static_cast<int64_t>(q.length() - q.computed), budget.left(k), long_prefill_}));
      if (!r.kv.grow_to(q, q.computed + chunk)) continue;  // no blocks for its chunk now: it waits a step
      mech::add(out, q, chunk);
      budget.take(k, chunk);
    }
    if (!r.swapped.empty()) {
      mech::swap_in(r, out, max_seqs_);
      return;
    }
    mech::admit_waiting(r, out, budget, max_seqs_, [this](const Request& x, int64_t left) {
      return std::min({static_cast<int64_t>(x.length() - x.computed), left, long_prefill_});
    });
  }
  // Nothing waiting or swapped (and, as the simulation checks, no running prefill chunk), and
  // every running decode within the budget: only decodes, all of them. (Never said of an engine
  // whose devices schedule as ranks, each within its share: such an engine is on the fabric, so
  // its steps are events and this is not asked of it.)
  bool steady_decode(const Replica& r) const override {
    return r.ranks <= 1 && r.waiting.empty() && r.swapped.empty() && static_cast<int64_t>(r.running.size()) <= budget_;
  }
  int64_t max_tokens_per_iteration() const override { return budget_ + static_cast<int64_t>(max_seqs_); }

 private:
  size_t max_seqs_;
  int64_t budget_;
  int64_t long_prefill_;
};

}  // namespace

SLUICE_REGISTER(component, vllm_chunked_scheduler) {
  Schema s;
  Binding<VllmChunkedConfig> keys(s);
  keys.integer("max_num_seqs", &VllmChunkedConfig::max_seqs, "most sequences in one step").def("256").range(1, 65536);
  keys.integer("max_num_batched_tokens", &VllmChunkedConfig::budget,
               "tokens per step (under data-parallel attention an equal share a device): running requests in admission order (a decode one, a prefill a chunk), then new prompts")
      .def("8192")
      .range(1, 1 << 22);
  keys.integer("long_prefill_token_threshold", &VllmChunkedConfig::long_prefill, "the most tokens one prompt takes in a step (0: no cap)")
      .def("0")
      .range(0, 1 << 22);
  reg.add("scheduler", "vllm_chunked",
          "vLLM with chunked prefill (V1's unified step): one token budget, running requests in admission order, then new "
          "prompts chunked to fit",
          s, SchedulerFactory([keys](const Params& p) { return std::make_unique<VllmChunkedScheduler>(keys.make(p)); }));
}

}  // namespace sluice::serving
