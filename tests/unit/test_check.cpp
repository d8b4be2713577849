// sluice check: a deliberately worse scheduling policy fails the check against baselines of
// the unchanged code, the unchanged code passes, and the JUnit XML names the regression.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "config/error.h"
#include "run/check.h"
#include "workloads/serving/scheduler.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

// Built-ins plus "vllm-worse": vLLM's policy with admission capped at 4 sequences per
// replica, as a careless policy change might do. Same parameters, so the suite's overrides
// apply unchanged.
const Registry& registry_with_worse_policy() {
  static const Registry reg = [] {
    Registry r;
    register_builtin_components(r);
    const ComponentInfo* vllm = r.find("scheduler", "vllm");
    if (!vllm) throw std::logic_error("no vllm scheduler registered");
    const auto base = r.factory<serving::SchedulerFactory>(*vllm);
    Schema s;
    for (const auto& p : vllm->schema->params())
      if (p.name != "kind") s.add(p.name, p.type, p.doc) = p;
    r.add("scheduler", "vllm-worse", "vLLM with admission capped at 4 sequences (a deliberately worse policy, tests only)", s,
          serving::SchedulerFactory([base](const Params& p) {
            Params capped = p;
            capped.values["max_num_seqs"].number = 4;
            return base(capped);
          }));
    return r;
  }();
  return reg;
}

const fs::path kSuite = fs::path(SLUICE_TESTS_DIR) / "check" / "policy.yaml";

}  // namespace

