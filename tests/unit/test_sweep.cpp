// Sweeps: expansion (grid, zip, replications, seeds), identical tables at 1 and 2 threads,
// and resuming a sweep whose process died part-way.
#include <doctest/doctest.h>

#include "test_support.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

#include "config/error.h"
#include "run/sweep.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

using sluice::testing::slurp;

SweepSpec spec_of(const std::string& yaml) { return parse_sweep_block(load_yaml_string(yaml, "test")); }

const fs::path kRoot = fs::path(SLUICE_TESTS_DIR).parent_path();

}  // namespace

TEST_CASE("sweep grid: cartesian product, first axis slowest, replications innermost") {
  auto s = spec_of("{grid: {a: [1, 2], b: [x, y, z]}, replications: 2}");
  auto pts = expand_sweep(s, 7, {"base=1"});
  REQUIRE(pts.size() == 12);
  CHECK(pts[0].values == std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b", "x"}});
  CHECK(pts[1].values == pts[0].values);
  CHECK(pts[1].replication == 1);
  CHECK(pts[2].values == std::vector<std::pair<std::string, std::string>>{{"a", "1"}, {"b", "y"}});
  CHECK(pts[11].values == std::vector<std::pair<std::string, std::string>>{{"a", "2"}, {"b", "z"}});
  CHECK(pts[11].config == 5);
  for (size_t i = 0; i < pts.size(); ++i) CHECK(pts[i].index == i);
  CHECK(pts[3].sets.front() == "base=1");
  CHECK(pts[3].sets.back() == "seed=" + std::to_string(pts[3].seed));
}

TEST_CASE("sweep zip: axes in lockstep, crossed with the grid, unequal lengths an error") {
  auto s = spec_of("{grid: {g: [p, q]}, zip: {a: [1, 2, 3], b: [10, 20, 30]}}");
  auto pts = expand_sweep(s, 1, {});
  REQUIRE(pts.size() == 6);
  CHECK(pts[0].values == std::vector<std::pair<std::string, std::string>>{{"g", "p"}, {"a", "1"}, {"b", "10"}});
  CHECK(pts[2].values == std::vector<std::pair<std::string, std::string>>{{"g", "p"}, {"a", "3"}, {"b", "30"}});
  CHECK(pts[3].values == std::vector<std::pair<std::string, std::string>>{{"g", "q"}, {"a", "1"}, {"b", "10"}});
  CHECK_THROWS_AS(spec_of("{zip: {a: [1, 2], b: [1]}}"), ConfigError);
  CHECK_THROWS_AS(spec_of("{grdi: {a: [1]}}"), ConfigError);
  CHECK_THROWS_AS(spec_of("{replications: 0}"), ConfigError);
  CHECK_THROWS_AS(parse_axis("nokey", "--grid"), ConfigError);
  CHECK(parse_axis("k=1,2", "--grid").values == std::vector<std::string>{"1", "2"});
}

TEST_CASE("sweep seeds derive from the base seed, the point and the replication") {
  auto s = spec_of("{grid: {a: [1, 2]}, replications: 3}");
  auto pts = expand_sweep(s, 11, {});
  std::set<uint64_t> seeds;
  for (const auto& p : pts) seeds.insert(p.seed);
  CHECK(seeds.size() == pts.size());                      // every point its own streams
  CHECK(expand_sweep(s, 11, {})[4].seed == pts[4].seed);  // reproducible
  CHECK(expand_sweep(s, 12, {})[4].seed != pts[4].seed);  // the base seed matters
  // A point's seed depends on its values, not on where it sits in the grid.
  auto wider = expand_sweep(spec_of("{grid: {a: [0, 1, 2]}, replications: 3}"), 11, {});
  CHECK(wider[3].seed == pts[0].seed);
  // Common seeds: every configuration shares the replication's streams.
  auto common = expand_sweep(spec_of("{grid: {a: [1, 2]}, replications: 2, seeds: common}"), 11, {});
  CHECK(common[0].seed == common[2].seed);
  CHECK(common[0].seed != common[1].seed);
  // A swept seed is used as given.
  auto given = expand_sweep(spec_of("{grid: {seed: [3, 4]}}"), 11, {});
  CHECK(given[1].seed == 4);
  CHECK_THROWS_AS(expand_sweep(spec_of("{grid: {seed: [3, x]}}"), 11, {}), ConfigError);
  CHECK_THROWS_AS(expand_sweep(spec_of("{grid: {a: [1]}, zip: {a: [2]}}"), 11, {}), ConfigError);
  for (const auto& p : pts) CHECK(p.seed < 9000000000000000ULL);
}

TEST_CASE("a sweep gives byte-identical tables at 1 and 2 threads, and resumes after a killed run") {
  const fs::path tmp = fs::temp_directory_path() / ("sluice-sweep-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const std::string file = (kRoot / "scenarios" / "sweep-scheduler-load.yaml").string();
  SweepFile f = load_sweep_file(file);
  REQUIRE(f.spec);
  SweepSpec spec = *f.spec;
  spec.replications = 1;
  const std::vector<std::string> sets{"workload.requests=80"};
  auto pts = expand_sweep(spec, 5, sets);
  REQUIRE(pts.size() == 6);
  auto table = [&](const std::string& dir, int threads) {
    SweepOptions o;
    o.out_dir = (tmp / dir).string();
    o.threads = threads;
    auto rs = run_sweep_points(f, file, pts, sluice::testing::registry(), o);
    return combine_sweep("t", spec, pts, rs);
  };
  const SweepTable one = table("j1", 1), two = table("j2", 2);
  CHECK(one.csv == two.csv);
  CHECK(one.json.dump() == two.json.dump());
  CHECK(one.csv.find("vllm,60/s") != std::string::npos);
  for (size_t i = 0; i < pts.size(); ++i)
    CHECK(slurp(fs::path(point_dir((tmp / "j1").string(), i)) / "metrics.json") ==
          slurp(fs::path(point_dir((tmp / "j2").string(), i)) / "metrics.json"));

  // A killed sweep: two points finished, one left a partial directory, the rest never started.
  fs::create_directories(tmp / "killed" / "points");
  for (size_t i : {0, 3}) fs::copy(point_dir((tmp / "j1").string(), i), point_dir((tmp / "killed").string(), i), fs::copy_options::recursive);
  fs::create_directories(tmp / "killed" / "points" / ".p0001.partial.99999");
  std::ofstream(tmp / "killed" / ".sluice-sweep") << "claimed by the killed sweep\n";  // as every sweep marks its directory
  SweepOptions o;
  o.out_dir = (tmp / "killed").string();
  o.threads = 2;
  auto rs = run_sweep_points(f, file, pts, sluice::testing::registry(), o);
  size_t resumed = 0;
  for (const auto& r : rs) resumed += r.resumed;
  CHECK(resumed == 2);
  CHECK(rs[0].resumed);
  CHECK(rs[3].resumed);
  CHECK(combine_sweep("t", spec, pts, rs).csv == one.csv);
  CHECK_FALSE(fs::exists(tmp / "killed" / "points" / ".p0001.partial.99999"));

  // Results of another scenario in the way are never silently overwritten or mixed in.
  auto other = expand_sweep(spec, 5, {"workload.requests=90"});
  CHECK_THROWS_AS(run_sweep_points(f, file, other, sluice::testing::registry(), o), ConfigError);

  // Constraints and objectives pick the best feasible configuration.
  SweepSpec planner = spec;
  planner.objectives = {"max:throughput.output_tokens_per_s"};
  planner.where = {"ttft.p99<200ms"};
  const SweepTable best = combine_sweep("t", planner, pts, rs);
  REQUIRE(best.json.contains("best"));
  const Json& b = best.json["best"]["objectives"][0];
  REQUIRE(b["point"].is_number());
  CHECK(best.json["rows"][b["point"].get<size_t>()]["metrics"]["serving.latency_ms.ttft.p99"].get<double>() < 200);
  planner.where = {"ttft.p99<1us"};
  CHECK(combine_sweep("t", planner, pts, rs).json["best"]["objectives"][0]["point"].is_null());
  planner.where = {"ttft.p99<200 parsecs"};
  CHECK_THROWS_AS(combine_sweep("t", planner, pts, rs), ConfigError);
  fs::remove_all(tmp);
}

TEST_CASE("sweep metric names resolve by unique suffix, and say what is ambiguous or missing") {
  const std::vector<std::string> paths{"serving.latency_ms.ttft.p99", "serving.latency_ms.e2e.p99", "serving.throughput.output_tokens_per_s"};
  CHECK(resolve_metric("ttft.p99", paths, "--metric") == "serving.latency_ms.ttft.p99");
  CHECK(resolve_metric("serving.latency_ms.e2e.p99", paths, "--metric") == "serving.latency_ms.e2e.p99");
  CHECK_THROWS_WITH_AS(resolve_metric("p99", paths, "--metric"), doctest::Contains("ambiguous"), ConfigError);
  CHECK_THROWS_WITH_AS(resolve_metric("ttft.p98", paths, "--metric"), doctest::Contains("did you mean"), ConfigError);
}
