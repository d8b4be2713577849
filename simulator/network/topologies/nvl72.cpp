// `nvl72`: GB200 NVL72 racks. Each rack is one NVLink domain: 72 Blackwell GPUs on the NVSwitch
// trays (18 NVSwitch chips in 9 trays, modelled as one crossbar: every GPU one hop from every
// other), two GPUs per Grace CPU over NVLink-C2C (the host link: Grace's memory is the host
// tier), and one scale-out NIC per GPU into a rail-optimized (or fat-tree) Clos joining the
// racks (one rack alone has no scale-out). Traffic inside a rack never leaves its NVLink
// domain; traffic between racks crosses the NICs and the Clos.
#include <cmath>

#include <fmt/format.h>

#include "network/topologies/keys.h"

namespace sluice::net {

namespace {

struct Nvl72Spec {
  int racks = 1;
  int gpus = 72;
  int gpus_per_grace = 2;
  double nvlink_Bps = 900e9, c2c_Bps = 225e9;
  int64_t nvlink_latency_ns = 250, c2c_latency_ns = 300;
  bool nvls = true;
  double gpu_usd = 0, nvswitch_usd = 0, grace_usd = 0, rack_other_usd = 0;
  int nvswitch_chips = 18;
  ScaleOut scale_out;
};

Binding<Nvl72Spec> nvl72_keys(Schema& s) {
  add_common_topology_keys(s);
  Binding<Nvl72Spec> b(s);
  using N = Nvl72Spec;
  b.integer("racks", &N::racks, "NVL72 racks, joined by the scale-out fabric").def("1").range(1, 2048);
  b.integer("gpus_per_rack", &N::gpus, "GPUs in a rack's NVLink domain (72: NVL72; 36: NVL36)").def("72").range(2, 72);
  b.integer("gpus_per_grace", &N::gpus_per_grace, "GPUs sharing a Grace CPU (GB200: 2)").def("2").range(1, 4);
  b.quantity("nvlink_bandwidth", UnitKind::Bandwidth, &N::nvlink_Bps,
             "NVLink 5 per GPU per direction (NVIDIA's 1.8 TB/s counts both directions)")
      .def("900GB/s")
      .positive();
  b.time_ns("nvlink_latency", &N::nvlink_latency_ns, "GPU to NVSwitch tray hop").def("250ns").range(0, 1e9);
  b.flag("nvls", &N::nvls, "the NVSwitch trays reduce and multicast in the network (NVLink SHARP)").def("true");
  b.quantity("c2c_bandwidth", UnitKind::Bandwidth, &N::c2c_Bps,
             "NVLink-C2C to the Grace CPU per GPU per direction (a superchip's 900 GB/s both ways, over its two GPUs)")
      .def("225GB/s")
      .positive();
  b.time_ns("c2c_latency", &N::c2c_latency_ns, "GPU to Grace hop").def("300ns").range(0, 1e9);
  b.quantity("gpu_price", UnitKind::Money, &N::gpu_usd, "capex per GPU").def("0").nonneg();
  b.quantity("grace_price", UnitKind::Money, &N::grace_usd, "capex per Grace CPU").def("0").nonneg();
  b.quantity("nvswitch_price", UnitKind::Money, &N::nvswitch_usd, "capex per NVSwitch chip").def("0").nonneg();
  b.integer("nvswitch_chips", &N::nvswitch_chips, "NVSwitch chips per rack (capex only; modelled as one crossbar)").def("18").range(0, 256);
  b.quantity("rack_other_price", UnitKind::Money, &N::rack_other_usd, "capex per rack for trays, power, cooling").def("0").nonneg();
  b.nest(&N::scale_out, scale_out_keys(s, "144",
                                       "ports per scale-out switch (Quantum-X800: 144; a two-tier rail-optimized Clos of 72 rails needs at "
                                       "least 72)"));
  return b;
}

}  // namespace

SLUICE_REGISTER(component, topology_nvl72) {
  Schema s;
  const Binding<Nvl72Spec> keys = nvl72_keys(s);
  reg.add("topology", "nvl72",
          "GB200 NVL72 racks: 72 GPUs in one NVLink domain of NVSwitch trays, two per Grace CPU over NVLink-C2C, racks "
          "joined by a scale-out Clos (a NIC per GPU)",
          s, TopologyFactory([keys](const Params& p, const std::string& name) {
            const Nvl72Spec n = keys.make(p);
            if (n.gpus % n.gpus_per_grace != 0)
              p.fail("gpus_per_grace", fmt::format("{} GPUs a rack do not share Grace CPUs evenly", n.gpus), "a divisor of gpus_per_rack");
            ServerSpec rack;
            rack.gpus = n.gpus;
            rack.nvlink_Bps = n.nvlink_Bps;
            rack.nvlink_latency_ns = n.nvlink_latency_ns;
            rack.nvls = n.nvls;
            rack.host_cpus = n.gpus / n.gpus_per_grace;
            rack.pcie_Bps = n.c2c_Bps;
            rack.pcie_latency_ns = n.c2c_latency_ns;
            rack.gpu_usd = n.gpu_usd;
            rack.host_usd = n.grace_usd;
            rack.nvswitch_usd = n.nvswitch_usd;
            rack.nvswitch_chips = n.nvswitch_chips;
            rack.server_other_usd = n.rack_other_usd;
            check_fabric_memory(p, "racks", static_cast<double>(n.racks) * n.gpus,
                                n.racks * std::ceil(static_cast<double>(n.gpus) / (n.scale_out.switch_radix / 2.0)));
            return build_scaled_out(rack, n.racks, n.scale_out, name, "nvl72");
          }));
}

}  // namespace sluice::net
