// Routers pick the replica for each arriving request.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "config/schema.h"
#include "workloads/serving/scheduler.h"

namespace sluice::serving {

class Router {
 public:
  virtual ~Router() = default;
  // The replica for `q` among the healthy ones (an index into `replicas`, the engines of the
  // pool it is routed in); -1 when none is healthy.
  virtual int route(const Request& q, std::span<const std::unique_ptr<Replica>> replicas) = 0;
};

using RouterFactory = std::function<std::unique_ptr<Router>(const Params&)>;

}  // namespace sluice::serving
