// The availability study: the OCS formula, goodput accounting on a hand-checked trace,
// confidence intervals, determinism and its input checks.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "config/error.h"
#include "network/availability.h"
#include "run/runner.h"
#include "run/scenario.h"

using namespace sluice;
using namespace sluice::net;

namespace {

constexpr int64_t kS = 1'000'000'000;  // ns per second

faults::Distribution exponential(double mean_s) {
  faults::Distribution d;
  d.kind = faults::DistKind::Exponential;
  d.mean_s = mean_s;
  return d;
}

// Runs a scenario text into a recorder; returns its metrics and availability.csv.
std::pair<Json, std::string> run_text(const std::string& text, const std::vector<std::string>& sets = {}) {
  Scenario sc = load_scenario_text(text, "availability.yaml", sets, sluice::testing::registry());
  Recorder rec;
  run_into(sc, rec, {});
  std::string csv;
  for (const auto& [name, content] : rec.files())
    if (name == "availability.csv") csv = content;
  return {rec.metrics(), csv};
}

std::string config_error(const std::string& text) {
  try {
    load_scenario_text(text, "availability.yaml", {}, sluice::testing::registry());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const char* kSmall = R"(study: availability
seed: 5
horizon: 365d
seeds: 4
slices: [512, 2048]
availabilities: [0.99, 0.999]
)";

}  // namespace

TEST_CASE("availability: the binomial formula, the t quantiles and the TPU v4 slice shapes") {
  // One cube needed of one: the cube is healthy with probability a^16.
  CHECK(ocs_formable_probability(1, 16, 0.99, 1) == doctest::Approx(std::pow(0.99, 16)));
  // All 64 cubes: (a^16)^64.
  CHECK(ocs_formable_probability(64, 16, 0.999, 64) == doctest::Approx(std::pow(0.999, 1024)).epsilon(1e-9));
  // At least 1 of 2 cubes: 1 - (1-p)^2.
  const double p = std::pow(0.99, 16);
  CHECK(ocs_formable_probability(2, 16, 0.99, 1) == doctest::Approx(1 - (1 - p) * (1 - p)));
  CHECK(ocs_formable_probability(64, 16, 0.99, 0) == 1.0);
  CHECK(ocs_formable_probability(64, 16, 0.99, 65) == 0.0);
  CHECK(student_t975(1) == doctest::Approx(12.706));
  CHECK(student_t975(4) == doctest::Approx(2.776));
  CHECK(student_t975(29) == doctest::Approx(2.045));
  CHECK(student_t975(30) == doctest::Approx(2.042).epsilon(1e-3));
  CHECK(student_t975(60) == doctest::Approx(2.000).epsilon(1e-3));
  CHECK(student_t975(120) == doctest::Approx(1.980).epsilon(1e-3));
  CHECK(student_t975(100000) == doctest::Approx(1.960).epsilon(1e-3));
  const auto [m, ci] = mean_ci95({1, 2, 3, 4});
  CHECK(m == doctest::Approx(2.5));
  CHECK(ci == doctest::Approx(3.182 * std::sqrt(5.0 / 3.0) / 2).epsilon(1e-4));  // t(3) · s/√n, s² = 5/3
  CHECK(mean_ci95({0.5}).second == 0.0);
  const std::pair<int, CubeShape> shapes[] = {{1, {1, 1, 1}}, {2, {1, 1, 2}}, {4, {1, 2, 2}}, {8, {2, 2, 2}},
                                              {16, {2, 2, 4}}, {32, {2, 4, 4}}, {64, {4, 4, 4}}};
  for (const auto& [cubes, shape] : shapes) {
    CAPTURE(cubes);
    CHECK(tpu_v4_slice_shape(cubes) == shape);
  }
  CHECK_THROWS(tpu_v4_slice_shape(3));
}

TEST_CASE("availability: with OCS the formable fraction of n cubes matches P(Bin(64, A^16) >= n)") {
  AvailabilityConfig cfg;
  const double a = 0.99, mttr_s = 3600;
  cfg.repair = exponential(mttr_s);
  cfg.lifetime = exponential(a / (1 - a) * mttr_s);
  cfg.horizon_ns = static_cast<int64_t>(8000 * mttr_s) * kS;  // ~80 failures per host
  const int needs[] = {1, 48, 52, 54, 56, 58, 62, 64};
  for (int n : needs) cfg.slices.push_back(CubeShape{1, 1, n});  // static: never fits unless n <= 4; OCS counts cubes only
  std::vector<std::vector<double>> got(std::size(needs));
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const AvailabilityRunResult r = run_availability(cfg, seed);
    for (size_t i = 0; i < std::size(needs); ++i) got[i].push_back(static_cast<double>(r.formable_ns[i][0]) / static_cast<double>(cfg.horizon_ns));
    // Static formability can never exceed OCS formability (a healthy block is n healthy cubes).
    for (size_t i = 0; i < std::size(needs); ++i) CHECK(r.formable_ns[i][1] <= r.formable_ns[i][0]);
  }
  for (size_t i = 0; i < std::size(needs); ++i) {
    const double want = ocs_formable_probability(64, 16, a, needs[i]);
    const auto [mean, ci] = mean_ci95(got[i]);
    CAPTURE(needs[i]);
    CAPTURE(want);
    CAPTURE(mean);
    CAPTURE(ci);
    // Within the statistical error: the seeds' 95% interval, and an absolute 0.02 that the
    // run length allows (measured errors are a few thousandths).
    CHECK(std::fabs(mean - want) <= std::max(2 * ci, 0.004));
    CHECK(std::fabs(mean - want) <= 0.02);
  }
}

