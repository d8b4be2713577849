// `sluice schema`: a JSON Schema (draft-07) of the scenario format, generated from the
// registry (studies, components and their keys, types, units as patterns, defaults, ranges,
// enums, catalog names), so a YAML editor completes and checks scenarios. The shipped copy,
// scenarios/sluice.schema.json, is tested for staleness like REFERENCE.md.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "config/schema.h"
#include "config/schema_json.h"
#include "config/units.h"
#include "recorder/recorder.h"

namespace sluice::cli {

namespace {

Json default_value(const ParamSpec& p) {
  const std::string& d = *p.default_text;
  if (p.type == ParamType::Int)
    if (auto i = parse_int(d)) return *i;
  if (p.type == ParamType::Real)
    if (auto r = parse_real(d)) return *r;
  if (p.type == ParamType::Bool) return d == "true" || d == "yes" || d == "on";
  return d;
}

class Generator {
 public:
  explicit Generator(const Registry& reg) : reg_(reg) {}

  Json object_of(const Schema& s, const std::string& rename_kind = "", bool kind_required = false, const std::string& kind_value = "") {
    Json props = Json::object();
    Json required = Json::array();
    for (const auto& p : s.params()) {
      const std::string key = p.name == "kind" && !rename_kind.empty() ? rename_kind : p.name;
      if (p.name == "kind" && !kind_value.empty()) {
        props[key] = Json{{"const", kind_value}, {"description", p.doc}};
        if (kind_required) required.push_back(key);
        continue;
      }
      props[key] = param(p);
      if (!p.default_text && !p.optional_ && p.type != ParamType::Section) required.push_back(key);
    }
    Json o{{"type", "object"}, {"properties", props}, {"additionalProperties", false}};
    if (!required.empty()) o["required"] = required;
    return o;
  }

  Json param(const ParamSpec& p) {
    Json j;
    switch (p.type) {
      case ParamType::Int:
      case ParamType::Real:
      case ParamType::Quantity: j = scalar_json_schema(p); break;
      case ParamType::Bool: j = Json{{"type", "boolean"}}; break;
      case ParamType::String: j = Json{{"type", "string"}}; break;
      case ParamType::Enum: j = Json{{"enum", p.choices}}; break;
      case ParamType::Section: j = p.section ? object_of(*p.section) : Json{{"type", "object"}}; break;
      case ParamType::Ref: {
        std::vector<std::string> names;
        for (const auto& f : p.ref_folders)
          for (auto& n : catalog_names(f)) names.push_back(n);
        Json inline_ = p.section ? object_of(*p.section) : Json{{"type", "object"}};
        inline_["properties"]["catalog"] = Json{{"enum", names}, {"description", "the catalog entry these fields override"}};
        inline_.erase("required");  // an override names only what it changes
        j = Json{{"anyOf", Json::array({Json{{"enum", names}}, inline_})}};
        break;
      }
      case ParamType::Component: j = component(p.category, p.default_text.value_or("")); break;
      case ParamType::ComponentList: j = Json{{"type", "array"}, {"items", component(p.category, "")}}; break;
      case ParamType::List: j = Json{{"type", "array"}}; break;
      case ParamType::Any: j = Json::object(); break;
    }
    std::string doc = p.doc;
    if (p.type == ParamType::Quantity) doc += fmt::format(" [{}: {}]", unit_kind_name(p.unit), valid_units(p.unit));
    if (!p.range_text().empty() && p.type != ParamType::Int && p.type != ParamType::Real) doc += " (" + p.range_text() + ")";
    j["description"] = doc;
    if (p.default_text && p.type != ParamType::Component) j["default"] = default_value(p);
    return j;
  }

  // A component of a category: a bare name, or {kind: NAME, ...its keys}; without `kind`, the default's keys.
  Json component(const std::string& category, const std::string& default_kind) {
    const std::string ref = "#/definitions/" + category;
    if (!defs_.contains(category)) {
      defs_[category] = Json::object();  // placeholder against recursion
      Json names = Json::array();
      Json any = Json::array();
      for (const auto* i : reg_.in(category)) names.push_back(i->name);
      any.push_back(Json{{"enum", names}, {"description", fmt::format("a {} by name", category)}});
      for (const auto* i : reg_.in(category)) {
        const std::string def = category + "." + i->name;
        Json o = object_of(*i->schema, "", true, i->name);
        o["description"] = i->summary;
        defs_[def] = o;
        any.push_back(Json{{"$ref", "#/definitions/" + def}});
      }
      defs_[category] = Json{{"anyOf", any}};
    }
    if (default_kind.empty()) return Json{{"$ref", ref}};
    // The default kind may omit `kind`.
    const ComponentInfo* d = reg_.find(category, default_kind);
    Json alt = Json{{"$ref", ref}};
    if (!d) return alt;
    Json o = object_of(*d->schema, "", false, default_kind);
    return Json{{"anyOf", Json::array({alt, o})}, {"default", default_kind}};
  }

  Json document() {
    Json all = Json::array();
    Json names = Json::array();
    for (const auto* s : reg_.in("study")) {
      names.push_back(s->name);
      const std::string def = "study." + s->name;
      Json o = object_of(*s->schema, "study", s->name != "serving" && s->name != "world", s->name);
      o["description"] = s->summary;
      defs_[def] = o;
      // Without a `study` key a scenario with `cluster` or `workloads` is a world, otherwise the serving short form.
      const Json no_study{{"not", Json{{"required", Json::array({"study"})}}}};
      const Json world_keys{{"anyOf", Json::array({Json{{"required", Json::array({"cluster"})}}, Json{{"required", Json::array({"workloads"})}}})}};
      const Json explicit_study{{"properties", Json{{"study", Json{{"const", s->name}}}}}, {"required", Json::array({"study"})}};
      if (s->name == "serving")
        all.push_back(Json{{"if", Json{{"allOf", Json::array({no_study, Json{{"not", world_keys}}})}}}, {"then", Json{{"$ref", "#/definitions/" + def}}}});
      else if (s->name == "world")
        all.push_back(Json{{"if", Json{{"allOf", Json::array({no_study, world_keys})}}}, {"then", Json{{"$ref", "#/definitions/" + def}}}});
      if (s->name != "serving")
        all.push_back(Json{{"if", explicit_study}, {"then", Json{{"$ref", "#/definitions/" + def}}}});
      if (s->name == "serving")
        all.push_back(Json{{"if", Json{{"properties", Json{{"study", Json{{"const", "serving"}}}}}, {"required", Json::array({"study"})}}},
                           {"then", Json{{"$ref", "#/definitions/" + def}}}});
    }
    Json doc{{"$schema", "http://json-schema.org/draft-07/schema#"},
             {"$id", "https://sluice.invalid/sluice.schema.json"},
             {"title", "sluice scenario"},
             {"description", "A sluice scenario (generated by `sluice schema` from the component registry; see scenarios/REFERENCE.md)."},
             {"type", "object"},
             {"properties", Json{{"study", Json{{"enum", names}, {"default", "serving"}, {"description", "which study the scenario runs"}}}}},
             {"allOf", all},
             {"definitions", defs_}};
    return doc;
  }

 private:
  const Registry& reg_;
  Json defs_ = Json::object();
};

}  // namespace

void add_schema(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("schema", "Print a JSON Schema of the scenario format (for YAML editors: sluice schema > sluice.schema.json)");
  cmd->callback([&ctx] {
    ctx.action = [&ctx]() -> int {
      std::cout << Generator(ctx.registry).document().dump(1) << "\n";
      return 0;
    };
  });
}

}  // namespace sluice::cli
