#include "run/scenario.h"

#include <filesystem>

#include <fmt/format.h>

#include "config/names.h"
#include "engine/rng.h"

namespace sluice {

static Scenario build_scenario(Node root, const std::string& file, const std::vector<std::string>& overrides,
                               const Registry& reg);

Scenario load_scenario(const std::string& file, const std::vector<std::string>& overrides, const Registry& reg) {
  return build_scenario(load_yaml_file(file), file, overrides, reg);
}

Scenario load_scenario_tree(Node root, const std::string& file, const std::vector<std::string>& overrides, const Registry& reg) {
  return build_scenario(std::move(root), file, overrides, reg);
}

Scenario load_scenario_text(const std::string& text, const std::string& label, const std::vector<std::string>& overrides,
                            const Registry& reg) {
  return build_scenario(load_yaml_string(text, label), label, overrides, reg);
}

static Scenario build_scenario(Node root, const std::string& file, const std::vector<std::string>& overrides,
                               const Registry& reg) {
  Scenario sc;
  sc.file = file;
  sc.root = std::make_shared<Node>(std::move(root));
  if (!sc.root->is_map())
    throw ConfigError(sc.root->origin, "", sc.root->brief(), "a scenario must be a YAML mapping", "keys such as study, name, seed, ...");
  for (const auto& o : overrides) apply_override(*sc.root, o);
  // A cluster with workloads is a world; a scenario without either is the serving short form.
  std::string study_kind = sc.root->find("workloads") || sc.root->find("cluster") ? "world" : "serving";
  const Node* sk = sc.root->find("study");
  Node body = *sc.root;
  if (sk) {
    if (!sk->is_scalar()) throw ConfigError(sk->origin, "study", sk->brief(), "expected a study name", "one of: " + reg.names("study"));
    study_kind = sk->scalar;
    for (size_t i = 0; i < body.map.size(); ++i)
      if (body.map[i].first == "study") {
        body.map[i].first = "kind";
        break;
      }
  }
  // Position errors about an unknown study at the 'study' key.
  if (!reg.find("study", study_kind)) {
    std::vector<std::string> all;
    for (const auto* i : reg.in("study")) all.push_back(i->name);
    const std::string hint = closest(study_kind, all);
    throw ConfigError(sk ? sk->origin : sc.root->origin, "study", study_kind,
                      hint.empty() ? "unknown study" : fmt::format("unknown study (did you mean '{}'?)", hint),
                      "one of: " + reg.names("study"));
  }
  *sc.root = body;
  auto parsed = reg.parse(*sc.root, "study", "", study_kind);
  sc.study = parsed.info;
  sc.params = std::make_shared<Params>(std::move(parsed.params));
  sc.seed = static_cast<uint64_t>(sc.params->integer("seed"));
  if (sc.params->given("bands")) sc.band_replications = static_cast<int>(sc.params->section("bands").integer("replications"));
  // The name names a folder under results/; a name derived from the file name is made safe.
  sc.name = sc.params->has("name") ? sc.params->str("name") : sanitized_name(std::filesystem::path(file).stem().string());
  if (const std::string why = name_problem(sc.name, NameUse::FileStem); !why.empty())
    sc.params->fail("name", why + " (a scenario name names a folder under results/, and must not reach outside results/)",
                    name_rule(NameUse::FileStem) + ", e.g. quickstart");
  sc.resolved = resolved_tree(*sc.params);
  // The study key is spelled 'study' in the file.
  for (auto& [k, v] : sc.resolved.map)
    if (k == "kind") k = "study";
  sc.hash = fmt::format("{:016x}", fnv1a(to_yaml(sc.resolved)));
  const auto& factory = reg.factory<StudyFactory>(*sc.study);
  sc.world = factory(StudyContext{*sc.params, reg, sc.seed, sc.name});
  if (const std::string id = sc.world->identity(); !id.empty()) sc.hash = fmt::format("{:016x}", fnv1a(to_yaml(sc.resolved) + id));
  return sc;
}

}  // namespace sluice
