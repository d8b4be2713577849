// Prefix-aware routing (SGLang's cache-aware router, llm-d's prefix scorer): a request whose
// prompt starts with a shared prefix goes to the least-loaded replica that holds that prefix's
// KV blocks, unless it has more than `max_imbalance` outstanding requests over the
// least-loaded replica; otherwise, and for a request without a prefix, to the least-loaded.
#include "registry/registry.h"
#include "workloads/serving/router.h"

namespace sluice::serving {

namespace {

class PrefixAffinity final : public Router {
 public:
  explicit PrefixAffinity(const Params& p) : max_imbalance_(static_cast<size_t>(p.integer("max_imbalance"))) {}
  int route(const Request& q, std::span<const std::unique_ptr<Replica>> rs) override {
    int least = -1, holder = -1;
    for (int i = 0; i < static_cast<int>(rs.size()); ++i) {
      const Replica& r = *rs[static_cast<size_t>(i)];
      if (!r.routable()) continue;
      if (least < 0 || r.routed < rs[static_cast<size_t>(least)]->routed) least = i;  // ties: lowest index
      if (q.prefix_id >= 0 && r.kv.prefix_resident(q.prefix_id) &&
          (holder < 0 || r.routed < rs[static_cast<size_t>(holder)]->routed))
        holder = i;
    }
    if (holder >= 0 && rs[static_cast<size_t>(holder)]->routed <= rs[static_cast<size_t>(least)]->routed + max_imbalance_) return holder;
    return least;
  }

 private:
  size_t max_imbalance_;
};

}  // namespace

SLUICE_REGISTER(component, serving_router_prefix) {
  Schema s;
  s.add("max_imbalance", ParamType::Int, "extra outstanding requests tolerated to go where the prefix is cached").def("8").nonneg();
  reg.add("router", "prefix_affinity", "a request goes where its prompt's shared prefix is cached, within a load bound", s,
          RouterFactory([](const Params& p) { return std::make_unique<PrefixAffinity>(p); }));
}

}  // namespace sluice::serving
