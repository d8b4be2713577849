// `explicit`: nodes and links written out by hand (any topology), each checked with its
// position in the file.
#include <map>
#include <set>

#include <fmt/format.h>

#include "network/topologies/keys.h"

namespace sluice::net {

namespace {

Schema explicit_schema() {
  Schema s;
  add_common_topology_keys(s);
  s.add("nodes", ParamType::List, "nodes: {name, kind: device|switch|host, radix, price, group, nvls (a switch with NVLink SHARP)}");
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
    reject_unknown(m, {"name", "kind", "radix", "price", "group", "nvls"}, path);
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
    if (const Node* r = m.find("nvls")) {
      if (!r->is_scalar() || (r->scalar != "true" && r->scalar != "false"))
        throw ConfigError(r->origin, path + ".nvls", r->brief(), "not a boolean", "true or false");
      if (info.kind != NodeKind::Switch && r->scalar == "true")
        throw ConfigError(r->origin, path + ".nvls", r->brief(), "only a switch reduces in the network", "nvls on a node of kind switch");
      info.reduces = r->scalar == "true";
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

SLUICE_REGISTER(component, topology_explicit) {
  reg.add("topology", "explicit", "explicit nodes and links (any topology written out by hand)", explicit_schema(),
          TopologyFactory(build_explicit));
}

}  // namespace sluice::net