TEST_CASE("availability: goodput accounting on a hand-checked trace") {
  // Two cubes of two hosts each; checkpoint every 10 s of work (2 s to write), 3 s restart.
  AvailabilityConfig cfg;
  cfg.grid = {2, 1, 1};
  cfg.hosts_per_cube = 2;
  cfg.slices = {CubeShape{1, 1, 1}, CubeShape{1, 1, 2}};
  cfg.horizon_ns = 100 * kS;
  cfg.checkpoint_interval_ns = 10 * kS;
  cfg.checkpoint_cost_ns = 2 * kS;
  cfg.restart_ns = 3 * kS;
  // Cube 0 down [20, 30) and [55, 60); cube 1 down [50, 53).
  const std::vector<HostEvent> trace = {{20 * kS, 0, false}, {30 * kS, 0, true}, {50 * kS, 2, false},
                                        {53 * kS, 2, true},  {55 * kS, 1, false}, {60 * kS, 1, true}};
  const AvailabilityRunResult r = run_availability_trace(cfg, trace);
  CHECK(r.host_failures == 3);
  for (size_t f = 0; f < 2; ++f) {
    CAPTURE(f);
    // One cube: on cube 0 from 0; at 20 (17 s after its restart: one checkpoint, 5 s lost) it
    // moves to cube 1; at 50 (27 s: two checkpoints, 3 s lost) back to cube 0; at 55 (5 s: 2 s
    // lost) to cube 1, where it runs 45 s to the end: 3 checkpoints and 6 s of progress.
    const SliceJobTime& one = r.jobs[0][f];
    CHECK(r.formable_ns[0][f] == 100 * kS);
    CHECK(one.useful_ns == 66 * kS);
    CHECK(one.lost_ns == 10 * kS);
    CHECK(one.restart_ns == 12 * kS);
    CHECK(one.checkpoint_ns == 12 * kS);
    CHECK(one.waiting_ns == 0);
    CHECK(one.interruptions == 3);
    CHECK(one.starts == 4);
    CHECK(one.total_ns() == cfg.horizon_ns);
    // Both cubes: cut at 20 (10 useful, 5 lost), waits to 30; cut at 50 (10 useful, 5 lost),
    // waits to 53; cut at 55 inside its restart; waits to 60, then 37 s: 3 checkpoints + 1 s.
    const SliceJobTime& two = r.jobs[1][f];
    CHECK(r.formable_ns[1][f] == 82 * kS);
    CHECK(two.useful_ns == 51 * kS);
    CHECK(two.lost_ns == 10 * kS);
    CHECK(two.restart_ns == 11 * kS);
    CHECK(two.checkpoint_ns == 10 * kS);
    CHECK(two.waiting_ns == 18 * kS);
    CHECK(two.interruptions == 3);
    CHECK(two.starts == 4);
    CHECK(two.total_ns() == cfg.horizon_ns);
  }
  // A failure during a checkpoint write loses the interval's work and the write so far.
  cfg.slices = {CubeShape{1, 1, 2}};
  const AvailabilityRunResult w = run_availability_trace(cfg, {{14 * kS, 3, false}, {14 * kS, 3, true}});
  // Zero-length outage: the host is back at the same instant, the cube never looks unhealthy.
  CHECK(w.jobs[0][0].interruptions == 0);
  const AvailabilityRunResult w2 = run_availability_trace(cfg, {{14 * kS, 3, false}, {15 * kS, 3, true}});
  const SliceJobTime& j = w2.jobs[0][0];
  CHECK(j.interruptions == 1);
  // Restart 0..3, work 3..13, the write from 13 cut at 14: 10 s lost, 1 s of writing. Back at
  // 15: 3 s restart, then 82 s = 6 cycles of 12 and 10 s of work at the end.
  CHECK(j.lost_ns == 10 * kS);
  CHECK(j.checkpoint_ns == (1 + 6 * 2) * kS);
  CHECK(j.useful_ns == (6 * 10 + 10) * kS);
  CHECK(j.waiting_ns == 1 * kS);
  CHECK(j.total_ns() == cfg.horizon_ns);
}

