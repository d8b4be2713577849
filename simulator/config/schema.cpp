#include "config/schema.h"

#include "config/paths.h"


#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#ifndef SLUICE_SOURCE_ROOT
#define SLUICE_SOURCE_ROOT "."
#endif

namespace sluice {

std::string join_path(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

std::string ParamSpec::type_name() const {
  switch (type) {
    case ParamType::Int: return "int";
    case ParamType::Real: return "number";
    case ParamType::Bool: return "bool";
    case ParamType::String: return "string";
    case ParamType::Enum: {
      std::string s = "one of ";
      for (size_t i = 0; i < choices.size(); ++i) s += (i ? "|" : "") + choices[i];
      return s;
    }
    case ParamType::Quantity: return unit_kind_name(unit);
    case ParamType::Section: return "mapping";
    case ParamType::Ref: return "catalog name or mapping";
    case ParamType::Component: return category + " (see `sluice list " + category + "`)";
    case ParamType::ComponentList: return "list of " + category + " (see `sluice list " + category + "`)";
    case ParamType::List: return "list";
    case ParamType::Any: return "any";
  }
  return "?";
}

std::string ParamSpec::range_text() const {
  const bool lo = std::isfinite(min), hi = std::isfinite(max);
  if (!lo && !hi) return "";
  auto f = [&](double v) { return type == ParamType::Int ? fmt::format("{:.0f}", v) : fmt::format("{}", v); };
  if (lo && hi) return fmt::format("in {}{}, {}]", min_exclusive ? "(" : "[", f(min), f(max));
  if (lo) return fmt::format("{} {}", min_exclusive ? ">" : ">=", f(min));
  return fmt::format("<= {}", f(max));
}

ParamSpec& Schema::add(std::string name, ParamType t, std::string doc) {
  ParamSpec p;
  p.name = std::move(name);
  p.type = t;
  p.doc = std::move(doc);
  params_.push_back(std::move(p));
  return params_.back();
}
ParamSpec& Schema::quantity(std::string name, UnitKind u, std::string doc) {
  auto& p = add(std::move(name), ParamType::Quantity, std::move(doc));
  p.unit = u;
  return p;
}
ParamSpec& Schema::enumeration(std::string name, std::vector<std::string> choices, std::string doc) {
  auto& p = add(std::move(name), ParamType::Enum, std::move(doc));
  p.choices = std::move(choices);
  return p;
}
ParamSpec& Schema::section(std::string name, std::shared_ptr<Schema> s, std::string doc) {
  auto& p = add(std::move(name), ParamType::Section, std::move(doc));
  p.section = std::move(s);
  return p;
}
ParamSpec& Schema::ref(std::string name, std::vector<std::string> folders, std::shared_ptr<Schema> s, std::string doc) {
  auto& p = add(std::move(name), ParamType::Ref, std::move(doc));
  p.section = std::move(s);
  p.ref_folders = std::move(folders);
  return p;
}

ParamSpec& Schema::component(std::string name, const ComponentCatalog* reg, std::string category, std::string default_kind,
                              std::string doc) {
  auto& p = add(std::move(name), ParamType::Component, std::move(doc));
  p.registry = reg;
  p.category = std::move(category);
  if (!default_kind.empty()) p.default_text = std::move(default_kind);
  return p;
}

ParamSpec& Schema::component_list(std::string name, const ComponentCatalog* reg, std::string category, std::string doc) {
  auto& p = add(std::move(name), ParamType::ComponentList, std::move(doc));
  p.registry = reg;
  p.category = std::move(category);
  return p;
}

std::string catalog_root() {
  if (const char* h = std::getenv("SLUICE_HOME"); h && *h) return h;
  return SLUICE_SOURCE_ROOT;
}

std::string relative_to_root(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::weakly_canonical(catalog_root(), ec);
  if (ec) return path;
  const std::filesystem::path rel = std::filesystem::weakly_canonical(path, ec).lexically_relative(root);
  return !ec && !rel.empty() && *rel.begin() != ".." ? rel.string() : path;
}

std::optional<std::string> find_input_path(const std::string& path, bool want_directory) {
  auto ok = [&](const std::filesystem::path& p) { return want_directory ? path_is_directory(p) : path_is_regular_file(p); };
  if (ok(path)) return path;
  const auto alt = std::filesystem::path(catalog_root()) / path;
  if (ok(alt)) return alt.string();
  return std::nullopt;
}

std::vector<std::string> catalog_names(const std::string& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(catalog_root()) / folder, ec))
    if (e.path().extension() == ".yaml") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

Node load_catalog_entry(const std::vector<std::string>& folders, const std::string& name, const Origin& at,
                        const std::string& path) {
  std::vector<std::string> all;
  for (const auto& f : folders) {
    if (name.find('/') == std::string::npos && name.find("..") == std::string::npos) {
      auto p = std::filesystem::path(catalog_root()) / f / (name + ".yaml");
      if (sluice::path_exists(p)) return load_yaml_file(p.string());
    }
    for (auto& n : catalog_names(f)) all.push_back(n);
  }
  std::string valid;
  for (size_t i = 0; i < all.size(); ++i) valid += (i ? ", " : "") + all[i];
  std::string hint = closest(name, all);
  std::string where;
  for (size_t i = 0; i < folders.size(); ++i) where += (i ? " or " : "") + folders[i] + "/";
  throw ConfigError(at, path, name,
                    fmt::format("dangling catalog reference: no {}{}.yaml{}", where, name,
                                hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)),
                    valid.empty() ? "no entries in the catalog" : "one of: " + valid);
}

