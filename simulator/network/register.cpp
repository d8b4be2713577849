// Network components: topology generators, collectives, placement policies, studies, bench.
#include "network/collective.h"
#include "network/generators.h"
#include "registry/registry.h"

namespace sluice {

namespace net {
void register_network_studies(Registry& reg);
void register_network_bench(Registry& reg);
void register_availability_study(Registry& reg);
}  // namespace net

void register_network_components(Registry& reg) {
  net::register_topology_generators(reg);
  net::register_network_studies(reg);
  net::register_network_bench(reg);
  net::register_availability_study(reg);
  const std::pair<const char*, const char*> collectives[] = {
      {"allreduce-ring", "ring all-reduce: 2(n-1) steps of S/n to the next device (reduce-scatter then all-gather)"},
      {"allreduce-tree", "binary-tree all-reduce: reduce to the root then broadcast, pipelined in chunks"},
      {"allreduce-hierarchical", "reduce-scatter inside each server, ring all-reduce across servers per local rank, all-gather inside"},
      {"allgather", "ring all-gather: n-1 steps of S/n"},
      {"reducescatter", "ring reduce-scatter: n-1 steps of S/n"},
      {"alltoall", "every device sends S/n to every other at once (optionally split over several ECMP paths)"},
      {"sendrecv", "one flow of S bytes from the first device to the second"},
  };
  for (const auto& [n, doc] : collectives) reg.add("collective", n, doc, Schema{});
}

}  // namespace sluice
