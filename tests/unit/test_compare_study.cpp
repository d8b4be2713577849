// Compare studies: paths relative to the study file, variants that default to the base, the
// base shown once, unlike studies named, and the screen table wrapped to the terminal.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "run/runner.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::path(SLUICE_TESTS_DIR).parent_path();

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

}  // namespace

TEST_CASE("a compare study finds its files beside it, from any working directory, and variants default to the base") {
  const fs::path tmp = fs::temp_directory_path() / ("sluice-cmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp / "studies");
  fs::copy(kRoot / "scenarios" / "quickstart.yaml", tmp / "studies" / "q.yaml");
  {
    std::ofstream(tmp / "studies" / "study.yaml") << "study: compare\nname: rel\nbase: q.yaml\n"
                                                     "variants:\n  - {name: few, set: [scheduler.max_num_seqs=2, workload.requests=20]}\n"
                                                     "  - {name: q, file: q.yaml, set: [workload.requests=20]}\n"
                                                     "set: []\nmetrics: [serving.latency_ms.ttft.p99]\n";
  }
  const fs::path cwd = fs::current_path();
  fs::current_path(fs::temp_directory_path());  // neither the study's folder nor the sluice root
  Scenario sc = load_scenario((tmp / "studies" / "study.yaml").string(), {}, sluice::testing::registry());
  Recorder rec;
  run_into(sc, rec, {});
  fs::current_path(cwd);
  const Json& vs = rec.metrics()["compare"]["variants"];
  // The base is a listed variant's file: it is not run (or shown) a second time.
  REQUIRE(vs.size() == 3);  // few, q, and the base itself (q.yaml with no overrides differs from q's sets)
  CHECK(vs[0]["file"] == "q.yaml");
  const std::string text = joined(rec.summary_lines());
  CHECK(text.find("base    q.yaml") != std::string::npos);
  CHECK(text.find("variant few                      --set scheduler.max_num_seqs=2") != std::string::npos);

  // A variant equal to the base is not added twice.
  {
    std::ofstream(tmp / "studies" / "dup.yaml") << "study: compare\nbase: q.yaml\nset: [workload.requests=20]\n"
                                                   "variants:\n  - {name: few, set: [scheduler.max_num_seqs=2]}\n  - {name: same}\n";
  }
  Scenario dup = load_scenario((tmp / "studies" / "dup.yaml").string(), {}, sluice::testing::registry());
  Recorder r2;
  run_into(dup, r2, {});
  CHECK(r2.metrics()["compare"]["variants"].size() == 2);
  fs::remove_all(tmp);
}

TEST_CASE("compare says when the variants run unlike studies, and wraps its table to COLUMNS") {
  const std::string q = (kRoot / "scenarios" / "quickstart.yaml").string();
  const std::string t = (kRoot / "scenarios" / "twisted-torus.yaml").string();
  const fs::path cwd = fs::current_path();
  fs::current_path(kRoot);
  Recorder unlike;
  compare_variants({{"q", q, {"workload.requests=20"}, "q"}, {"t", t, {}, "t"}}, {"ttft.p99"}, sluice::testing::registry(), unlike, {});
  CHECK(joined(unlike.summary_lines()).find("unlike studies (q: serving, t: twisted-torus)") != std::string::npos);
  // A unique ending of a metric path names that metric.
  CHECK(unlike.metrics()["compare"]["table"][0]["metric"] == "serving.latency_ms.ttft.p99");
  CHECK(unlike.metrics()["compare"]["table"][0]["values"][0].is_number());

  auto variants = expand_variants({q}, {"workload.requests=20"}, {"scheduler.max_num_seqs=1,2,4,8,16,32"});
  ::setenv("COLUMNS", "80", 1);
  Recorder narrow;
  compare_variants(variants, {"serving.latency_ms.ttft.p99", "serving.throughput.output_tokens_per_s"}, sluice::testing::registry(), narrow, {});
  ::unsetenv("COLUMNS");
  fs::current_path(cwd);
  size_t widest = 0, headers = 0;
  for (const auto& l : narrow.summary_lines()) {
    if (l.rfind("variant", 0) != 0 && l.rfind("base", 0) != 0) widest = std::max(widest, l.size());
    headers += l.rfind("metric", 0) == 0;
  }
  CHECK(widest <= 80);
  CHECK(headers >= 2);  // the six variant columns came in more than one block
}

TEST_CASE("a compare variant's set that is not a list is refused at its key") {
  const fs::path tmp = fs::temp_directory_path() / ("sluice-cmp-set-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  fs::copy(kRoot / "scenarios" / "quickstart.yaml", tmp / "q.yaml");
  std::ofstream(tmp / "study.yaml") << "study: compare\nname: s\nbase: q.yaml\n"
                                       "variants:\n  - {name: a, set: workload.requests=20}\n  - {name: b}\n";
  std::string message;
  try {
    load_scenario((tmp / "study.yaml").string(), {}, testing::registry());
  } catch (const ConfigError& e) {
    message = e.what();
  }
  CHECK(message.find("variants.0.set") != std::string::npos);
  CHECK(message.find("expected a list") != std::string::npos);
  fs::remove_all(tmp);
}