const ParamSpec* Schema::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}
std::string Schema::key_list() const {
  std::string s;
  for (size_t i = 0; i < params_.size(); ++i) s += (i ? ", " : "") + params_[i].name;
  return s;
}

static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> d(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) d[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t prev = d[0];
    d[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cur = d[j];
      d[j] = std::min({d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
      prev = cur;
    }
  }
  return d[b.size()];
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  // A word that exactly one candidate extends (h100 -> h100-sxm) is what was meant, even
  // when another candidate is one edit away (h200).
  if (word.size() >= 2) {
    int extending = 0;
    for (const auto& c : candidates)
      if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) {
        ++extending;
        best = c;
      }
    if (extending == 1) return best;
    best.clear();
  }
  size_t best_d = 3;  // only suggest close matches
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) { best_d = d; best = c; }
  }
  return best;
}

bool Params::has(const std::string& name) const { return values.count(name) > 0; }
bool Params::given(const std::string& name) const {
  auto it = values.find(name);
  return it != values.end() && it->second.given;
}
const Params::Value& Params::value(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end())
    throw std::logic_error(fmt::format("internal: parameter '{}' of '{}' read but not present", name, path_));
  return it->second;
}
long long Params::integer(const std::string& name) const { return static_cast<long long>(value(name).number); }
double Params::real(const std::string& name) const { return value(name).number; }
bool Params::flag(const std::string& name) const { return value(name).flag; }
const std::string& Params::str(const std::string& name) const { return value(name).text; }
SimTime Params::time(const std::string& name) const { return SimTime::ns(static_cast<int64_t>(value(name).number)); }
const Params& Params::section(const std::string& name) const { return *value(name).section; }
const std::vector<std::shared_ptr<Params>>& Params::items(const std::string& name) const { return value(name).items; }
const Node& Params::node(const std::string& name) const { return *value(name).node; }

void Params::fail(const std::string& name, const std::string& problem, const std::string& valid) const {
  auto it = values.find(name);
  if (it == values.end()) throw ConfigError(origin_, join_path(path_, name), "", problem, valid);
  throw ConfigError(it->second.origin, join_path(path_, name), it->second.text, problem, valid);
}

