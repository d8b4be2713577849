// Static batching, the baseline: a batch is formed when the replica is idle (once
// `batch_size` requests wait, or the oldest has waited `max_wait`), prefilled together, and
// decoded until its longest member finishes; finished members keep their slot as padding,
// and nothing joins until the whole batch is done.
#include <algorithm>

#include "config/binding.h"
#include "registry/registry.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

namespace {

struct StaticConfig {
  size_t batch_size = 8;
  int64_t max_wait_ns = 50'000'000;
};

class StaticScheduler final : public Scheduler {
 public:
  explicit StaticScheduler(const StaticConfig& c) : batch_size_(c.batch_size), max_wait_ns_(c.max_wait_ns) {}

  void schedule(Replica& r, Batch& out, int64_t now_ns) override {
    // A member is live while its slot still holds it (slots are reused once a request ends) and
    // this replica still runs it: a prefill engine hands a prompt to the decode pool when its
    // prefill ends, after which it is padding here as a finished member is.
    auto live = [&](const Member& m) {
      const Request& q = r.req(m.slot);
      return q.serial == m.serial && q.state != ReqState::Done && std::find(r.running.begin(), r.running.end(), m.slot) != r.running.end();
    };
    bool any = false;
    for (const Member& m : members_) any |= live(m);
    if (!any) members_.clear();
    if (members_.empty()) {
      if (r.waiting.empty()) return;
      const bool full = r.waiting.size() >= batch_size_;
      const bool waited = now_ns - r.req(r.waiting.front()).arrival_ns >= max_wait_ns_;
      if (!full && !waited) return;
      while (!r.waiting.empty() && members_.size() < batch_size_) {
        Request& q = r.req(r.waiting.front());
        // The whole sequence is reserved up front: nothing is preempted mid-batch.
        if (!mech::admit(r, q, [](const Request& x) { return static_cast<int64_t>(x.prompt_len()) + x.output_tokens; })) break;
        members_.push_back(Member{q.id, q.serial, q.prompt_len() + q.output_tokens});
      }
      if (members_.empty()) return;
    }
    for (const Member& m : members_) {
      if (!live(m)) {
        // Padding: a finished sequence still occupies its row of the batch (its full length).
        out.entries.push_back(BatchEntry{kPaddingSlot, 1, m.final_length});
        ++out.decode_entries;
      } else {
        Request& q = r.req(m.slot);
        mech::add(out, q, q.length() - q.computed);
      }
    }
  }
  int64_t wake_at(const Replica& r, int64_t now_ns) const override {
    if (!members_.empty() || r.waiting.empty()) return -1;
    const int64_t at = (*r.reqs)[r.waiting.front()].arrival_ns + max_wait_ns_;
    return at > now_ns ? at : -1;  // already due: the next completion or arrival retries
  }
  int64_t max_tokens_per_iteration() const override { return static_cast<int64_t>(batch_size_) * 4096; }

 private:
  size_t batch_size_;
  int64_t max_wait_ns_;
  struct Member {
    uint32_t slot, serial;
    int32_t final_length;  // prompt and every output token: what a finished member pads with
  };
  std::vector<Member> members_;
};

}  // namespace

SLUICE_REGISTER(component, static_scheduler) {
  Schema s;
  Binding<StaticConfig> keys(s);
  keys.integer("batch_size", &StaticConfig::batch_size, "requests per batch").def("8").range(1, 65536);
  keys.time_ns("max_wait", &StaticConfig::max_wait_ns, "start a partial batch once its oldest request waited this long")
      .def("50ms")
      .range(0, 3.6e12);  // at most 1 h
  reg.add("scheduler", "static", "static batching baseline: whole batches, padded to the longest member", s,
          SchedulerFactory([keys](const Params& p) { return std::make_unique<StaticScheduler>(keys.make(p)); }));
}

}  // namespace sluice::serving
