#include "world/world.h"

#include <stdexcept>

#include <fmt/format.h>

namespace sluice {

World::World(uint64_t seed, Cluster cluster)
    : engine_(seed),
      cluster_(std::move(cluster)),
      router_(*cluster_.topology),
      flows_(engine_, *cluster_.topology, router_),
      owner_(cluster_.topology->devices().size()) {}

void World::claim(const std::vector<int>& devices, const std::string& who) {
  for (int d : devices) {
    if (d < 0 || d >= device_count())
      throw std::invalid_argument(fmt::format("device {} does not exist: the cluster has devices 0-{}", d, device_count() - 1));
    auto& o = owner_[static_cast<size_t>(d)];
    if (!o.empty())
      throw std::invalid_argument(fmt::format("device {} ({}) is already held by workload '{}'", d,
                                              topology().node(device_node(d)).name, o));
  }
  for (int d : devices) owner_[static_cast<size_t>(d)] = who;
}

void World::workload_done() {
  if (--holding_ <= 0) engine_.stop();
}

void World::run(SimTime until) {
  holding_ = 0;
  for (const auto& w : workloads_) w->start(*this);
  for (const auto& w : workloads_) holding_ += w->holds_world() ? 1 : 0;
  if (holding_ > 0) engine_.run(until);
  ran_until_ = engine_.now();
  for (const auto& w : workloads_) w->finish(*this);
}

void World::report(Recorder& rec) const {
  const bool scoped = workloads_.size() > 1;
  for (const auto& w : workloads_) w->report(rec, scoped);
  rec.trace() = trace_;
  const auto& fs = flows_.stats();
  Json& m = rec.metrics()["world"];
  m["topology"] = topology().name();
  m["devices"] = device_count();
  m["workloads"] = workloads_.size();
  m["simulated_s"] = ran_until_.to_seconds();
  m["events"] = engine_.events_processed();
  m["flows"] = Json{{"started", fs.started}, {"completed", fs.completed}, {"rate_recomputations", fs.recomputes},
                    {"max_concurrent", fs.max_active}};
}

}  // namespace sluice
