// Topology generators registered by name (category "topology") with documented parameters,
// and the loader that turns a catalog entry or inline mapping into a checked Topology.
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "network/generators.h"

namespace sluice::net {

namespace {

void add_common(Schema& s) {
  s.add("name", ParamType::String, "display name (default: the catalog file name)").optional();
  s.add("description", ParamType::String, "what this topology is").def("");
  s.add("source", ParamType::String, "where its figures and prices come from").def("");
}

void add_server_keys(Schema& s, const std::string& host_cpus_default) {
  s.add("gpus_per_server", ParamType::Int, "GPUs per NVSwitch server").def("8").range(1, 72);
  s.quantity("nvlink_bandwidth", UnitKind::Bandwidth, "NVLink bandwidth per GPU per direction (H100/H200: 450GB/s; NVIDIA's 900 GB/s counts both directions)").def("450GB/s").positive();
  s.quantity("nvlink_latency", UnitKind::Time, "GPU to NVSwitch hop latency").def("250ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  s.add("host_cpus", ParamType::Int, "host CPUs per server, each with PCIe to an equal share of the GPUs (0: no host nodes)").def(host_cpus_default).range(0, 8);
  s.quantity("pcie_bandwidth", UnitKind::Bandwidth, "PCIe bandwidth per GPU per direction (Gen5 x16: 64GB/s)").def("64GB/s").positive();
  s.quantity("pcie_latency", UnitKind::Time, "GPU to host hop latency").def("600ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  s.quantity("gpu_price", UnitKind::Money, "capex per GPU").def("0").nonneg();
  s.quantity("nvswitch_price", UnitKind::Money, "capex per NVSwitch chip").def("0").nonneg();
  s.add("nvswitch_chips", ParamType::Int, "NVSwitch chips per server (capex only; modelled as one crossbar)").def("4").range(0, 64);
  s.quantity("host_price", UnitKind::Money, "capex per host CPU").def("0").nonneg();
  s.quantity("server_other_price", UnitKind::Money, "capex per server for chassis, memory, storage, power").def("0").nonneg();
}

ServerSpec server_from(const Params& p) {
  ServerSpec s;
  s.gpus = static_cast<int>(p.integer("gpus_per_server"));
  s.nvlink_Bps = p.real("nvlink_bandwidth");
  s.nvlink_latency_ns = p.time("nvlink_latency").count_ns();
  s.host_cpus = static_cast<int>(p.integer("host_cpus"));
  if (s.host_cpus > s.gpus) p.fail("host_cpus", "more host CPUs than GPUs", fmt::format("0..{}", s.gpus));
  s.pcie_Bps = p.real("pcie_bandwidth");
  s.pcie_latency_ns = p.time("pcie_latency").count_ns();
  s.gpu_usd = p.real("gpu_price");
  s.nvswitch_usd = p.real("nvswitch_price");
  s.nvswitch_chips = static_cast<int>(p.integer("nvswitch_chips"));
  s.host_usd = p.real("host_price");
  s.server_other_usd = p.real("server_other_price");
  return s;
}

// A list of integers with each element checked, errors positioned at the element.
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

Schema clos_schema(bool rail) {
  Schema s;
  add_common(s);
  s.add("servers", ParamType::Int, "number of 8-GPU servers").def("32").range(1, 8192);  // 100000 hung topo for hours
  add_server_keys(s, "0");
  s.add("tiers", ParamType::Int, "switch tiers (2: leaf-spine, 3: leaf-aggregation-core)").def("2").range(2, 3);
  s.add("switch_radix", ParamType::Int, "ports per switch").def("64").range(4, 1024);
  s.add("oversubscription", ParamType::Real, "leaf down-ports per up-port (1: non-blocking)").def("1").range(1, 16);
  s.quantity("nic_bandwidth", UnitKind::Bandwidth, "NIC and switch-port bandwidth per direction").def("400Gb/s").positive();
  s.quantity("link_latency", UnitKind::Time, "per NIC or switch hop").def("500ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  s.quantity("switch_price", UnitKind::Money, "capex per switch").def("0").nonneg();
  s.quantity("nic_price", UnitKind::Money, "capex per NIC").def("0").nonneg();
  s.quantity("cable_price", UnitKind::Money, "capex per fabric link (cable + two transceivers)").def("0").nonneg();
  if (!rail)  // a rail needs a NIC per local rank
    s.enumeration("nics", {"per-gpu", "per-server"},
                  "per-gpu: each GPU its own NIC to a leaf; per-server: one NIC per server, from its NVSwitch, shared by its "
                  "GPUs (cloud instances such as AWS p3.16xlarge)")
        .def("per-gpu");
  return s;
}

Schema torus_schema(int ndims) {
  Schema s;
  add_common(s);
  s.add("dims", ParamType::List, fmt::format("extent of each of the {} dimensions (default {})", ndims, ndims == 3 ? "[4, 4, 4]" : "[8, 8]"))
      .optional();
  s.add("wrap", ParamType::Bool, "wrap-around links (false: a mesh)").def("true");
  s.add("twisted", ParamType::Bool, "twist the short dimensions' wrap-around links (shapes k×k×2k, k×2k×2k, k×2k)").def("false");
  s.quantity("link_bandwidth", UnitKind::Bandwidth, "per link per direction").def("50GB/s").positive();
  s.quantity("link_latency", UnitKind::Time, "per hop").def("500ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  s.add("chips_per_host", ParamType::Int, "chips per host (capex of hosts; 0: none)").def("4").range(0, 64);
  s.quantity("chip_price", UnitKind::Money, "capex per chip").def("0").nonneg();
  s.quantity("host_price", UnitKind::Money, "capex per host").def("0").nonneg();
  s.quantity("link_price", UnitKind::Money, "capex per link (cable)").def("0").nonneg();
  return s;
}

Schema pod_schema() {
  Schema s;
  add_common(s);
  s.add("ocs", ParamType::Bool, "cube faces wired through optical circuit switches (false: static cables, one fixed torus)").def("true");
  s.add("cubes", ParamType::List, "cubes along x, y, z (default [4, 4, 4])").optional();
  s.add("cube_edge", ParamType::Int, "chips along each edge of a cube").def("4").range(1, 16);
  s.add("ocs_radix", ParamType::Int, "ports per OCS (Palomar: 136, 128 used)").def("136").range(2, 4096);
  s.quantity("link_bandwidth", UnitKind::Bandwidth, "ICI link per direction").def("50GB/s").positive();
  s.quantity("link_latency", UnitKind::Time, "per ICI hop").def("500ns").range(0, 1e9);  // at most 1 s: it is added per hop or token
  s.add("chips_per_host", ParamType::Int, "chips per host").def("4").range(1, 64);
  s.quantity("chip_price", UnitKind::Money, "capex per chip").def("0").nonneg();
  s.quantity("host_price", UnitKind::Money, "capex per host").def("0").nonneg();
  s.quantity("ocs_price", UnitKind::Money, "capex per OCS").def("0").nonneg();
  s.quantity("optics_price", UnitKind::Money, "capex per optical fiber end (transceiver, circulator, fiber share)").def("0").nonneg();
  s.quantity("electrical_link_price", UnitKind::Money, "capex per in-cube electrical link").def("0").nonneg();
  s.quantity("cable_price", UnitKind::Money, "capex per inter-cube cable when ocs is false").def("0").nonneg();
  return s;
}

Schema explicit_schema() {
  Schema s;
  add_common(s);
  s.add("nodes", ParamType::List, "nodes: {name, kind: device|switch|host, radix, price, group}");
  s.add("links", ParamType::List, "links: {a, b, bandwidth (per direction), latency, label, price, count}");
  return s;
}

const Node& need(const Node& m, const std::string& key, const std::string& path) {
  const Node* n = m.find(key);
  if (!n || !n->is_scalar()) throw ConfigError(m.origin, join_path(path, key), m.brief(), "required key is missing or not a scalar", key);
  return *n;
}

void reject_unknown(const Node& m, const std::set<std::string>& keys, const std::string& path) {
  std::string list;
  for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
  for (size_t i = 0; i < m.map.size(); ++i)
    if (!keys.count(m.map[i].first)) throw ConfigError(m.key_origins[i], join_path(path, m.map[i].first), "", "unknown key", "one of: " + list);
}

double quantity_of(const Node& n, UnitKind k, const std::string& path) {
  std::string why;
  auto v = parse_quantity(n.scalar, k, &why);
  if (!v || *v < 0) throw ConfigError(n.origin, path, n.scalar, why.empty() ? "must not be negative" : why, valid_units(k));
  return *v;
}

Topology build_explicit(const Params& p, const std::string& name) {
  Topology t(name);
  t.family = "explicit";
  const Node& nodes = p.node("nodes");
  const Node& links = p.node("links");
  const std::string npath = join_path(p.path(), "nodes"), lpath = join_path(p.path(), "links");
  std::map<std::string, int> by_name;
  for (size_t i = 0; i < nodes.seq.size(); ++i) {
    const Node& m = nodes.seq[i];
    const std::string path = fmt::format("{}[{}]", npath, i);
    if (!m.is_map()) throw ConfigError(m.origin, path, m.brief(), "expected a mapping", "{name: gpu0, kind: device}");
    reject_unknown(m, {"name", "kind", "radix", "price", "group"}, path);
    NodeInfo info;
    info.name = need(m, "name", path).scalar;
    const std::string kind = need(m, "kind", path).scalar;
    if (kind == "device") info.kind = NodeKind::Device;
    else if (kind == "switch") info.kind = NodeKind::Switch;
    else if (kind == "host") info.kind = NodeKind::Host;
    else throw ConfigError(m.find("kind")->origin, path + ".kind", kind, "unknown node kind", "one of: device, switch, host");
    if (const Node* r = m.find("radix")) {
      auto v = r->is_scalar() ? parse_int(r->scalar) : std::nullopt;
      if (!v || *v < 1) throw ConfigError(r->origin, path + ".radix", r->brief(), "not a valid radix", "a positive integer");
      info.radix = static_cast<int>(*v);
    }
    if (const Node* pr = m.find("price")) info.price_usd = quantity_of(*pr, UnitKind::Money, path + ".price");
    if (const Node* g = m.find("group")) {
      auto v = g->is_scalar() ? parse_int(g->scalar) : std::nullopt;
      if (!v) throw ConfigError(g->origin, path + ".group", g->brief(), "not an integer", "a server index");
      info.group = static_cast<int>(*v);
    }
    if (by_name.count(info.name))
      throw ConfigError(m.find("name")->origin, path + ".name", info.name, "duplicate node name", "a name used once");
    by_name[info.name] = t.add_node(info);
  }
  std::string valid_names;
  for (const auto& [n, _] : by_name) valid_names += (valid_names.empty() ? "" : ", ") + n;
  for (size_t i = 0; i < links.seq.size(); ++i) {
    const Node& m = links.seq[i];
    const std::string path = fmt::format("{}[{}]", lpath, i);
    if (!m.is_map()) throw ConfigError(m.origin, path, m.brief(), "expected a mapping", "{a: gpu0, b: nvswitch, bandwidth: 450GB/s}");
    reject_unknown(m, {"a", "b", "bandwidth", "latency", "label", "price", "count"}, path);
    int ends[2];
    for (int k = 0; k < 2; ++k) {
      const char* key = k ? "b" : "a";
      const Node& e = need(m, key, path);
      auto it = by_name.find(e.scalar);
      if (it == by_name.end()) {
        std::vector<std::string> all;
        for (const auto& [n, _] : by_name) all.push_back(n);
        const std::string hint = closest(e.scalar, all);
        throw ConfigError(e.origin, fmt::format("{}.{}", path, key), e.scalar,
                          hint.empty() ? "dangling link: no node has this name" : fmt::format("dangling link: no node has this name (did you mean '{}'?)", hint),
                          "one of: " + valid_names);
      }
      ends[k] = it->second;
    }
    const double bw = quantity_of(need(m, "bandwidth", path), UnitKind::Bandwidth, path + ".bandwidth");
    if (!(bw > 0)) throw ConfigError(m.find("bandwidth")->origin, path + ".bandwidth", m.find("bandwidth")->scalar, "must be positive", valid_units(UnitKind::Bandwidth));
    int64_t lat = 0;
    if (const Node* l = m.find("latency")) lat = static_cast<int64_t>(quantity_of(*l, UnitKind::Time, path + ".latency"));
    double price = 0;
    if (const Node* pr = m.find("price")) price = quantity_of(*pr, UnitKind::Money, path + ".price");
    std::string label = m.find("label") ? m.find("label")->scalar : "";
    long count = 1;
    if (const Node* c = m.find("count")) {
      auto v = c->is_scalar() ? parse_int(c->scalar) : std::nullopt;
      if (!v || *v < 1) throw ConfigError(c->origin, path + ".count", c->brief(), "not a valid link count", "a positive integer");
      count = *v;
    }
    if (ends[0] == ends[1]) throw ConfigError(m.origin, path, m.brief(), "a link from a node to itself", "two different nodes");
    for (long c = 0; c < count; ++c) t.add_link(ends[0], ends[1], bw, lat, label, price);
  }
  return t;
}

}  // namespace

void register_topology_generators(Registry& reg) {
  {
    Schema s;
    add_common(s);
    add_server_keys(s, "2");
    reg.add("topology", "nvswitch-server", "one 8-GPU server: NVLink to an NVSwitch crossbar, PCIe to the host CPUs (DGX/HGX H100, H200)",
            s, TopologyFactory([](const Params& p, const std::string& name) {
              Topology t(name);
              t.family = "nvswitch-server";
              add_server(t, 0, server_from(p));
              return t;
            }));
  }
  for (bool rail : {false, true}) {
    reg.add("topology", rail ? "rail-optimized" : "fat-tree",
            rail ? "rail-optimized Clos: local rank r of every server on rail leaf r, leaves to spines (2 or 3 tiers)"
                 : "fat-tree (Clos) of NVSwitch servers, whole servers per leaf, 2 or 3 tiers with oversubscription",
            clos_schema(rail), TopologyFactory([rail](const Params& p, const std::string& name) {
              ClosSpec c;
              c.rail_optimized = rail;
              c.servers = static_cast<int>(p.integer("servers"));
              c.server = server_from(p);
              c.tiers = static_cast<int>(p.integer("tiers"));
              c.switch_radix = static_cast<int>(p.integer("switch_radix"));
              c.oversubscription = p.real("oversubscription");
              c.nic_Bps = p.real("nic_bandwidth");
              c.link_latency_ns = p.time("link_latency").count_ns();
              c.switch_usd = p.real("switch_price");
              c.nic_usd = p.real("nic_price");
              c.cable_usd = p.real("cable_price");
              c.nic_per_server = !rail && p.str("nics") == "per-server";
              return build_clos(c, name);
            }));
  }
  for (int nd : {2, 3}) {
    reg.add("topology", nd == 3 ? "torus-3d" : "torus-2d",
            fmt::format("{}D torus (TPU style) with wrap-around, optionally twisted", nd), torus_schema(nd),
            TopologyFactory([nd](const Params& p, const std::string& name) {
              TorusSpec s;
              s.dims = int_list(p, "dims", 1, 256, static_cast<size_t>(nd), static_cast<size_t>(nd), nd == 3 ? "[4, 4, 4]" : "[8, 8]");
              // Each extent may be up to 256, but not all at once: bound the chip count before building.
              long long chips = 1;
              for (int d : s.dims) chips *= d;
              if (chips > 65536)
                p.fail("dims", fmt::format("a torus of {} chips; at most 65536 are built (a TPU v4 pod has 4096)", chips),
                       "extents whose product is at most 65536, e.g. [16, 16, 16]");
              s.wrap = p.flag("wrap");
              s.twisted = p.flag("twisted");
              if (s.twisted && !twist_allowed(s.dims))
                p.fail("twisted", "this shape cannot be twisted", "twisted: true only for shapes k×k×2k, k×2k×2k (3D) or k×2k (2D)");
              s.link_Bps = p.real("link_bandwidth");
              s.link_latency_ns = p.time("link_latency").count_ns();
              s.devices_per_host = static_cast<int>(p.integer("chips_per_host"));
              s.device_usd = p.real("chip_price");
              s.host_usd = p.real("host_price");
              s.link_usd = p.real("link_price");
              return build_torus(s, name);
            }));
  }
  reg.add("topology", "tpu-v4-pod", "TPU v4 pod: 4×4×4-chip cubes, electrical ICI inside, cube faces through 48 OCS (or static cables)",
          pod_schema(), TopologyFactory([](const Params& p, const std::string& name) {
            PodSpec s;
            auto cubes = int_list(p, "cubes", 1, 16, 3, 3, "[4, 4, 4]");
            s.cubes = {cubes[0], cubes[1], cubes[2]};
            s.cube_edge = static_cast<int>(p.integer("cube_edge"));
            s.ocs = p.flag("ocs");
            s.ocs_radix = static_cast<int>(p.integer("ocs_radix"));
            s.link_Bps = p.real("link_bandwidth");
            s.link_latency_ns = p.time("link_latency").count_ns();
            s.chips_per_host = static_cast<int>(p.integer("chips_per_host"));
            s.chip_usd = p.real("chip_price");
            s.host_usd = p.real("host_price");
            s.ocs_usd = p.real("ocs_price");
            s.optical_link_usd = p.real("optics_price");
            s.electrical_link_usd = p.real("electrical_link_price");
            s.cable_usd = p.real("cable_price");
            return build_tpu_pod(s, name);
          }));
  reg.add("topology", "explicit", "explicit nodes and links (any topology written out by hand)", explicit_schema(),
          TopologyFactory(build_explicit));
}

Topology load_topology(const Node& spec, const Registry& reg, const std::string& path) {
  Node resolved;
  std::string display;
  if (spec.is_scalar()) {
    resolved = load_catalog_entry({"topologies"}, spec.scalar, spec.origin, path);
    display = spec.scalar;
  } else if (spec.is_map()) {
    if (const Node* base = spec.find("catalog")) {
      if (!base->is_scalar()) throw ConfigError(base->origin, path + ".catalog", base->brief(), "expected a catalog name", "one of: " + fmt::format("{}", fmt::join(catalog_names("topologies"), ", ")));
      resolved = load_catalog_entry({"topologies"}, base->scalar, base->origin, path + ".catalog");
      display = base->scalar;
      Node over = spec;
      for (size_t i = 0; i < over.map.size(); ++i)
        if (over.map[i].first == "catalog") {
          over.map.erase(over.map.begin() + static_cast<long>(i));
          over.key_origins.erase(over.key_origins.begin() + static_cast<long>(i));
          break;
        }
      resolved.merge(over);
    } else {
      resolved = spec;
    }
  } else {
    throw ConfigError(spec.origin, path, spec.brief(), "expected a topology name or mapping",
                      "one of: " + fmt::format("{}", fmt::join(catalog_names("topologies"), ", ")) + ", or {kind: GENERATOR, ...}");
  }
  auto parsed = reg.parse(resolved, "topology", path);
  if (parsed.params.has("name")) display = parsed.params.str("name");
  if (display.empty()) display = parsed.info->name;
  const auto& factory = reg.factory<TopologyFactory>(*parsed.info);
  try {
    Topology t = factory(parsed.params, display);
    t.check();
    return t;
  } catch (const TopologyError& e) {
    throw ConfigError(resolved.origin, path, display, fmt::format("invalid topology: {}", e.what()),
                      "a connected topology with every link between existing nodes and every switch within its radix");
  }
}

Topology load_topology_by_name(const std::string& name, const Registry& reg) {
  return load_topology(Node::scalar_node(name, Origin{"(command line)", 0, 0}), reg, "topology");
}

}  // namespace sluice::net
