// `xgmi-mesh`: AMD Instinct platforms (MI300X OAM, 8 GPUs): no switch inside a server; each GPU
// has one Infinity Fabric (xGMI) link to each peer, so a ring uses one link a hop and an
// all-to-all all seven at once. Servers join by a NIC per GPU into a fat-tree or a
// rail-optimized Clos (one server alone has no scale-out).

#include "network/topologies/keys.h"

namespace sluice::net {

namespace {

struct XgmiSpec {
  int servers = 1, gpus = 8, host_cpus = 2;
  double link_Bps = 64e9, pcie_Bps = 64e9;
  int64_t link_latency_ns = 700, pcie_latency_ns = 600;
  double gpu_usd = 0, host_usd = 0, server_other_usd = 0;
  ScaleOut scale_out;
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
  b.quantity("gpu_price", UnitKind::Money, &X::gpu_usd, "capex per GPU").def("0").nonneg();
  b.quantity("host_price", UnitKind::Money, &X::host_usd, "capex per host CPU").def("0").nonneg();
  b.quantity("server_other_price", UnitKind::Money, &X::server_other_usd, "capex per server for chassis, memory, storage, power").def("0").nonneg();
  b.nest(&X::scale_out, scale_out_keys(s, "64", "ports per scale-out switch"));
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
            ServerSpec server;
            server.gpus = x.gpus;
            server.mesh = true;
            server.nvlink_Bps = x.link_Bps;
            server.nvlink_latency_ns = x.link_latency_ns;
            server.host_cpus = x.host_cpus;
            server.pcie_Bps = x.pcie_Bps;
            server.pcie_latency_ns = x.pcie_latency_ns;
            server.nvswitch_chips = 0;
            server.gpu_usd = x.gpu_usd;
            server.host_usd = x.host_usd;
            server.server_other_usd = x.server_other_usd;
            check_server(p, server);
            check_fabric_memory(p, "servers", static_cast<double>(x.servers) * server.gpus,
                                x.servers * std::ceil(static_cast<double>(server.gpus) / (x.scale_out.switch_radix / 2.0)));
            return build_scaled_out(server, x.servers, x.scale_out, name, "xgmi-mesh");
          }));
}

}  // namespace sluice::net
