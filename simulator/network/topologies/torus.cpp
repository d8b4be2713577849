// `torus-2d` and `torus-3d`: tori (or meshes) of devices, TPU style, optionally twisted.
#include <fmt/format.h>

#include "network/topologies/keys.h"

namespace sluice::net {

namespace {

Binding<TorusSpec> torus_keys(Schema& s, int ndims) {
  add_common_topology_keys(s);
  Binding<TorusSpec> b(s);
  using T = TorusSpec;
  s.add("dims", ParamType::List, fmt::format("extent of each of the {} dimensions (default {})", ndims, ndims == 3 ? "[4, 4, 4]" : "[8, 8]"))
      .optional();  // a checked list, read by the factory
  b.flag("wrap", &T::wrap, "wrap-around links (false: a mesh)").def("true");
  b.flag("twisted", &T::twisted, "twist the short dimensions' wrap-around links (shapes k×k×2k, k×2k×2k, k×2k)").def("false");
  b.quantity("link_bandwidth", UnitKind::Bandwidth, &T::link_Bps, "per link per direction").def("50GB/s").positive();
  b.time_ns("link_latency", &T::link_latency_ns, "per hop").def("500ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  b.integer("chips_per_host", &T::devices_per_host, "chips per host (capex of hosts; 0: none)").def("4").range(0, 64);
  b.quantity("chip_price", UnitKind::Money, &T::device_usd, "capex per chip").def("0").nonneg();
  b.quantity("host_price", UnitKind::Money, &T::host_usd, "capex per host").def("0").nonneg();
  b.quantity("link_price", UnitKind::Money, &T::link_usd, "capex per link (cable)").def("0").nonneg();
  return b;
}

void register_torus(Registry& reg, int nd) {
  Schema s;
  const Binding<TorusSpec> keys = torus_keys(s, nd);
  reg.add("topology", nd == 3 ? "torus-3d" : "torus-2d", fmt::format("{}D torus (TPU style) with wrap-around, optionally twisted", nd), s,
          TopologyFactory([keys, nd](const Params& p, const std::string& name) {
            TorusSpec t = keys.make(p);
            t.dims = int_list(p, "dims", 1, 256, static_cast<size_t>(nd), static_cast<size_t>(nd), nd == 3 ? "[4, 4, 4]" : "[8, 8]");
            // Each extent may be up to 256, but not all at once: bound the chip count before building.
            long long chips = 1;
            for (int d : t.dims) chips *= d;
            if (chips > 65536)
              p.fail("dims", fmt::format("a torus of {} chips; at most 65536 are built (a TPU v4 pod has 4096)", chips),
                     "extents whose product is at most 65536, e.g. [16, 16, 16]");
            if (t.twisted && !twist_allowed(t.dims))
              p.fail("twisted", "this shape cannot be twisted", "twisted: true only for shapes k×k×2k, k×2k×2k (3D) or k×2k (2D)");
            return build_torus(t, name);
          }));
}

}  // namespace

SLUICE_REGISTER(component, topology_torus) {
  register_torus(reg, 2);
  register_torus(reg, 3);
}

}  // namespace sluice::net
