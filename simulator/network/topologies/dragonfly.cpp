// `dragonfly`: NVSwitch servers on a dragonfly of switches (Kim, Dally, Scott and Abts, ISCA
// 2008; HPE Slingshot's groups). Each GPU's NIC goes to a router; routers form groups, every
// router of a group linked to every other (local links); each router also has global links, and
// every pair of groups is joined by at least one global link. A minimal route crosses at most
// one global link: NIC, local, global, local, NIC. Routes are shortest paths (minimal routing,
// with ECMP among the equal ones); Slingshot's adaptive non-minimal (UGAL / Valiant) routing is
// not modelled.
#include <algorithm>

#include <fmt/format.h>

#include "network/topologies/keys.h"

namespace sluice::net {

namespace {

struct DragonflySpec {
  int servers = 32;
  ServerSpec server;
  int nics_per_router = 16;    // p: terminals per router
  int routers_per_group = 8;   // a
  int global_per_router = 0;   // h; 0: every port left after the NICs and local links
  int switch_radix = 64;
  double nic_Bps = 50e9, global_Bps = 50e9;
  int64_t link_latency_ns = 500, global_latency_ns = 1000;
  double switch_usd = 0, nic_usd = 0, cable_usd = 0, optical_usd = 0;
};

// Global links per router: as given, else every port the NICs and local links leave.
int global_ports(const DragonflySpec& d) {
  return d.global_per_router > 0 ? d.global_per_router : d.switch_radix - d.nics_per_router - (d.routers_per_group - 1);
}

// Builds the dragonfly; throws TopologyError when its ports do not add up (the keys' checks
// say so first, located).
Topology build_dragonfly(const DragonflySpec& d, const std::string& name) {
  Topology t(name);
  t.family = "dragonfly";
  const int p = d.nics_per_router, a = d.routers_per_group;
  const int local = a - 1;
  const int h = global_ports(d);
  if (p + local + h > d.switch_radix || h < 1)
    throw TopologyError(fmt::format("a dragonfly router needs {} NIC + {} local + {} global ports but its radix is {}", p, local,
                                    std::max(h, 1), d.switch_radix));
  std::vector<std::vector<int>> servers;
  for (int s = 0; s < d.servers; ++s) servers.push_back(add_server(t, s, d.server));
  const int gpn = d.server.gpus;
  const long total = static_cast<long>(d.servers) * gpn;
  const int routers = static_cast<int>((total + p - 1) / p);
  const int groups = (routers + a - 1) / a;
  if (groups > 1 && static_cast<long>(a) * h < groups - 1)
    throw TopologyError(fmt::format("{} groups need {} global links a group to reach every other, but {} routers x {} global ports give {}",
                                    groups, groups - 1, a, h, a * h));
  std::vector<int> router_ids;  // group-major: router k of group g is g * a + k
  for (int g = 0; g < groups; ++g)
    for (int k = 0; k < a; ++k)
      router_ids.push_back(t.add_node(NodeInfo{fmt::format("g{}.r{}", g, k), NodeKind::Switch, d.switch_radix, d.switch_usd, {-1, -1, -1}, -1}));
  for (long i = 0; i < total; ++i)
    t.add_link(servers[static_cast<size_t>(i / gpn)][static_cast<size_t>(i % gpn)], router_ids[static_cast<size_t>(i / p)], d.nic_Bps,
               d.link_latency_ns, "nic", d.cable_usd);
  if (d.nic_usd > 0) t.extra_capex.push_back(CapexItem{"NICs (one per GPU)", total, d.nic_usd});
  for (int g = 0; g < groups; ++g)
    for (int x = 0; x < a; ++x)
      for (int y = x + 1; y < a; ++y)
        t.add_link(router_ids[static_cast<size_t>(g * a + x)], router_ids[static_cast<size_t>(g * a + y)], d.nic_Bps, d.link_latency_ns,
                   "local", d.cable_usd);
  if (groups == 1) return t;
  // Global links: every pair of groups gets the same number m of them, as many as the ports
  // allow; a group's global ports are dealt over its routers in turn (port q on router q mod a),
  // so each router carries at most h and the links to one group spread over routers.
  const int m = static_cast<int>(static_cast<long>(a) * h / (groups - 1));
  std::vector<int> next(static_cast<size_t>(groups), 0);
  for (int gi = 0; gi < groups; ++gi)
    for (int gj = gi + 1; gj < groups; ++gj)
      for (int k = 0; k < m; ++k) {
        const int ri = gi * a + next[static_cast<size_t>(gi)]++ % a;
        const int rj = gj * a + next[static_cast<size_t>(gj)]++ % a;
        const int e = t.add_link(router_ids[static_cast<size_t>(ri)], router_ids[static_cast<size_t>(rj)], d.global_Bps,
                                 d.global_latency_ns, "global", d.optical_usd, true);
        // Minimal routing crosses one global link: the penalty is more than a hop's weight
        // (1024 + at most 512), so local, global, local beats global, global through a third
        // group (two router hops, but two global ones).
        t.mutable_link(e).route_penalty = t.mutable_link(t.link(e).reverse).route_penalty = 2048;
      }
  return t;
}

Binding<DragonflySpec> dragonfly_keys(Schema& s) {
  add_common_topology_keys(s);
  Binding<DragonflySpec> b(s);
  using D = DragonflySpec;
  b.integer("servers", &D::servers, "number of NVSwitch servers").def("32").range(1, 16384);
  b.nest(&D::server, server_keys(s, "0"));
  b.integer("nics_per_router", &D::nics_per_router, "GPU NICs per router (p; consecutive GPUs, whole servers when it is a multiple)")
      .def("16")
      .range(1, 512);
  b.integer("routers_per_group", &D::routers_per_group, "routers in a group, all joined to each other by local links (a)").def("8").range(1, 256);
  b.integer("global_links_per_router", &D::global_per_router,
            "global links per router (h; 0: every port the NICs and local links leave; balanced dragonflies have a = 2p = 2h)")
      .def("0")
      .range(0, 512);
  b.integer("switch_radix", &D::switch_radix, "ports per router (Slingshot's Rosetta: 64)").def("64").range(4, 1024);
  b.quantity("nic_bandwidth", UnitKind::Bandwidth, &D::nic_Bps, "NIC and local-link bandwidth per direction").def("400Gb/s").positive();
  b.quantity("global_bandwidth", UnitKind::Bandwidth, &D::global_Bps, "global-link bandwidth per direction").def("400Gb/s").positive();
  b.time_ns("link_latency", &D::link_latency_ns, "per NIC or local hop").def("500ns").range(0, 1e9);
  b.time_ns("global_latency", &D::global_latency_ns, "per global hop (longer optical runs between cabinets)").def("1us").range(0, 1e9);
  b.quantity("switch_price", UnitKind::Money, &D::switch_usd, "capex per router").def("0").nonneg();
  b.quantity("nic_price", UnitKind::Money, &D::nic_usd, "capex per NIC").def("0").nonneg();
  b.quantity("cable_price", UnitKind::Money, &D::cable_usd, "capex per NIC or local link (electrical)").def("0").nonneg();
  b.quantity("optical_link_price", UnitKind::Money, &D::optical_usd, "capex per global link (optics and fiber)").def("0").nonneg();
  return b;
}

}  // namespace

SLUICE_REGISTER(component, topology_dragonfly) {
  Schema s;
  const Binding<DragonflySpec> keys = dragonfly_keys(s);
  reg.add("topology", "dragonfly",
          "dragonfly (Slingshot style) of NVSwitch servers: groups of routers joined all-to-all by local links, every pair of "
          "groups by global links; minimal routing",
          s, TopologyFactory([keys](const Params& p, const std::string& name) {
            const DragonflySpec d = keys.make(p);
            check_server(p, d.server);
            const int local = d.routers_per_group - 1;
            const int h = global_ports(d);
            if (d.nics_per_router + local + std::max(h, 1) > d.switch_radix)
              p.fail("switch_radix",
                     fmt::format("a router needs {} NIC + {} local + {} global ports", d.nics_per_router, local, std::max(h, 1)),
                     fmt::format("at least {}, or fewer nics_per_router / routers_per_group", d.nics_per_router + local + std::max(h, 1)));
            const long nics = static_cast<long>(d.servers) * d.server.gpus;
            const long routers = (nics + d.nics_per_router - 1) / d.nics_per_router;
            const long groups = (routers + d.routers_per_group - 1) / d.routers_per_group;
            if (groups > 1 && static_cast<long>(d.routers_per_group) * h < groups - 1)
              p.fail("servers",
                     fmt::format("{} servers need {} groups, more than {} routers x {} global links can join all-to-all", d.servers, groups,
                                 d.routers_per_group, h),
                     fmt::format("at most {} servers here (or more routers_per_group, global_links_per_router or switch_radix)",
                                 (static_cast<long>(d.routers_per_group) * h + 1) * d.routers_per_group * d.nics_per_router / d.server.gpus));
            check_fabric_memory(p, "servers", static_cast<double>(nics), static_cast<double>(routers));
            return build_dragonfly(d, name);
          }));
}

}  // namespace sluice::net