static Params::Value parse_value(const Node& n, const ParamSpec& spec, const std::string& path, bool given) {
  Params::Value v;
  v.type = spec.type;
  v.origin = n.origin;
  v.given = given;
  v.node = &n;
  auto bad = [&](const std::string& problem, const std::string& valid) -> Params::Value {
    throw ConfigError(n.origin, path, n.brief(), problem, valid);
  };
  auto need_scalar = [&]() {
    if (!n.is_scalar()) bad(fmt::format("expected a {} but got a {}", spec.type_name(), n.kind_name()), spec.type_name() + (spec.range_text().empty() ? "" : " " + spec.range_text()));
    v.text = n.scalar;
  };
  auto check_range = [&](double x) {
    const bool low = spec.min_exclusive ? x <= spec.min : x < spec.min;
    if (low || x > spec.max) bad("out of range", fmt::format("{} {}", spec.type_name(), spec.range_text()));
  };
  switch (spec.type) {
    case ParamType::Int: {
      need_scalar();
      auto x = parse_int(n.scalar);
      if (!x) {
        auto r = parse_real(n.scalar);
        if (r && std::floor(*r) == *r && std::fabs(*r) < 9e15) x = static_cast<long long>(*r);
      }
      if (!x) bad("not an integer", "an integer" + (spec.range_text().empty() ? "" : " " + spec.range_text()));
      v.number = static_cast<double>(*x);
      check_range(v.number);
      break;
    }
    case ParamType::Real: {
      need_scalar();
      auto x = parse_real(n.scalar);
      if (!x) bad("not a number", "a number" + (spec.range_text().empty() ? "" : " " + spec.range_text()));
      v.number = *x;
      check_range(v.number);
      break;
    }
    case ParamType::Bool: {
      need_scalar();
      const std::string& s = n.scalar;
      if (s == "true" || s == "yes" || s == "on") v.flag = true;
      else if (s == "false" || s == "no" || s == "off") v.flag = false;
      else bad("not a boolean", "true or false");
      v.number = v.flag ? 1 : 0;
      break;
    }
    case ParamType::String:
      need_scalar();
      break;
    case ParamType::Enum: {
      need_scalar();
      if (std::find(spec.choices.begin(), spec.choices.end(), n.scalar) == spec.choices.end()) {
        std::string hint = closest(n.scalar, spec.choices);
        bad(hint.empty() ? "not a valid choice" : fmt::format("not a valid choice (did you mean '{}'?)", hint),
            spec.type_name());
      }
      break;
    }
    case ParamType::Quantity: {
      need_scalar();
      std::string why;
      auto x = parse_quantity(n.scalar, spec.unit, &why);
      if (!x) bad(why, valid_units(spec.unit));
      v.number = *x;
      if (spec.unit == UnitKind::Time) {
        if (std::fabs(*x) >= 9.2e18) bad("time exceeds the int64 nanosecond range (about 292 years)", valid_units(spec.unit));
        v.number = std::round(*x);
      }
      const bool low = spec.min_exclusive ? v.number <= spec.min : v.number < spec.min;
      if (low || v.number > spec.max) bad("out of range", fmt::format("a {} {}", spec.type_name(), spec.range_text()));
      break;
    }
    case ParamType::Section:
      if (!n.is_map() && !n.is_null()) bad(fmt::format("expected a mapping but got a {}", n.kind_name()), "a mapping with keys: " + spec.section->key_list());
      v.section = std::make_shared<Params>(parse_params(n, *spec.section, path));
      break;
    case ParamType::Ref: {
      auto resolved = std::make_shared<Node>();
      if (n.is_scalar()) {
        v.text = n.scalar;
        v.catalog = n.scalar;
        *resolved = load_catalog_entry(spec.ref_folders, n.scalar, n.origin, path);
      } else if (n.is_map()) {
        if (const Node* base = n.find("catalog")) {
          if (!base->is_scalar()) throw ConfigError(base->origin, path + ".catalog", base->brief(), "expected a catalog name", "a name such as 'h200'");
          v.text = base->scalar;
          v.catalog = base->scalar;
          *resolved = load_catalog_entry(spec.ref_folders, base->scalar, base->origin, path + ".catalog");
          Node over = n;
          for (size_t i = 0; i < over.map.size(); ++i)
            if (over.map[i].first == "catalog") {
              over.map.erase(over.map.begin() + static_cast<long>(i));
              over.key_origins.erase(over.key_origins.begin() + static_cast<long>(i));
              break;
            }
          resolved->merge(over);
        } else {
          *resolved = n;
          if (const Node* nm = n.find("name"); nm && nm->is_scalar()) v.text = nm->scalar;
          else v.text = "inline";
        }
      } else {
        bad(fmt::format("expected a catalog name or a mapping but got a {}", n.kind_name()), "a name from " + spec.ref_folders.front() + "/ or an inline mapping");
      }
      v.owned = resolved;
      v.node = resolved.get();
      v.section = std::make_shared<Params>(parse_params(*resolved, *spec.section, path));
      break;
    }
    case ParamType::Component: {
      v.section = std::make_shared<Params>(spec.registry->parse_component(n, spec.category, path, spec.default_text.value_or(""), v.text));
      break;
    }
    case ParamType::ComponentList: {
      if (!n.is_seq()) bad(fmt::format("expected a list but got a {}", n.kind_name()), "a YAML list of {kind: ..., ...}");
      for (size_t i = 0; i < n.seq.size(); ++i) {
        std::string kind;
        v.items.push_back(std::make_shared<Params>(
            spec.registry->parse_component(n.seq[i], spec.category, fmt::format("{}[{}]", path, i), "", kind)));
      }
      break;
    }
    case ParamType::List:
      if (!n.is_seq()) bad(fmt::format("expected a list but got a {}", n.kind_name()), "a YAML list");
      break;
    case ParamType::Any:
      if (n.is_scalar()) v.text = n.scalar;
      break;
  }
  return v;
}

