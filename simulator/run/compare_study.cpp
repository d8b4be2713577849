// The compare study: a scenario that runs other scenarios (files, overrides, varied keys)
// and tabulates their metrics side by side, so a comparison ships as one runnable file.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "config/paths.h"
#include "run/runner.h"
#include "registry/registry.h"

namespace sluice {

namespace {

class CompareStudy final : public Study {
 public:
  CompareStudy(std::vector<Variant> v, std::vector<std::string> m, const Registry& reg)
      : variants_(std::move(v)), metrics_(std::move(m)), reg_(reg) {}
  void run(RunEnv& env) override { compare_variants(variants_, metrics_, reg_, env.recorder, env.progress); }
  std::string identity() const override { return identity_; }
  std::string identity_;

 private:
  std::vector<Variant> variants_;
  std::vector<std::string> metrics_;
  const Registry& reg_;
};

// A path the study names: relative to the study file first (so a study runs from any
// directory), then the working directory and the sluice root (the older convention).
std::string resolve_file(const Params& at, const std::string& key, const std::string& file) {
  const std::string& from = at.value(key).origin.file;
  if (!from.empty() && from != "--set" && std::filesystem::path(file).is_relative()) {
    const auto beside = std::filesystem::path(from).parent_path() / file;
    if (path_is_regular_file(beside)) return beside.lexically_normal().string();
  }
  if (auto found = find_input_path(file)) return *found;
  at.fail(key, fmt::format("scenario file '{}' not found (relative to the study file, the working directory or the sluice root)", file),
          "an existing scenario file, e.g. scenarios/quickstart.yaml");
}

}  // namespace

SLUICE_REGISTER(study, compare_study) {
  Schema s = common_study_schema();
  s.add("base", ParamType::String, "scenario file that `vary` varies, and the file of `variants` that name none").optional();
  s.add("variants", ParamType::List, "list of {name, file, set: [key=value, ...]} to compare").optional();
  s.add("vary", ParamType::List, "list of {key, values: [...]} axes applied to `base` (cartesian product)").optional();
  s.add("set", ParamType::List, "overrides applied to every variant, e.g. [seed=7]").optional();
  s.add("metrics", ParamType::List, "metric paths to tabulate, e.g. serving.latency_ms.ttft.p99 (default: all numeric)").optional();
  reg.add("study", "compare", "runs scenario variants and tabulates their metrics side by side with ratios", s,
          StudyFactory([&reg](const StudyContext& ctx) -> std::unique_ptr<Study> {
            const Params& p = ctx.params;
            std::vector<std::string> sets;
            if (p.has("set")) sets = string_list(p.node("set"), "set", "e.g. [scheduler.kind=vllm]");
            std::vector<Variant> variants;
            std::string identity;  // the variants' scenario hashes, in order
            if (p.has("variants")) {
              Schema vs;
              vs.add("name", ParamType::String, "column name");
              vs.add("file", ParamType::String, "scenario file (default: the study's base)").optional();
              vs.add("set", ParamType::List, "overrides").optional();
              const Node& list = p.node("variants");
              for (size_t i = 0; i < list.seq.size(); ++i) {
                const std::string path = fmt::format("variants.{}", i);
                Params v = parse_params(list.seq[i], vs, path);
                if (!v.has("file") && !p.has("base"))
                  throw ConfigError(list.seq[i].origin, path + ".file", "", "a variant needs a file, or the study a base",
                                    "file: scenarios/x.yaml here, or base: at the top of the study");
                Variant var = v.has("file") ? Variant{v.str("name"), resolve_file(v, "file", v.str("file")), sets, v.str("file")}
                                            : Variant{v.str("name"), resolve_file(p, "base", p.str("base")), sets, p.str("base")};
                if (v.has("set"))
                  for (auto& x : string_list(v.node("set"), path + ".set", "e.g. [scheduler.kind=vllm]")) var.sets.push_back(x);
                variants.push_back(std::move(var));
              }
            }
            if (p.has("base")) {
              std::vector<std::string> axes;
              if (p.has("vary")) {
                Schema as;
                as.add("key", ParamType::String, "dotted key path, e.g. scheduler.kind");
                as.add("values", ParamType::List, "values to try");
                const Node& list = p.node("vary");
                for (size_t i = 0; i < list.seq.size(); ++i) {
                  const std::string path = fmt::format("vary.{}", i);
                  Params a = parse_params(list.seq[i], as, path);
                  std::string axis = a.str("key") + "=";
                  auto vals = string_list(a.node("values"), path + ".values", "e.g. [vllm, orca]");
                  for (size_t j = 0; j < vals.size(); ++j) axis += (j ? "," : "") + vals[j];
                  axes.push_back(axis);
                }
              }
              for (auto& v : expand_variants({resolve_file(p, "base", p.str("base"))}, sets, axes)) {
                v.shown = p.str("base");
                // The base itself, when a listed variant already is it, is shown once.
                const bool listed = std::any_of(variants.begin(), variants.end(),
                                                [&](const Variant& w) { return w.file == v.file && w.sets == v.sets; });
                if (!listed) variants.push_back(std::move(v));
              }
            }
            if (variants.size() < 2)
              throw ConfigError(p.origin(), "variants", "", "a comparison needs at least two variants",
                                "a `variants` list, or `base` with `vary` giving two or more values");
            // Validate every variant before anything runs; a comparison that (indirectly) includes
            // itself would never end, so nesting is bounded.
            static thread_local int depth = 0;
            if (depth >= 3)
              throw ConfigError(p.origin(), "variants", "", "comparisons nested more than 3 deep (does one include itself?)",
                                "variants that are plain scenarios");
            ++depth;
            try {
              for (size_t i = 0; i < variants.size(); ++i) {
                try {
                  identity += load_scenario(variants[i].file, variants[i].sets, reg).hash + ";";
                } catch (const ConfigError& e) {
                  const Origin at = p.has("variants") && i < p.node("variants").seq.size() ? p.node("variants").seq[i].origin : p.origin();
                  throw ConfigError(at, fmt::format("variants.{}", i), variants[i].name,
                                    fmt::format("this variant is invalid: {}", e.what()), "a variant that validates on its own");
                }
              }
            } catch (...) {
              --depth;
              throw;
            }
            --depth;
            std::vector<std::string> metrics;
            if (p.has("metrics")) metrics = string_list(p.node("metrics"), "metrics", "e.g. [serving.latency_ms.ttft.p99]");
            auto study = std::make_unique<CompareStudy>(std::move(variants), std::move(metrics), reg);
            study->identity_ = identity;
            return study;
          }));
}

}  // namespace sluice