TEST_CASE("check passes on unchanged code and fails on a worse policy beyond tolerance") {
  const Registry& reg = registry_with_worse_policy();
  const fs::path tmp = fs::temp_directory_path() / ("sluice-check-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  Suite suite = load_suite(kSuite.string(), reg);
  suite.baselines = tmp.string();
  // No baseline yet: the check fails and says how to make one.
  CheckReport none = run_check(suite, reg, 1, false);
  CHECK(none.regressions() == 1);
  CHECK(none.table().find("--update") != std::string::npos);

  run_check(suite, reg, 1, true);
  REQUIRE(fs::exists(tmp / "vllm.json"));
  const CheckReport same = run_check(suite, reg, 2, false);
  CHECK(same.regressions() == 0);
  CHECK(same.checks.size() == 2);
  CHECK(same.table().find("nothing moved") != std::string::npos);

  // The worse policy, everything else unchanged.
  Suite worse = load_suite(kSuite.string(), reg, {"scheduler.kind=vllm-worse"});
  worse.baselines = tmp.string();
  const CheckReport bad = run_check(worse, reg, 1, false);
  CHECK(bad.regressions() >= 1);
  bool ttft = false;
  for (const auto& c : bad.checks)
    if (c.metric == "serving.latency_ms.ttft.p99") {
      ttft = c.failed();
      CHECK(c.now > 1.05 * c.baseline);
    }
  CHECK(ttft);
  const std::string table = bad.table();
  CHECK(table.find("REGRESSION") != std::string::npos);
  CHECK(table.find("serving.latency_ms.ttft.p99") != std::string::npos);
  const std::string xml = bad.junit(worse);
  CHECK(xml.rfind("<?xml", 0) == 0);
  CHECK(xml.find("<failure type=\"regression\"") != std::string::npos);
  CHECK(xml.find("name=\"serving.latency_ms.ttft.p99\"") != std::string::npos);
  fs::remove_all(tmp);
}

TEST_CASE("check tolerances: direction, relative or absolute, and glob patterns") {
  CHECK(glob_match("*.ttft.p99", "serving.latency_ms.ttft.p99"));
  CHECK(glob_match("compare.table.*.values.*", "compare.table.3.values.1"));
  CHECK_FALSE(glob_match("compare.table.*.values.*", "compare.table.3.ratios_to_first.0"));
  CHECK_FALSE(glob_match("*.ttft.p99", "serving.latency_ms.ttft.p50"));
  CHECK(glob_match("*", "anything"));
}

TEST_CASE("a malformed suite is refused before anything runs, naming the key") {
  const fs::path tmp = fs::temp_directory_path() / ("sluice-suite-" + std::to_string(::getpid()) + ".yaml");
  auto refuse = [&](const std::string& text, const std::string& expect) {
    { std::ofstream(tmp) << text; }
    std::string msg;
    try {
      load_suite(tmp.string(), registry_with_worse_policy());
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find(expect) != std::string::npos);
  };
  refuse("suite: x\nscenarios: [{file: nowhere.yaml}]\n", "not found");
  refuse("suite: x\ntolerances: [{metric: a, relative: 5%, worse: up}]\nscenarios: [{file: scenarios/quickstart.yaml}]\n", "higher, lower, either");
  refuse("suite: x\ntolerances: [{metric: a}]\nscenarios: [{file: scenarios/quickstart.yaml}]\n", "relative, absolute or band");
  refuse("suite: x\nbands: -1\ntolerances: [{metric: a, relative: 1%}]\nscenarios: [{file: scenarios/quickstart.yaml}]\n", "an integer in [0, 64]");
  refuse("suite: x\nscenarios: [{file: scenarios/quickstart.yaml, sett: []}]\n", "did you mean 'set'");
  refuse("suite: x\nscenarios: [{file: scenarios/quickstart.yaml, set: [scheduler.max_num_seqs=0]}]\n", "max_num_seqs");
  fs::remove(tmp);
}

TEST_CASE("check against published figures: within tolerance passes, outside fails, a known gap is reported, a missing metric fails") {
  const fs::path dir = fs::temp_directory_path() / ("sluice-published-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string quick = std::string(SLUICE_TESTS_DIR) + "/../scenarios/quickstart.yaml";
  auto suite_with = [&](const std::string& published) {
    const fs::path f = dir / "v.yaml";
    std::ofstream(f) << "suite: v\nscenarios:\n  - {name: q, file: " << quick << ", set: [workload.requests=20], published: [" << published << "]}\n";
    return load_suite(f.string(), builtin_registry());
  };
  // The run's own value, read once, then published figures around it.
  const CheckReport probe = run_check(suite_with("{metric: serving.requests.completed, value: 20, tolerance: 0%, figure: f, source: s}"),
                                      builtin_registry(), 1, false);
  REQUIRE(probe.validation.size() == 1);
  CHECK(probe.validation[0].verdict == "pass");
  CHECK(probe.regressions() == 0);
  const CheckReport off = run_check(suite_with("{metric: serving.requests.completed, value: 25, tolerance: 10%, figure: f, source: s}"),
                                    builtin_registry(), 1, false);
  CHECK(off.validation[0].verdict == "FAIL");
  CHECK(off.validation[0].error == doctest::Approx(-0.2));
  CHECK(off.regressions() == 1);
  CHECK(off.junit(suite_with("{metric: serving.requests.completed, value: 25, tolerance: 10%, figure: f, source: s}")).find("type=\"published\"") !=
        std::string::npos);
  const CheckReport gap = run_check(
      suite_with("{metric: serving.requests.completed, value: 25, tolerance: 10%, figure: f, source: s, known_gap: why}"), builtin_registry(), 1, false);
  CHECK(gap.validation[0].verdict == "known gap");
  CHECK(gap.regressions() == 0);
  const Suite gs = suite_with("{metric: serving.requests.completed, value: 25, tolerance: 10%, figure: f, source: s, known_gap: why}");
  CHECK(gap.validation_markdown(gs).find("| known gap: why |") != std::string::npos);
  // A note (how the entry runs what its source leaves open) is shown after the verdict, and after
  // a known gap's reason.
  const Suite ns = suite_with("{metric: serving.requests.completed, value: 20, tolerance: 1%, figure: f, source: s, note: chosen so}");
  const CheckReport noted = run_check(ns, builtin_registry(), 1, false);
  CHECK(noted.validation[0].verdict == "pass");
  CHECK(noted.validation_markdown(ns).find("| pass. chosen so |") != std::string::npos);
  const Suite both = suite_with("{metric: serving.requests.completed, value: 25, tolerance: 10%, figure: f, source: s, known_gap: why, note: how}");
  const CheckReport both_rep = run_check(both, builtin_registry(), 1, false);
  CHECK(both_rep.validation_markdown(both).find("| known gap: why. how |") != std::string::npos);
  CHECK(both_rep.junit(both).find("(known gap: why) (note: how)") != std::string::npos);  // JUnit's message carries both
  CHECK(noted.junit(ns).find("(note: chosen so)") != std::string::npos);
  CHECK_THROWS_WITH_AS(suite_with("{metric: m, value: 1, tolerance: 5%, figure: f, source: s, notes: x}"), doctest::Contains("did you mean 'note'"),
                       ConfigError);
  const CheckReport missing = run_check(suite_with("{metric: serving.no.such.metric, value: 1, tolerance: 10%, figure: f, source: s}"),
                                        builtin_registry(), 1, false);
  CHECK(missing.validation[0].verdict == "missing");
  CHECK(missing.regressions() == 1);
  // Malformed figures are refused at their key before anything runs.
  CHECK_THROWS_WITH_AS(suite_with("{metric: m, value: 1, tolerance: 5%, figure: f}"), doctest::Contains("needs its source"), ConfigError);
  CHECK_THROWS_WITH_AS(suite_with("{metric: m, value: 0, tolerance: 5%, figure: f, source: s}"), doctest::Contains("non-zero"), ConfigError);
  CHECK_THROWS_WITH_AS(suite_with("{metric: m, value: 1, tolerence: 5%, figure: f, source: s}"), doctest::Contains("did you mean 'tolerance'"),
                       ConfigError);
  fs::remove_all(dir);
}
