// Round-robin, least-outstanding-requests and KV-affinity routing.
#include "registry/registry.h"
#include "workloads/serving/router.h"

namespace sluice::serving {

namespace {

// Every router sends only to healthy replicas; -1 when none is. Outstanding: routed there
// and not ended (a disaggregated decode engine's count includes the KV copies on their way).
int least_outstanding(std::span<const std::unique_ptr<Replica>> rs) {
  int best = -1;
  size_t least = 0;
  for (int i = 0; i < static_cast<int>(rs.size()); ++i) {
    const Replica& r = *rs[i];
    if (r.routable() && (best < 0 || r.routed < least)) {  // ties: lowest index
      best = i;
      least = r.routed;
    }
  }
  return best;
}

class RoundRobin final : public Router {
 public:
  int route(const Request&, std::span<const std::unique_ptr<Replica>> rs) override {
    const int n = static_cast<int>(rs.size());
    for (int k = 0; k < n; ++k) {
      const int r = next_;
      next_ = (next_ + 1) % n;
      if (rs[r]->routable()) return r;
    }
    return -1;
  }

 private:
  int next_ = 0;
};

class LeastOutstanding final : public Router {
 public:
  int route(const Request&, std::span<const std::unique_ptr<Replica>> rs) override { return least_outstanding(rs); }
};

// Sends a conversation's later turns where its KV cache still is, unless that replica is
// overloaded by more than `max_imbalance` outstanding requests over the least-loaded one.
class KvAffinity final : public Router {
 public:
  explicit KvAffinity(const Params& p) : max_imbalance_(static_cast<size_t>(p.integer("max_imbalance"))) {}
  int route(const Request& q, std::span<const std::unique_ptr<Replica>> rs) override {
    const int least = least_outstanding(rs);
    if (least < 0) return -1;
    if (q.turn > 0) {
      for (int i = 0; i < static_cast<int>(rs.size()); ++i)
        if (rs[i]->routable() && rs[i]->kv.resident(q.conversation) && rs[i]->routed <= rs[least]->routed + max_imbalance_)
          return i;
    }
    return least;
  }

 private:
  size_t max_imbalance_;
};

}  // namespace

SLUICE_REGISTER(component, serving_routers) {
  reg.add("router", "round_robin", "replicas in turn", Schema{},
          RouterFactory([](const Params&) { return std::make_unique<RoundRobin>(); }));
  reg.add("router", "least_outstanding", "the replica with the fewest waiting+running+swapped requests", Schema{},
          RouterFactory([](const Params&) { return std::make_unique<LeastOutstanding>(); }));
  Schema s;
  s.add("max_imbalance", ParamType::Int, "extra outstanding requests tolerated to stay with the cache").def("8").nonneg();
  reg.add("router", "kv_affinity", "a conversation's next turn goes where its KV cache is resident", s,
          RouterFactory([](const Params& p) { return std::make_unique<KvAffinity>(p); }));
}

}  // namespace sluice::serving