TEST_CASE("availability: a static torus needs a contiguous block, OCS any healthy cubes") {
  // A ring of four cubes of one host; cubes 1 and 3 down in [15, 20): 0 and 2 are healthy but not adjacent.
  AvailabilityConfig cfg;
  cfg.grid = {4, 1, 1};
  cfg.hosts_per_cube = 1;
  cfg.slices = {CubeShape{1, 1, 2}};
  cfg.horizon_ns = 100 * kS;
  cfg.checkpoint_interval_ns = 10 * kS;
  const AvailabilityRunResult r = run_availability_trace(cfg, {{15 * kS, 1, false}, {15 * kS, 3, false}, {20 * kS, 1, true}, {20 * kS, 3, true}});
  CHECK(r.formable_ns[0][0] == 100 * kS);
  CHECK(r.formable_ns[0][1] == 95 * kS);
  // Both jobs start on cubes 0 and 1 and are cut at 15 (the 5 s since the checkpoint at 10
  // lost); OCS moves to cubes 0 and 2 at once, static waits for a block until 20.
  for (size_t f = 0; f < 2; ++f) CHECK(r.jobs[0][f].lost_ns == 5 * kS);
  CHECK(r.jobs[0][0].waiting_ns == 0);
  CHECK(r.jobs[0][0].useful_ns == 95 * kS);
  CHECK(r.jobs[0][1].waiting_ns == 5 * kS);
  CHECK(r.jobs[0][1].useful_ns == 90 * kS);
}

TEST_CASE("availability study: same seed gives identical results, another seed differs, CIs narrow with seeds") {
  const auto [m1, csv1] = run_text(kSmall);
  const auto [m2, csv2] = run_text(kSmall);
  CHECK(m1.dump() == m2.dump());
  CHECK(csv1 == csv2);
  const auto [m3, csv3] = run_text(kSmall, {"seed=6"});
  CHECK(csv3 != csv1);
  // The CSV: a header and one row per (availability, slice, fabric); the formula on OCS rows only.
  CHECK(csv1.rfind("availability,chips,cubes,shape,ocs,formable_mean,formable_ci95,goodput_mean,goodput_ci95,formula\n", 0) == 0);
  CHECK(std::count(csv1.begin(), csv1.end(), '\n') == 1 + 2 * 2 * 2);
  const Json& rows = m1["rows"];
  REQUIRE(rows.size() == 8);
  for (const Json& row : rows) {
    CAPTURE(row.dump());
    CHECK(row.contains("formula") == row["ocs"].get<bool>());
    const double parts = row["goodput_mean"].get<double>() + row["lost_fraction"].get<double>() + row["restart_fraction"].get<double>() +
                         row["checkpoint_fraction"].get<double>() + row["waiting_fraction"].get<double>();
    CHECK(parts == doctest::Approx(1.0).epsilon(1e-9));
  }
  // 2048 chips at 99.0%: OCS keeps the slice (formula ~1), static rarely finds a block.
  const Json& ocs = rows[2];
  const Json& stat = rows[3];
  REQUIRE(ocs["chips"] == 2048);
  CHECK(ocs["formable_mean"].get<double>() > 0.99);
  CHECK(stat["formable_mean"].get<double>() < 0.3);
  CHECK(ocs["goodput_mean"].get<double>() > 3 * stat["goodput_mean"].get<double>());
  // Four times the seeds: the 95% interval of a noisy figure narrows (about 1/2 from √n, and t falls from 3.18 to 2.13).
  const auto [m16, csv16] = run_text(kSmall, {"seeds=16"});
  const double ci4 = stat["formable_ci95"].get<double>(), ci16 = m16["rows"][3]["formable_ci95"].get<double>();
  CAPTURE(ci4);
  CAPTURE(ci16);
  CHECK(ci4 > 0);
  CHECK(ci16 < 0.6 * ci4);
}

