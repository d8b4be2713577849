// `tpu-v4-pod`: 4×4×4-chip cubes with electrical ICI inside and cube faces through 48 optical
// circuit switches (or static cables).
#include "network/topologies/keys.h"

namespace sluice::net {

SLUICE_REGISTER(component, topology_tpu_pod) {
  Schema s;
  add_common_topology_keys(s);
  Binding<PodSpec> b(s);
  using P = PodSpec;
  b.flag("ocs", &P::ocs, "cube faces wired through optical circuit switches (false: static cables, one fixed torus)").def("true");
  s.add("cubes", ParamType::List, "cubes along x, y, z (default [4, 4, 4])").optional();  // a checked list, read by the factory
  b.integer("cube_edge", &P::cube_edge, "chips along each edge of a cube").def("4").range(1, 16);
  b.integer("ocs_radix", &P::ocs_radix, "ports per OCS (Palomar: 136, 128 used)").def("136").range(2, 4096);
  b.quantity("link_bandwidth", UnitKind::Bandwidth, &P::link_Bps, "ICI link per direction").def("50GB/s").positive();
  b.time_ns("link_latency", &P::link_latency_ns, "per ICI hop").def("500ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  b.integer("chips_per_host", &P::chips_per_host, "chips per host").def("4").range(1, 64);
  b.quantity("chip_price", UnitKind::Money, &P::chip_usd, "capex per chip").def("0").nonneg();
  b.quantity("host_price", UnitKind::Money, &P::host_usd, "capex per host").def("0").nonneg();
  b.quantity("ocs_price", UnitKind::Money, &P::ocs_usd, "capex per OCS").def("0").nonneg();
  b.quantity("optics_price", UnitKind::Money, &P::optical_link_usd, "capex per optical fiber end (transceiver, circulator, fiber share)")
      .def("0")
      .nonneg();
  b.quantity("electrical_link_price", UnitKind::Money, &P::electrical_link_usd, "capex per in-cube electrical link").def("0").nonneg();
  b.quantity("cable_price", UnitKind::Money, &P::cable_usd, "capex per inter-cube cable when ocs is false").def("0").nonneg();
  reg.add("topology", "tpu-v4-pod", "TPU v4 pod: 4×4×4-chip cubes, electrical ICI inside, cube faces through 48 OCS (or static cables)", s,
          TopologyFactory([b](const Params& p, const std::string& name) {
            PodSpec spec = b.make(p);
            const auto cubes = int_list(p, "cubes", 1, 16, 3, 3, "[4, 4, 4]");
            spec.cubes = {cubes[0], cubes[1], cubes[2]};
            return build_tpu_pod(spec, name);
          }));
}

}  // namespace sluice::net
