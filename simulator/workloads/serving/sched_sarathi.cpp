// Sarathi-Serve chunked prefill (Agrawal et al., OSDI 2024): every iteration carries all
// running decodes first, then fills the remaining token budget with prefill chunks, so
// prefills never stall decodes for long ("stall-free batching").
#include <algorithm>

#include "config/binding.h"
#include "registry/registry.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

namespace {

struct SarathiConfig {
  size_t max_seqs = 256;
  int64_t budget = 512;
};

class SarathiScheduler final : public Scheduler {
 public:
  explicit SarathiScheduler(const SarathiConfig& c) : max_seqs_(c.max_seqs), budget_(c.budget) {}

  void schedule(Replica& r, Batch& out, int64_t) override {
    mech::reserve_decode_slots(r, out);
    mech::TokenBudget budget(r, budget_);  // (a share a device under data-parallel attention)
    for (uint32_t id : r.running) {
      Request& q = r.req(id);
      if (!q.in_prefill()) {
        mech::add(out, q, 1);
        budget.take(r.rank_of(q), 1 + r.lookahead);  // a speculative step scores its drafts too
      }
    }
    if (r.swapped.empty()) {
      // Ongoing chunked prefills, then new admissions, while budget remains.
      for (size_t i = 0; i < r.running.size() && budget.any(); ++i) {
        Request& q = r.req(r.running[i]);
        if (!q.in_prefill()) continue;
        const int k = r.rank_of(q, /*deal=*/true);
        const int64_t left = budget.left(k);
        if (left <= 0) continue;  // its device's budget is spent (another's may not be)
        const int32_t chunk = static_cast<int32_t>(std::min<int64_t>(q.length() - q.computed, left));
        if (!r.kv.grow_to(q, q.computed + chunk)) break;
        mech::add(out, q, chunk);
        budget.take(k, chunk);
      }
      mech::admit_waiting(r, out, budget, max_seqs_, [](const Request& x, int64_t left) { return std::min<int64_t>(x.length() - x.computed, left); });
    } else {
      mech::swap_in(r, out, max_seqs_);
    }
  }
  // Nothing waiting or swapped (and, as the simulation checks, no running prefill chunk): only decodes.
  bool steady_decode(const Replica& r) const override { return r.waiting.empty() && r.swapped.empty(); }
  int64_t max_tokens_per_iteration() const override { return budget_ + static_cast<int64_t>(max_seqs_); }

 private:
  size_t max_seqs_;
  int64_t budget_;
};

}  // namespace

SLUICE_REGISTER(component, sarathi_scheduler) {
  Schema s;
  Binding<SarathiConfig> keys(s);
  keys.integer("max_num_seqs", &SarathiConfig::max_seqs, "most sequences in one iteration").def("256").range(1, 65536);
  keys.integer("token_budget", &SarathiConfig::budget,
               "tokens per iteration (under data-parallel attention an equal share a device): decodes first, prefill chunks fill the rest")
      .def("512")
      .range(1, 1 << 20);
  reg.add("scheduler", "sarathi", "chunked prefill with a per-iteration token budget, decode-first (Sarathi-Serve)", s,
          SchedulerFactory([keys](const Params& p) { return std::make_unique<SarathiScheduler>(keys.make(p)); }));
}

}  // namespace sluice::serving
