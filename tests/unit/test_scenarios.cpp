// Scenario-level tests: the malformed-scenario corpus (each file names the error it must
// produce), golden metrics of every shipped scenario, and byte-identical reruns.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "engine/run_control.h"
#include "run/runner.h"
#include "registry/registry.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

using sluice::testing::registry;

using sluice::testing::slurp;

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Compares two JSON documents: same structure, strings equal, numbers within a relative 1e-9.
void compare_json(const Json& got, const Json& want, const std::string& path, std::vector<std::string>& diffs) {
  if (diffs.size() > 20) return;
  if (want.is_number() && got.is_number()) {
    const double a = got.get<double>(), b = want.get<double>();
    if (!(std::fabs(a - b) <= 1e-9 * std::max(1.0, std::max(std::fabs(a), std::fabs(b)))))
      diffs.push_back(path + ": got " + got.dump() + ", golden " + want.dump());
    return;
  }
  if (got.type() != want.type()) {
    diffs.push_back(path + ": type differs: got " + got.dump().substr(0, 80) + ", golden " + want.dump().substr(0, 80));
    return;
  }
  if (want.is_object()) {
    for (auto it = want.begin(); it != want.end(); ++it) {
      if (!got.contains(it.key())) diffs.push_back(path + "." + it.key() + ": missing");
      else compare_json(got[it.key()], it.value(), path + "." + it.key(), diffs);
    }
    for (auto it = got.begin(); it != got.end(); ++it)
      if (!want.contains(it.key())) diffs.push_back(path + "." + it.key() + ": not in the golden file");
  } else if (want.is_array()) {
    if (got.size() != want.size()) diffs.push_back(path + ": array length differs");
    else
      for (size_t i = 0; i < want.size(); ++i) compare_json(got[i], want[i], path + "." + std::to_string(i), diffs);
  } else if (got != want) {
    diffs.push_back(path + ": got " + got.dump() + ", golden " + want.dump());
  }
}

}  // namespace

TEST_CASE("malformed scenarios fail before simulating, with the expected message") {
  const auto files = files_in(fs::path(SLUICE_TESTS_DIR) / "malformed", ".yaml");
  REQUIRE(files.size() >= 25);
  for (const auto& f : files) {
    CAPTURE(f.filename().string());
    std::vector<std::string> expect;
    std::istringstream in(slurp(f));
    for (std::string line; std::getline(in, line);)
      if (line.rfind("# expect: ", 0) == 0) expect.push_back(line.substr(10));
    REQUIRE_MESSAGE(!expect.empty(), "each malformed scenario names its expected error with '# expect: ...'");
    std::string message;
    try {
      load_scenario(f.string(), {}, registry());
    } catch (const ConfigError& e) {
      message = e.what();
    }
    REQUIRE_MESSAGE(!message.empty(), "no ConfigError was raised");
    for (const auto& e : expect) {
      CAPTURE(message);
      CHECK_MESSAGE(message.find(e) != std::string::npos, "expected: " << e);
    }
  }
}

TEST_CASE("every shipped scenario validates, runs, and matches its golden metrics") {
  const fs::path root = fs::path(SLUICE_TESTS_DIR).parent_path();
  const auto scenarios = files_in(root / "scenarios", ".yaml");
  REQUIRE(!scenarios.empty());
  const bool update = std::getenv("SLUICE_UPDATE_GOLDEN") != nullptr;
  const fs::path cwd = fs::current_path();
  fs::current_path(root);  // scenarios name files relative to the sluice root
  for (const auto& s : scenarios) {
    CAPTURE(s.filename().string());
    Scenario sc = load_scenario(fs::relative(s, root).string(), {}, registry());
    Recorder rec;
    run_into(sc, rec, {});
    const Json& got = rec.metrics();
    const fs::path golden = root / "tests" / "golden" / (s.stem().string() + ".json");
    if (update) {
      fs::create_directories(golden.parent_path());
      std::ofstream(golden) << got.dump(1) << "\n";
      continue;
    }
    REQUIRE_MESSAGE(fs::exists(golden), "no golden file; run the tests with SLUICE_UPDATE_GOLDEN=1 and review the diff");
    std::vector<std::string> diffs;
    compare_json(got, Json::parse(slurp(golden)), "metrics", diffs);
    std::string all;
    for (const auto& d : diffs) all += d + "\n";
    CHECK_MESSAGE(diffs.empty(), all);
  }
  fs::current_path(cwd);
}

TEST_CASE("the same scenario and seed give byte-identical output files / another seed differs") {
  const fs::path root = fs::path(SLUICE_TESTS_DIR).parent_path();
  const fs::path tmp = fs::temp_directory_path() / ("sluice-determinism-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  auto run = [&](const std::string& out, std::vector<std::string> sets) {
    Scenario sc = load_scenario((root / "scenarios" / "quickstart.yaml").string(), sets, registry());
    Recorder rec;
    const Json header = run_into(sc, rec, {});
    rec.write_atomically((tmp / out).string(), header);
  };
  run("a", {});
  run("b", {});
  run("c", {"seed=2", "workload.input_tokens.sd=150"});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp / "a")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{".sluice-result", "metrics.json", "requests.csv", "timeseries.csv", "trace.json"});
  for (const auto& n : names) {
    CAPTURE(n);
    CHECK(slurp(tmp / "a" / n) == slurp(tmp / "b" / n));
  }
  CHECK(slurp(tmp / "a" / "requests.csv") != slurp(tmp / "c" / "requests.csv"));
  // Without the steady-decode fast-forward (`sluice run --no-fast-forward`): the same bytes.
  {
    const RunControl::FastForward off(false);
    run("d", {});
  }
  for (const auto& n : names) {
    CAPTURE(n);
    CHECK(slurp(tmp / "a" / n) == slurp(tmp / "d" / n));
  }
  // No partial directories are left behind.
  for (const auto& e : fs::directory_iterator(tmp)) CHECK(e.path().filename().string().find("partial") == std::string::npos);
  fs::remove_all(tmp);
}

TEST_CASE("a failed write leaves no results directory that looks complete") {
  const fs::path tmp = fs::temp_directory_path() / ("sluice-atomic-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  Recorder rec;
  rec.metrics()["x"] = 1;
  rec.file("sub/dir/bad.csv", "cannot be written: its folder does not exist\n");
  CHECK_THROWS(rec.write_atomically((tmp / "run").string(), Json::object()));
  CHECK_FALSE(fs::exists(tmp / "run"));
  size_t leftovers = 0;
  for (const auto& e : fs::directory_iterator(tmp)) { (void)e; ++leftovers; }
  CHECK(leftovers == 0);
  fs::remove_all(tmp);
}
