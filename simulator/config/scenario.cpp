#include "config/scenario.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "config/units.h"
#include "engine/rng.h"

namespace sluice {

Schema common_study_schema() {
  Schema s;
  s.add("name", ParamType::String, "scenario name; names the results folder (default: file name)").optional();
  s.add("description", ParamType::String, "what the scenario studies").def("");
  s.add("source", ParamType::String, "where its figures come from (paper, README line)").def("");
  s.add("seed", ParamType::Int, "run seed; every random stream derives from (seed, component)").def("1").range(0, 9e15);
  s.add("sweep", ParamType::Any, "axes for `sluice sweep` ({grid: {key: [values]}, zip, replications, seeds, metrics, objective, where}); `run` ignores it").optional();
  auto bands = std::make_shared<Schema>();
  bands->add("replications", ParamType::Int, "runs at other seeds (seed + 1, seed + 2, ...) for the seed part of each band; 0: the cost model's part only")
      .def("4")
      .range(0, 64);
  s.section("bands", bands,
            "error bands for `sluice run` and `sluice check`: the run again at both ends of its cost model's known error and at "
            "other seeds; metrics.json's `bands` holds each latency, throughput and time figure's 90% interval (docs/BANDS.md)")
      .optional();
  s.add("search", ParamType::Any, "a space, SLO and objectives for `sluice search` ({grid, zip, slo, objectives}); `run` ignores it").optional();
  return s;
}

void apply_override(Node& root, const std::string& assignment) {
  const Origin o{"--set", 0, 0};
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(o, assignment, "", "an override needs the form key.path=value", "e.g. --set workload.arrival.clients=20");
  const std::string path = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  if (std::count(path.begin(), path.end(), '.') >= 64)
    throw ConfigError(o, path.substr(0, 60) + "...", "", "the key path is more than 64 keys deep", "a path such as workload.arrival.rate");
  Node v = load_yaml_string(value, "--set");
  v.origin = o;
  Node* cur = &root;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw ConfigError(o, path, value, "empty key in the path", "dot-separated names, e.g. workload.rate");
    if (cur->is_seq()) {
      // An element of a list by its index: workloads.1.place.servers=12-21.
      const auto idx = parse_int(key);
      if (!idx || *idx < 0 || *idx >= static_cast<long long>(cur->seq.size()))
        throw ConfigError(o, path, value, fmt::format("'{}' is not an index of this list of {}", key, cur->seq.size()),
                          fmt::format("an index in 0-{}", static_cast<long long>(cur->seq.size()) - 1));
      if (dot == std::string::npos) {
        cur->seq[static_cast<size_t>(*idx)] = v;
        return;
      }
      cur = &cur->seq[static_cast<size_t>(*idx)];
      start = dot + 1;
      continue;
    }
    if (cur->is_scalar()) {
      // A catalog reference being overridden field by field: `hardware: h200` -> {catalog: h200}.
      Node m;
      m.kind = Node::Kind::Map;
      m.origin = cur->origin;
      m.set("catalog", *cur, cur->origin);
      *cur = std::move(m);
    } else if (!cur->is_map() && !cur->is_null()) {
      throw ConfigError(o, path, value, fmt::format("cannot set a key inside a {}", cur->kind_name()), "a path through mappings");
    }
    if (dot == std::string::npos) {
      // Switching a component's kind (--set workload.arrival.kind=poisson) drops the keys the
      // file gave the old kind (clients: ...), which the new one would refuse as unknown;
      // keys set on the command line stay.
      if (key == "kind" && cur->is_map()) {
        const Node* old = cur->find("kind");
        if (old && old->is_scalar() && v.is_scalar() && old->scalar != v.scalar) {
          Node kept;
          kept.kind = Node::Kind::Map;
          kept.origin = cur->origin;
          for (size_t i = 0; i < cur->map.size(); ++i)
            if (cur->map[i].first == "kind" || cur->key_origins[i].file == "--set")
              kept.set(cur->map[i].first, cur->map[i].second, cur->key_origins[i]);
          *cur = std::move(kept);
        }
      }
      cur->set(key, v, o);
      return;
    }
    if (!cur->find(key)) {
      Node m;
      m.kind = Node::Kind::Map;
      m.origin = o;
      cur->set(key, m, o);
    }
    cur = cur->find(key);
    start = dot + 1;
  }
}

Node resolved_tree(const Params& p) {
  Node out;
  out.kind = Node::Kind::Map;
  for (const auto& [k, v] : p.values) {
    Node n;
    switch (v.type) {
      case ParamType::Section:
      case ParamType::Component:
        n = resolved_tree(*v.section);
        break;
      case ParamType::Ref:
        n = resolved_tree(*v.section);
        n.map.insert(n.map.begin(), {"catalog", Node::scalar_node(v.text, {})});
        n.key_origins.insert(n.key_origins.begin(), Origin{});
        break;
      case ParamType::ComponentList:
        n.kind = Node::Kind::Seq;
        for (const auto& item : v.items) n.seq.push_back(resolved_tree(*item));
        break;
      case ParamType::List:
      case ParamType::Any:
        if (v.node) n = *v.node;
        else n = Node::scalar_node(v.text, {});
        break;
      default:
        n = Node::scalar_node(v.text, {});
        n.type = v.type == ParamType::Int || v.type == ParamType::Real ? Node::Type::Number
                 : v.type == ParamType::Bool                           ? Node::Type::Bool
                                                                       : Node::Type::String;  // quantities keep their unit
    }
    out.map.emplace_back(k, std::move(n));
    out.key_origins.emplace_back();
  }
  return out;
}

Json node_to_json(const Node& n) {
  switch (n.kind) {
    case Node::Kind::Null: return nullptr;
    case Node::Kind::Scalar: {
      // Numbers and booleans stay typed (they were all strings); text with a unit stays text.
      const bool infer = n.type == Node::Type::Unknown && !n.quoted;
      if (n.type == Node::Type::Bool || (infer && (n.scalar == "true" || n.scalar == "false")))
        return n.scalar == "true" || n.scalar == "yes" || n.scalar == "on";
      if (n.type == Node::Type::Number || infer) {
        if (auto i = parse_int(n.scalar); i && n.scalar.find('_') == std::string::npos) return *i;
        if (auto r = parse_real(n.scalar)) return *r;
      }
      return n.scalar;
    }
    case Node::Kind::Seq: {
      Json a = Json::array();
      for (const auto& e : n.seq) a.push_back(node_to_json(e));
      return a;
    }
    case Node::Kind::Map: {
      Json o = Json::object();
      for (const auto& [k, v] : n.map) o[k] = node_to_json(v);
      return o;
    }
  }
  return nullptr;
}

}  // namespace sluice
