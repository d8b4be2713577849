// `xgmi-mesh`: AMD Instinct platforms (MI300X OAM, 8 GPUs): no switch inside a server; each GPU
// has one Infinity Fabric (xGMI) link to each peer, so a ring uses one link a hop and an
// all-to-all all seven at once. Servers join by a NIC per GPU into a fat-tree or a
// rail-optimized Clos (one server alone has no scale-out).
#include <fmt/format.h>

#include "network/topologies/keys.h"

namespace sluice::net {

namespace {

struct XgmiSpec {
  int servers = 1, gpus = 8, host_cpus = 2;
  double link_Bps = 64e9, pcie_Bps = 64e9, nic_Bps = 50e9;
  int64_t link_latency_ns = 700, pcie_latency_ns = 600, nic_latency_ns = 500;
  bool rail_optimized = true;
  int switch_radix = 64, tiers = 2;
  double gpu_usd = 0, host_usd = 0, server_other_usd = 0, switch_usd = 0, nic_usd = 0, cable_usd = 0;
};

Binding<XgmiSpec> xgmi_keys(Schema& s) {
  add_common_topology_keys(s);
  Binding<XgmiSpec> b(s);
  using X = XgmiSpec;
  b.integer("servers", &X::servers, "servers, joined by the scale-out fabric").def("1").range(1, 8192);
  b.integer("gpus_per_server", &X::gpus, "GPUs a server, each linked to every other (MI300X OAM: 8)").def("8").range(2, 16);
  b.quantity("xgmi_bandwidth", UnitKind::Bandwidth, &X::link_Bps,
             "one xGMI link per direction (MI300X: 64 GB/s; AMD's 128 GB/s counts both directions)")
      .def("64GB/s")
      .positive();
  b.time_ns("xgmi_latency", &X::link_latency_ns, "GPU to GPU over one link").def("700ns").range(0, 1e9);
  b.integer("host_cpus", &X::host_cpus, "host CPUs a server, each with PCIe to an equal share of the GPUs").def("2").range(0, 8);
  b.quantity("pcie_bandwidth", UnitKind::Bandwidth, &X::pcie_Bps, "PCIe per GPU per direction (Gen5 x16: 64GB/s)").def("64GB/s").positive();
  b.time_ns("pcie_latency", &X::pcie_latency_ns, "GPU to host hop").def("600ns").range(0, 1e9);
  b.choice<bool>("scale_out", {{"rail-optimized", true}, {"fat-tree", false}}, &X::rail_optimized,
                 "the Clos joining the servers: rail-optimized or fat-tree")
      .def("rail-optimized");
  b.quantity("nic_bandwidth", UnitKind::Bandwidth, &X::nic_Bps, "scale-out NIC per GPU per direction").def("400Gb/s").positive();
  b.integer("switch_radix", &X::switch_radix, "ports per scale-out switch").def("64").range(4, 1024);
  b.integer("tiers", &X::tiers, "scale-out switch tiers (2 or 3)").def("2").range(2, 3);
  b.time_ns("link_latency", &X::nic_latency_ns, "per NIC or scale-out switch hop").def("500ns").range(0, 1e9);
  b.quantity("gpu_price", UnitKind::Money, &X::gpu_usd, "capex per GPU").def("0").nonneg();
  b.quantity("host_price", UnitKind::Money, &X::host_usd, "capex per host CPU").def("0").nonneg();
  b.quantity("server_other_price", UnitKind::Money, &X::server_other_usd, "capex per server for chassis, memory, storage, power").def("0").nonneg();
  b.quantity("switch_price", UnitKind::Money, &X::switch_usd, "capex per scale-out switch").def("0").nonneg();
  b.quantity("nic_price", UnitKind::Money, &X::nic_usd, "capex per NIC").def("0").nonneg();
  b.quantity("cable_price", UnitKind::Money, &X::cable_usd, "capex per scale-out link").def("0").nonneg();
  return b;
}

}  // namespace

SLUICE_REGISTER(component, topology_xgmi) {
  Schema s;
  const Binding<XgmiSpec> keys = xgmi_keys(s);
  reg.add("topology", "xgmi-mesh",
          "AMD Instinct servers (MI300X): 8 GPUs in a full mesh of Infinity Fabric links, one to each peer, no switch; servers "
          "joined by a NIC per GPU into a Clos",
          s, TopologyFactory([keys](const Params& p, const std::string& name) {
            const XgmiSpec x = keys.make(p);
            if (x.host_cpus > x.gpus) p.fail("host_cpus", "more host CPUs than GPUs", fmt::format("0..{}", x.gpus));
            ClosSpec c;
            c.servers = x.servers;
            c.server.gpus = x.gpus;
            c.server.mesh = true;
            c.server.nvlink_Bps = x.link_Bps;
            c.server.nvlink_latency_ns = x.link_latency_ns;
            c.server.host_cpus = x.host_cpus;
            c.server.pcie_Bps = x.pcie_Bps;
            c.server.pcie_latency_ns = x.pcie_latency_ns;
            c.server.nvswitch_chips = 0;
            c.server.gpu_usd = x.gpu_usd;
            c.server.host_usd = x.host_usd;
            c.server.server_other_usd = x.server_other_usd;
            c.rail_optimized = x.rail_optimized;
            c.nic_Bps = x.nic_Bps;
            c.switch_radix = x.switch_radix;
            c.tiers = x.tiers;
            c.link_latency_ns = x.nic_latency_ns;
            c.switch_usd = x.switch_usd;
            c.nic_usd = x.nic_usd;
            c.cable_usd = x.cable_usd;
            if (x.servers == 1) {
              Topology t(name);
              t.family = "xgmi-mesh";
              add_server(t, 0, c.server);
              return t;
            }
            Topology t = build_clos(c, name);
            t.family = "xgmi-mesh";
            return t;
          }));
}

}  // namespace sluice::net
