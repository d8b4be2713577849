#include "registry/registry.h"

#include <fmt/format.h>

namespace sluice {

void Registry::add(std::string category, std::string name, std::string summary, Schema schema, std::any factory) {
  auto s = std::make_shared<Schema>();
  s->add("kind", ParamType::String, "which " + category + " this is").def(name);
  for (const auto& p : schema.params()) {
    if (p.name == "kind") continue;
    s->add(p.name, p.type, p.doc) = p;
  }
  auto& slot = by_category_[category][name];
  if (slot.schema) throw std::logic_error(fmt::format("internal: {} '{}' registered twice", category, name));
  slot = ComponentInfo{std::move(category), std::move(name), std::move(summary), std::move(s), std::move(factory)};
}

const ComponentInfo* Registry::find(const std::string& category, const std::string& name) const {
  auto c = by_category_.find(category);
  if (c == by_category_.end()) return nullptr;
  auto it = c->second.find(name);
  return it == c->second.end() ? nullptr : &it->second;
}

std::vector<std::string> Registry::categories() const {
  std::vector<std::string> out;
  for (const auto& [c, _] : by_category_) out.push_back(c);
  return out;
}

std::vector<const ComponentInfo*> Registry::in(const std::string& category) const {
  std::vector<const ComponentInfo*> out;
  auto c = by_category_.find(category);
  if (c != by_category_.end())
    for (const auto& [_, info] : c->second) out.push_back(&info);
  return out;
}

std::string Registry::names(const std::string& category) const {
  std::string s;
  for (const auto* i : in(category)) s += (s.empty() ? "" : ", ") + i->name;
  return s;
}

Registry::Parsed Registry::parse(const Node& node, const std::string& category, const std::string& path,
                                 const std::string& default_kind) const {
  std::string kind = default_kind;
  Origin at = node.origin;
  if (node.is_scalar()) {
    kind = node.scalar;  // shorthand: `scheduler: vllm`
  } else if (node.is_map()) {
    if (const Node* k = node.find("kind")) {
      if (!k->is_scalar()) throw ConfigError(k->origin, join_path(path, "kind"), k->brief(), "expected a name", "one of: " + names(category));
      kind = k->scalar;
      at = k->origin;
    }
  } else if (!node.is_null()) {
    throw ConfigError(node.origin, path, node.brief(), fmt::format("expected a mapping with 'kind' but got a {}", node.kind_name()),
                      "one of: " + names(category));
  }
  if (kind.empty())
    throw ConfigError(node.origin, join_path(path, "kind"), "", "required key is missing", "one of: " + names(category));
  const ComponentInfo* info = find(category, kind);
  if (!info) {
    std::vector<std::string> all;
    for (const auto* i : in(category)) all.push_back(i->name);
    std::string hint = closest(kind, all);
    throw ConfigError(at, join_path(path, "kind"), kind,
                      hint.empty() ? fmt::format("unknown {}", category) : fmt::format("unknown {} (did you mean '{}'?)", category, hint),
                      "one of: " + names(category));
  }
  static const Node null_node;
  return Parsed{info, parse_params(node.is_scalar() ? null_node : node, *info->schema, path)};
}

}  // namespace sluice