Params parse_params(const Node& node, const Schema& schema, const std::string& path) {
  Params out;
  out.path_ = path;
  out.origin_ = node.origin;
  static const Node null_node;
  if (!node.is_map() && !node.is_null())
    throw ConfigError(node.origin, path, node.brief(), fmt::format("expected a mapping but got a {}", node.kind_name()),
                      "a mapping with keys: " + schema.key_list());
  std::vector<std::string> names;
  for (const auto& p : schema.params()) names.push_back(p.name);
  if (node.is_map()) {
    for (size_t i = 0; i < node.map.size(); ++i) {
      const auto& [key, val] = node.map[i];
      const ParamSpec* spec = schema.find(key);
      if (!spec) {
        std::string hint = closest(key, names);
        throw ConfigError(node.key_origins[i], join_path(path, key), "",
                          hint.empty() ? "unknown key" : fmt::format("unknown key (did you mean '{}'?)", hint),
                          names.empty() ? "no keys here" : "one of: " + schema.key_list());
      }
      if (val.is_null() && spec->type != ParamType::Section && spec->type != ParamType::Any && spec->type != ParamType::Component)
        throw ConfigError(val.origin, join_path(path, key), "", "has no value",
                          spec->type_name() + (spec->range_text().empty() ? "" : " " + spec->range_text()));
      out.values[key] = parse_value(val, *spec, join_path(path, key), true);
    }
  }
  for (const auto& spec : schema.params()) {
    if (out.values.count(spec.name)) continue;
    if (spec.type == ParamType::Section && !spec.optional_) {  // (an optional section absent stays absent)
      out.values[spec.name] = parse_value(null_node, spec, join_path(path, spec.name), false);
      out.values[spec.name].origin = node.origin;
      continue;
    }
    if (spec.default_text) {
      Node d = Node::scalar_node(*spec.default_text, Origin{"(default)", 0, 0});
      auto v = parse_value(d, spec, join_path(path, spec.name), false);
      v.node = nullptr;
      v.origin = node.origin;
      out.values[spec.name] = v;
    } else if (!spec.optional_) {
      throw ConfigError(node.origin, join_path(path, spec.name), "", "required key is missing",
                        fmt::format("{}: {} ({})", spec.name, spec.type_name(), spec.doc));
    }
  }
  return out;
}

}  // namespace sluice
