// Orca iteration-level batching (Yu et al., OSDI 2022): the batch is re-formed every
// iteration and mixes whole-prompt prefills with decodes (selective batching); KV memory is
// not paged, so each admitted sequence reserves room for its prompt plus `max_new_tokens`.
#include <algorithm>

#include "config/binding.h"
#include "registry/registry.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

namespace {

struct OrcaConfig {
  size_t max_batch = 64;
  int64_t max_new = 1024;
};

class OrcaScheduler final : public Scheduler {
 public:
  explicit OrcaScheduler(const OrcaConfig& c) : max_batch_(c.max_batch), max_new_(c.max_new) {}

  void schedule(Replica& r, Batch& out, int64_t) override {
    mech::reserve_decode_slots(r, out);  // only needed when a sequence outgrows its reservation
    while (!r.waiting.empty() && r.running.size() < max_batch_) {
      Request& q = r.req(r.waiting.front());
      // The reservation never exceeds what a replica can hold (the sequence itself always fits).
      const int64_t capacity = r.kv.admissible_blocks() * r.kv.block_size();
      const int64_t reserve = std::min<int64_t>(
          capacity, std::max<int64_t>(q.length(), static_cast<int64_t>(q.prompt_len()) + std::max<int64_t>(max_new_, q.output_tokens)));
      if (!mech::admit(r, q, [&](const Request&) { return reserve; })) break;
    }
    for (uint32_t id : r.running) {
      Request& q = r.req(id);
      mech::add(out, q, q.length() - q.computed);
    }
  }
  // Nothing waiting: no admission; every running sequence (all past their prompts, as the
  // simulation checks) adds its one new token.
  bool steady_decode(const Replica& r) const override { return r.waiting.empty() && r.swapped.empty(); }
  int64_t max_tokens_per_iteration() const override { return static_cast<int64_t>(max_batch_) * 4096; }

 private:
  size_t max_batch_;
  int64_t max_new_;
};

}  // namespace

SLUICE_REGISTER(component, orca_scheduler) {
  Schema s;
  Binding<OrcaConfig> keys(s);
  keys.integer("max_batch_size", &OrcaConfig::max_batch, "most sequences in one iteration").def("64").range(1, 65536);
  keys.integer("max_new_tokens", &OrcaConfig::max_new, "output tokens reserved per sequence at admission (contiguous KV)")
      .def("1024")
      .range(1, 1 << 20);
  reg.add("scheduler", "orca", "iteration-level batching mixing prefills and decodes; KV reserved per sequence", s,
          SchedulerFactory([keys](const Params& p) { return std::make_unique<OrcaScheduler>(keys.make(p)); }));
}

}  // namespace sluice::serving
