// A workload that can never finish: nothing is left to happen and it still holds the run open
// (a training job whose group is cut off with its watchdog off, devices or replicas that are
// never repaired). The run fails with exit 1 and says why; `sluice monkey` files it as a stall
// (a failure the scenario never repairs), not as a crash of the simulator.
#pragma once
#include <stdexcept>

namespace sluice {

class WorkloadStalled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace sluice
