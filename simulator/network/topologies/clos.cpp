// `fat-tree` and `rail-optimized`: two- or three-tier Clos fabrics of NVSwitch servers, with
// oversubscription; a rail puts local rank r of every server on rail leaf r.
#include <cmath>

#include <fmt/format.h>

#include "network/topologies/keys.h"

namespace sluice::net {

namespace {

Binding<ClosSpec> clos_keys(Schema& s, bool rail) {
  add_common_topology_keys(s);
  Binding<ClosSpec> b(s);
  using C = ClosSpec;
  b.integer("servers", &C::servers, "number of 8-GPU servers").def("32").range(1, 16384);  // 100000 hung topo for hours
  b.nest(&C::server, server_keys(s, "0"));
  b.integer("tiers", &C::tiers, "switch tiers (2: leaf-spine, 3: leaf-aggregation-core)").def("2").range(2, 3);
  b.integer("switch_radix", &C::switch_radix, "ports per switch").def("64").range(4, 1024);
  b.real("oversubscription", &C::oversubscription, "leaf down-ports per up-port (1: non-blocking)").def("1").range(1, 16);
  b.quantity("nic_bandwidth", UnitKind::Bandwidth, &C::nic_Bps, "NIC and switch-port bandwidth per direction").def("400Gb/s").positive();
  b.time_ns("link_latency", &C::link_latency_ns, "per NIC or switch hop").def("500ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  b.quantity("switch_price", UnitKind::Money, &C::switch_usd, "capex per switch").def("0").nonneg();
  b.quantity("nic_price", UnitKind::Money, &C::nic_usd, "capex per NIC").def("0").nonneg();
  b.quantity("cable_price", UnitKind::Money, &C::cable_usd, "capex per fabric link (cable + two transceivers)").def("0").nonneg();
  if (rail)
    b.integer("planes", &C::planes,
              "independent fabric planes: rail r joins plane r mod planes, each plane its own switch tiers with no link to "
              "another (DeepSeek's multi-plane fat-tree: 8 planes of a two-tier Clos); traffic between planes crosses inside "
              "a server over NVLink. Must divide gpus_per_server")
        .def("1")
        .range(1, 72);
  if (!rail)  // a rail needs a NIC per local rank
    b.choice<bool>("nics", {{"per-gpu", false}, {"per-server", true}}, &C::nic_per_server,
                   "per-gpu: each GPU its own NIC to a leaf; per-server: one NIC per server, from its NVSwitch, shared by its "
                   "GPUs (cloud instances such as AWS p3.16xlarge)")
        .def("per-gpu");
  return b;
}

void register_clos(Registry& reg, bool rail) {
  Schema s;
  const Binding<ClosSpec> keys = clos_keys(s, rail);
  reg.add("topology", rail ? "rail-optimized" : "fat-tree",
          rail ? "rail-optimized Clos: local rank r of every server on rail leaf r, leaves to spines (2 or 3 tiers)"
               : "fat-tree (Clos) of NVSwitch servers, whole servers per leaf, 2 or 3 tiers with oversubscription",
          s, TopologyFactory([keys, rail](const Params& p, const std::string& name) {
            ClosSpec c = keys.make(p);
            c.rail_optimized = rail;
            check_server(p, c.server);
            {  // leaves: the switches the NICs attach to (rails split into groups of `down` servers)
              const int down = static_cast<int>(std::floor(c.switch_radix * c.oversubscription / (c.oversubscription + 1.0)));
              const double nics = static_cast<double>(c.servers) * (c.nic_per_server ? 1 : c.server.gpus);
              const double leaves = rail ? std::ceil(static_cast<double>(c.servers) / std::max(1, down)) * c.server.gpus
                                         : std::ceil(nics / std::max(1, down));
              check_fabric_memory(p, "servers", static_cast<double>(c.servers) * c.server.gpus, leaves);
              // Three tiers join at most `radix` pods of radix/2 leaves (a plane's leaves each).
              const double pods = std::ceil(leaves / std::max(1, c.planes) / std::max(1, c.switch_radix / 2));
              if (c.tiers == 3 && pods > c.switch_radix)
                p.fail("servers", fmt::format("{} servers make {:.0f} pods of leaves, but a 3-tier Clos of radix {} joins at most {}", c.servers, pods,
                                              c.switch_radix, c.switch_radix),
                       "fewer servers, a larger switch_radix, oversubscription, or (rail-optimized) more planes");
            }
            if (c.server.gpus % c.planes != 0)
              p.fail("planes", fmt::format("{} planes do not divide the {} GPUs of a server", c.planes, c.server.gpus),
                     "a divisor of gpus_per_server (each plane takes the same number of rails)");
            return build_clos(c, name);
          }));
}

}  // namespace

SLUICE_REGISTER(component, topology_clos) {
  register_clos(reg, false);
  register_clos(reg, true);
}

}  // namespace sluice::net
