#include "network/topologies/keys.h"

#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "config/units.h"

namespace sluice::net {

void add_common_topology_keys(Schema& s) {
  s.add("name", ParamType::String, "display name (default: the catalog file name)").optional();
  s.add("description", ParamType::String, "what this topology is").def("");
  s.add("source", ParamType::String, "where its figures and prices come from").def("");
}

Binding<ServerSpec> server_keys(Schema& s, const std::string& host_cpus_default) {
  Binding<ServerSpec> b(s);
  using S = ServerSpec;
  b.integer("gpus_per_server", &S::gpus, "GPUs per NVSwitch server").def("8").range(1, 72);
  b.quantity("nvlink_bandwidth", UnitKind::Bandwidth, &S::nvlink_Bps,
             "NVLink bandwidth per GPU per direction (H100/H200: 450GB/s; NVIDIA's 900 GB/s counts both directions)")
      .def("450GB/s")
      .positive();
  b.time_ns("nvlink_latency", &S::nvlink_latency_ns, "GPU to NVSwitch hop latency").def("250ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  b.integer("host_cpus", &S::host_cpus, "host CPUs per server, each with PCIe to an equal share of the GPUs (0: no host nodes)")
      .def(host_cpus_default)
      .range(0, 8);
  b.quantity("pcie_bandwidth", UnitKind::Bandwidth, &S::pcie_Bps, "PCIe bandwidth per GPU per direction (Gen5 x16: 64GB/s)")
      .def("64GB/s")
      .positive();
  b.time_ns("pcie_latency", &S::pcie_latency_ns, "GPU to host hop latency").def("600ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  b.quantity("gpu_price", UnitKind::Money, &S::gpu_usd, "capex per GPU").def("0").nonneg();
  b.quantity("nvswitch_price", UnitKind::Money, &S::nvswitch_usd, "capex per NVSwitch chip").def("0").nonneg();
  b.integer("nvswitch_chips", &S::nvswitch_chips, "NVSwitch chips per server (capex only; modelled as one crossbar)").def("4").range(0, 64);
  b.flag("nvls", &S::nvls,
         "the NVSwitch reduces and multicasts in the network (NVLink SHARP, third-generation NVSwitch: HGX H100/H200; "
         "not A100): allreduce-nvls and allreduce-auto can use it")
      .def("false");
  b.quantity("host_price", UnitKind::Money, &S::host_usd, "capex per host CPU").def("0").nonneg();
  b.quantity("server_other_price", UnitKind::Money, &S::server_other_usd, "capex per server for chassis, memory, storage, power")
      .def("0")
      .nonneg();
  return b;
}

Binding<ScaleOut> scale_out_keys(Schema& s, const std::string& radix_default, const std::string& radix_doc) {
  Binding<ScaleOut> b(s);
  using O = ScaleOut;
  b.choice<bool>("scale_out", {{"rail-optimized", true}, {"fat-tree", false}}, &O::rail_optimized,
                 "the Clos joining them: rail-optimized (GPU r of every one on rail leaf r) or fat-tree (each one's NICs on "
                 "consecutive leaves)")
      .def("rail-optimized");
  b.quantity("nic_bandwidth", UnitKind::Bandwidth, &O::nic_Bps, "scale-out NIC per GPU per direction (ConnectX-7: 400 Gb/s)")
      .def("400Gb/s")
      .positive();
  b.integer("switch_radix", &O::switch_radix, radix_doc).def(radix_default).range(4, 1024);
  b.integer("tiers", &O::tiers, "scale-out switch tiers (2 or 3)").def("2").range(2, 3);
  b.time_ns("link_latency", &O::link_latency_ns, "per NIC or scale-out switch hop").def("500ns").range(0, 1e9);
  b.quantity("switch_price", UnitKind::Money, &O::switch_usd, "capex per scale-out switch").def("0").nonneg();
  b.quantity("nic_price", UnitKind::Money, &O::nic_usd, "capex per NIC").def("0").nonneg();
  b.quantity("cable_price", UnitKind::Money, &O::cable_usd, "capex per scale-out link").def("0").nonneg();
  return b;
}

Topology build_scaled_out(const ServerSpec& server, int servers, const ScaleOut& so, const std::string& name, const std::string& family) {
  if (servers == 1) {  // nothing to join
    Topology t(name);
    t.family = family;
    add_server(t, 0, server);
    return t;
  }
  ClosSpec c;
  c.servers = servers;
  c.server = server;
  c.rail_optimized = so.rail_optimized;
  c.nic_Bps = so.nic_Bps;
  c.switch_radix = so.switch_radix;
  c.tiers = so.tiers;
  c.link_latency_ns = so.link_latency_ns;
  c.switch_usd = so.switch_usd;
  c.nic_usd = so.nic_usd;
  c.cable_usd = so.cable_usd;
  Topology t = build_clos(c, name);
  t.family = family;
  return t;
}

double machine_memory_bytes() {
  if (const char* s = std::getenv("SLUICE_MEMORY_LIMIT"); s && *s)
    if (const auto v = parse_quantity(s, UnitKind::Bytes)) return *v;
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

void check_fabric_memory(const Params& p, const std::string& key, double devices, double attach_switches) {
  const double nodes = 1.25 * devices;
  const double vectors = attach_switches * nodes * 4;
  const double need = 3e3 * devices + vectors;
  const double have = machine_memory_bytes();
  if (need > have)
    p.fail(key,
           fmt::format("a fabric of {:.0f} devices would need about {} to build and route ({:.0f} distance vectors of {:.0f} nodes: {}), "
                       "more than this machine's {}",
                       devices, format_bytes(need), attach_switches, nodes, format_bytes(vectors), format_bytes(have)),
           "a smaller cluster, or a machine with more memory");
}

void check_server(const Params& p, const ServerSpec& s) {
  if (s.host_cpus > s.gpus) p.fail("host_cpus", "more host CPUs than GPUs", fmt::format("0..{}", s.gpus));
}

std::vector<int> int_list(const Params& p, const std::string& key, int lo, int hi, size_t min_n, size_t max_n,
                          const std::string& fallback) {
  const Node fb = p.has(key) ? Node{} : load_yaml_string(fallback, "(default)");
  const Node& n = p.has(key) ? p.node(key) : fb;
  const std::string path = join_path(p.path(), key);
  if (n.seq.size() < min_n || n.seq.size() > max_n)
    throw ConfigError(n.origin, path, n.brief(), fmt::format("expected {} to {} entries, got {}", min_n, max_n, n.seq.size()),
                      fmt::format("a list such as [4, 4, 8]"));
  std::vector<int> out;
  for (size_t i = 0; i < n.seq.size(); ++i) {
    const Node& e = n.seq[i];
    auto v = e.is_scalar() ? parse_int(e.scalar) : std::nullopt;
    if (!v || *v < lo || *v > hi)
      throw ConfigError(e.origin, fmt::format("{}[{}]", path, i), e.brief(), "not a valid extent", fmt::format("an integer in [{}, {}]", lo, hi));
    out.push_back(static_cast<int>(*v));
  }
  return out;
}

}  // namespace sluice::net
