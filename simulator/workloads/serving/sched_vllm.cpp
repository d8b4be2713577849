// vLLM-style continuous batching (vLLM v0's default policy): waiting prompts are admitted
// FCFS into prefill-only iterations under a token budget; otherwise every running sequence
// decodes one token, preempting the latest-admitted ones when KV blocks run out.
#include <algorithm>

#include "registry/registry.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

namespace {

class VllmScheduler final : public Scheduler {
 public:
  explicit VllmScheduler(const Params& p)
      : max_seqs_(static_cast<size_t>(p.integer("max_num_seqs"))), max_tokens_(p.integer("max_num_batched_tokens")) {}

  void schedule(Replica& r, Batch& out, int64_t) override {
    if (r.swapped.empty()) {
      int64_t tokens = 0;
      while (!r.waiting.empty() && r.running.size() < max_seqs_) {
        Request& q = r.req(r.waiting.front());
        const bool ok = mech::admit(r, q, [&](const Request& x) -> int64_t {
          const int64_t n = x.length() - x.computed;
          return tokens > 0 && tokens + n > max_tokens_ ? -1 : x.length();
        });
        if (!ok) break;
        const int32_t n = q.length() - q.computed;
        mech::add(out, q, n);
        tokens += n;
      }
      if (!out.empty()) return;
    }
    const int preempted = mech::reserve_decode_slots(r, out);
    for (uint32_t id : r.running) mech::add(out, r.req(id), 1);
    if (preempted == 0) {
      mech::swap_in(r, out, max_seqs_);
    }
  }
  int64_t max_tokens_per_iteration() const override { return std::max<int64_t>(max_tokens_, static_cast<int64_t>(max_seqs_)); }

 private:
  size_t max_seqs_;
  int64_t max_tokens_;
};

}  // namespace

void register_vllm_scheduler(Registry& reg) {
  Schema s;
  s.add("max_num_seqs", ParamType::Int, "most sequences in one iteration").def("256").range(1, 65536);
  s.add("max_num_batched_tokens", ParamType::Int, "token budget of a prefill iteration").def("8192").range(1, 1 << 22);
  reg.add("scheduler", "vllm", "continuous batching, prefill-first, paged KV with preemption (vLLM v0 default)", s,
          SchedulerFactory([](const Params& p) { return std::make_unique<VllmScheduler>(p); }));
}

}  // namespace sluice::serving