TEST_CASE("availability study: a century-long horizon accumulates without overflow") {
  // 99 years of 64 cubes is 2e20 cube-ns, past int64: the measured healthy fraction must still be A^16.
  const auto [m, csv] = run_text("study: availability\nhorizon: 36000d\nseeds: 2\navailabilities: [0.999]\nrepair: {mean: 2400h}\nslices: [4096]\n");
  const double want = std::pow(0.999, 16), got = m["levels"][0]["healthy_cube_fraction"].get<double>();
  CHECK(got == doctest::Approx(want).epsilon(0.01));
  for (const Json& row : m["rows"]) {
    CHECK(row["formable_mean"].get<double>() >= 0);
    CHECK(row["formable_mean"].get<double>() <= 1);
  }
}

TEST_CASE("availability study: bad input fails with the key and the valid range") {
  CHECK(config_error("study: availability\navailabilities: [0.99, 1.0]\n").find("availabilities[1]") != std::string::npos);
  CHECK(config_error("study: availability\navailabilities: [0.99, 1.0]\n").find("(0, 1)") != std::string::npos);
  CHECK(config_error("study: availability\nslices: [100]\n").find("slices[0]") != std::string::npos);
  CHECK(config_error("study: availability\nslices: [[4, 4, 6]]\n").find("slices[0][2]") != std::string::npos);
  CHECK(config_error("study: availability\npod: {cubes: [2, 2, 2]}\nslices: [4096]\n").find("does not fit the pod") != std::string::npos);
  CHECK(config_error("study: availability\nlifetime: {dist: exponential, mean: 1000h}\n").find("lifetime.mean") != std::string::npos);
  CHECK(config_error("study: availability\nseeds: 1\n").find("seeds") != std::string::npos);
  CHECK(config_error("study: availability\npod: {cubes: [8, 4, 4]}\n").find("at most 64 cubes") != std::string::npos);
  // Absurd sizes are refused before anything is drawn.
  const std::string huge = config_error("study: availability\nhorizon: 3650d\nseeds: 1000\nrepair: {mean: 1h}\n");
  CHECK(huge.find("horizon") != std::string::npos);
  CHECK(huge.find("at most") != std::string::npos);
  CHECK(config_error("study: availability\nrepair: {dist: lognormal}\n") == "");  // the default mean
  CHECK(config_error(kSmall) == "");
}

TEST_CASE("availability study: its keys reach the run: pod, horizon, warmup, seeds, job, repair and lifetime") {
  const auto [m, csv] = run_text(R"(study: availability
seed: 3
pod: {cube_edge: 2, hosts_per_cube: 8}
horizon: 100d
warmup: 5d
seeds: 3
availabilities: [0.99]
slices: [8, [4, 4, 8]]
repair: {dist: lognormal, mean: 12h, sigma: 0.3}
lifetime: {dist: weibull, shape: 2}
job: {checkpoint_interval: 2h, checkpoint_cost: 2min, restart: 20min}
)");
  CHECK(m["pod"]["chips"] == 64 * 8);  // 2x2x2 chips a cube
  CHECK(m["pod"]["hosts"] == 64 * 8);
  CHECK(m["pod"]["hosts_per_cube"] == 8);
  CHECK(m["horizon_days"].get<double>() == doctest::Approx(100));
  CHECK(m["warmup_days"].get<double>() == doctest::Approx(5));
  CHECK(m["seeds"] == 3);
  CHECK(m["job"]["checkpoint_interval_s"].get<double>() == doctest::Approx(7200));
  CHECK(m["job"]["checkpoint_cost_s"].get<double>() == doctest::Approx(120));
  CHECK(m["job"]["restart_s"].get<double>() == doctest::Approx(1200));
  CHECK(m["failures"]["mttr_h"].get<double>() == doctest::Approx(12));
  CHECK(m["failures"]["repair"].get<std::string>().find("lognormal") != std::string::npos);
  CHECK(m["failures"]["repair"].get<std::string>().find("sigma 0.3") != std::string::npos);
  CHECK(m["failures"]["lifetime"] == "Weibull k=2");
  REQUIRE(m["rows"].size() == 4);
  CHECK(m["rows"][0]["chips"] == 8);
  CHECK(m["rows"][2]["chips"] == 128);
  CHECK(m["rows"][2]["shape"] == "4x4x8");
}
