// vLLM-style continuous batching (vLLM v0's default policy): waiting prompts are admitted
// FCFS into prefill-only iterations under a token budget; otherwise every running sequence
// decodes one token, preempting the latest-admitted ones when KV blocks run out.
#include <algorithm>

#include "config/binding.h"
#include "registry/registry.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

namespace {

struct VllmConfig {
  size_t max_seqs = 256;
  int64_t max_tokens = 8192;
};

class VllmScheduler final : public Scheduler {
 public:
  explicit VllmScheduler(const VllmConfig& c) : max_seqs_(c.max_seqs), max_tokens_(c.max_tokens) {}

  void schedule(Replica& r, Batch& out, int64_t) override {
    if (r.swapped.empty()) {
      mech::TokenBudget budget(r, max_tokens_);  // (a share a device under data-parallel attention)
      // A prompt whole, unless its device has taken some of its budget and the prompt exceeds what is left.
      mech::admit_waiting(
          r, out, budget, max_seqs_,
          [&budget](const Request& x, int64_t left) -> int64_t {
            const int64_t n = x.length() - x.computed;
            return left < budget.each() && n > left ? -1 : n;
          },
          /*ask_when_spent=*/true);
      if (!out.empty()) return;
    }
    const int preempted = mech::reserve_decode_slots(r, out);
    for (uint32_t id : r.running) mech::add(out, r.req(id), 1);
    if (preempted == 0) {
      mech::swap_in(r, out, max_seqs_);
    }
  }
  // Nothing waiting or swapped: no prefill iteration, no swap-in; every running sequence decodes.
  bool steady_decode(const Replica& r) const override { return r.waiting.empty() && r.swapped.empty(); }
  int64_t max_tokens_per_iteration() const override { return std::max<int64_t>(max_tokens_, static_cast<int64_t>(max_seqs_)); }

 private:
  size_t max_seqs_;
  int64_t max_tokens_;
};

}  // namespace

SLUICE_REGISTER(component, vllm_scheduler) {
  Schema s;
  Binding<VllmConfig> keys(s);
  keys.integer("max_num_seqs", &VllmConfig::max_seqs, "most sequences in one iteration").def("256").range(1, 65536);
  keys.integer("max_num_batched_tokens", &VllmConfig::max_tokens, "token budget of a prefill iteration (under data-parallel attention an equal share a device)").def("8192").range(1, 1 << 22);
  reg.add("scheduler", "vllm", "continuous batching, prefill-first, paged KV with preemption (vLLM v0 default)", s,
          SchedulerFactory([keys](const Params& p) { return std::make_unique<VllmScheduler>(keys.make(p)); }));
}

}  // namespace sluice::serving
