// The pod job stream (workloads/cluster/): real training jobs placed by PodAllocator, their
// iteration time from a world run on the slice they got, and the end-of-run invariants.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "config/error.h"
#include "engine/rng.h"
#include "hardware/spec.h"
#include "test_support.h"
#include "workloads/cluster/pod_stream.h"
#include "workloads/training/training.h"

using namespace sluice;
using namespace sluice::cluster;
using sluice::net::CubeShape;
using sluice::testing::run_text;

namespace {

constexpr int64_t kS = 1'000'000'000;

// A pod-scheduling scenario with one training job class (no failures unless asked).
std::string pod_scenario(const std::string& job_class, const std::string& variants, const std::string& extra = "") {
  return fmt::format(
      "study: pod-scheduling\nseed: 3\npod: {{cubes: [4, 4, 4]}}\njobs:\n  rate: 2/h\n  horizon: 48h\n  measure_iterations: 2\n"
      "  shapes:\n    - {}\nvariants: {}\n{}",
      job_class, variants, extra);
}

std::string config_error(const std::string& yaml) {
  try {
    (void)run_text(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

const Json& geometry(const Json& m, const std::string& starts_with) {
  for (const auto& g : m["geometries"])
    if (g["geometry"].get<std::string>().rfind(starts_with, 0) == 0) return g;
  FAIL("no geometry " << starts_with << " in " << m["geometries"].dump());
  static Json none;
  return none;
}

}  // namespace

TEST_CASE("pod stream: a job of N iterations finishes at start + N x iteration time, the next waits for it") {
  // Two whole-pod jobs on a static pod (no reconfiguration): A arrives at 10 s and runs 100
  // iterations of 1.5 s, so it ends at 10 + 150 = 160 s; B arrives at 20 s and starts then.
  PodRunConfig c;
  c.ocs = false;
  c.horizon_ns = 1000 * kS;
  c.classes = 1;
  int64_t asked = 0;
  c.iteration_ns = [&](int k, uint64_t mask) {
    CHECK(k == 0);
    CHECK(mask == ~uint64_t{0});
    ++asked;
    return int64_t{1'500'000'000};
  };
  std::vector<PodJob> jobs{PodJob{.arrival_ns = 10 * kS, .shape = {4, 4, 4}, .job_class = 0, .duration_ns = 0, .iterations = 100},
                           PodJob{.arrival_ns = 20 * kS, .shape = {4, 4, 4}, .job_class = 0, .duration_ns = 0, .iterations = 100}};
  const PodRunResult r = run_pod(c, jobs, 1);
  CHECK(asked == 2);
  CHECK(r.completed == 2);
  REQUIRE(r.queue_delay_ns.size() == 2);
  CHECK(r.queue_delay_ns[0] == 0);
  CHECK(r.queue_delay_ns[1] == 140 * kS);  // 160 s - 20 s
  // Busy: 64 cubes from 10 s to 310 s (A, then B from 160 s to 310 s).
  CHECK(r.busy_cube_ns == 64 * 300 * kS);
  CHECK(r.utilization == doctest::Approx(0.3));
  CHECK(r.classes[0].iterations_done == 200);
  CHECK(r.classes[0].lost_ns == 0);
  // With OCS the slice starts after its reconfiguration (1 s): A ends at 161 s.
  c.ocs = true;
  c.reconfig_ns = kS;
  const PodRunResult o = run_pod(c, jobs, 1);
  CHECK(o.queue_delay_ns[1] == 141 * kS);
  // Cut at 85 s: A has done (85 - 10) / 1.5 = 50 iterations, B none.
  c.ocs = false;
  c.horizon_ns = 85 * kS;
  const PodRunResult h = run_pod(c, jobs, 1);
  CHECK(h.completed == 0);
  CHECK(h.classes[0].iterations_done == 50);
}

TEST_CASE("pod stream: an interrupted training job redoes the restart penalty and counts it as lost work") {
  // One 8-cube job, hosts failing rarely but surely within a long horizon.
  PodRunConfig c;
  c.ocs = true;
  c.horizon_ns = 2000LL * 3600 * kS;
  c.host_mtbf_ns = 500LL * 3600 * kS;
  c.host_repair_ns = 12LL * 3600 * kS;
  c.restart_penalty_ns = 1800 * kS;
  c.iteration_ns = [](int, uint64_t) { return int64_t{2'000'000'000}; };
  std::vector<PodJob> jobs{PodJob{.arrival_ns = 0, .shape = {2, 2, 2}, .job_class = 0, .duration_ns = 0, .iterations = 10'000'000}};
  const PodRunResult r = run_pod(c, jobs, 4);
  REQUIRE(r.classes[0].interruptions > 0);
  CHECK(r.classes[0].lost_ns == r.classes[0].interruptions * 1800 * kS);
  CHECK(r.classes[0].lost_iterations == doctest::Approx(r.classes[0].interruptions * 900.0));
  CHECK(r.classes[0].iterations_done > 0);
  CHECK(r.classes[0].iterations_done < 10'000'000);
}

TEST_CASE("pod stream: a job stream places better with OCS, deterministically, within its invariants") {
  std::vector<PodJob> jobs;
  RngStream rng(3, "test.jobs");
  double t = 0;
  const CubeShape shapes[] = {{1, 1, 1}, {1, 1, 2}, {1, 2, 2}, {2, 2, 2}, {2, 2, 4}};
  for (int i = 0; i < 400; ++i) {
    t += rng.exponential(3600.0 / 2);
    PodJob j;
    j.arrival_ns = static_cast<int64_t>(t * 1e9);
    j.shape = shapes[rng.below(5)];
    j.duration_ns = static_cast<int64_t>(rng.exponential(6 * 3600.0) * 1e9);
    jobs.push_back(j);
  }
  PodRunConfig c;
  c.horizon_ns = 240LL * 3600 * kS;
  c.host_mtbf_ns = 2000LL * 3600 * kS;
  c.host_repair_ns = 12LL * 3600 * kS;
  c.probes = {CubeShape{2, 4, 4}, CubeShape{1, 1, 1}};
  c.ocs = true;
  const auto a = run_pod(c, jobs, 5);
  const auto a2 = run_pod(c, jobs, 5);
  c.ocs = false;
  const auto s = run_pod(c, jobs, 5);
  CHECK(a.utilization == a2.utilization);
  CHECK(a.queue_delay_ns == a2.queue_delay_ns);
  CHECK(a.utilization >= s.utilization);
  CHECK(a.fragmentation == 0);
  CHECK(s.fragmentation > 0);
  CHECK(a.probe_availability[0] >= s.probe_availability[0]);
  CHECK(a.probe_availability[1] <= 1.0);
  CHECK(a.host_failures == s.host_failures);  // the same failure process for both
  CHECK(a.started > 0);
  for (const auto* r : {&a, &s}) {
    for (int64_t q : r->queue_delay_ns) CHECK(q >= 0);
    CHECK_NOTHROW(check_pod_invariants(*r));
  }
}

TEST_CASE("pod invariants: a purpose-built bad state is caught, naming the invariant") {
  PodRunResult good;
  good.cubes = 64;
  good.horizon_ns = 100 * kS;
  good.busy_cube_ns = 64 * 100 * kS;
  good.utilization = 1.0;
  good.probe_ns = {100 * kS};
  good.probe_availability = {1.0};
  good.queue_delay_ns = {0, 5};
  CHECK_NOTHROW(check_pod_invariants(good));
  auto message = [](const PodRunResult& r) {
    try {
      check_pod_invariants(r);
    } catch (const std::logic_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  PodRunResult bad = good;
  bad.probe_availability = {1.0000000000000002};  // what the old floating-point sums printed
  CHECK(message(bad).find("probe 0 availability in [0, 1]") != std::string::npos);
  bad = good;
  bad.busy_cube_ns += 1;
  CHECK(message(bad).find("busy cube-time within capacity") != std::string::npos);
  bad = good;
  bad.queue_delay_ns.push_back(-1);
  CHECK(message(bad).find("queue delay >= 0") != std::string::npos);
  bad = good;
  bad.utilization = -0.01;
  CHECK(message(bad).find("utilization in [0, 1]") != std::string::npos);
  bad = good;
  bad.jobs = 1;
  bad.started = 1;
  bad.classes.resize(1);
  CHECK(message(bad).find("per-class counts add up") != std::string::npos);
}

TEST_CASE("pod-scheduling: a static block that does not wrap trains a DP-heavy job slower than its OCS torus") {
  // GPT-3 1.3B, pure data parallel over a 4x4x8 slice: the DP all-reduce rings close through
  // the slice. With OCS the slice is its own torus; on the static 16x16x16 torus a 4x4x8 block
  // has no wrap-around in any dimension.
  const Json m = run_text(pod_scenario("{shape: [4, 4, 8], model: gpt3-1b, parallel: {tp: 1, pp: 1, dp: 128, micro_batches: 1}, iterations: 500}",
                                       "[{ocs: true}, {ocs: false}]"));
  const double ocs = geometry(m, "ocs 4x4x8")["iteration_s"].get<double>();
  const Json& st = geometry(m, "static ");
  CAPTURE(m["geometries"].dump());
  CHECK(st["geometry"].get<std::string>().find("no wrap") != std::string::npos);
  CHECK(st["iteration_s"].get<double>() > ocs);
  // Per class and variant: the jobs ran at their slices' rates.
  const Json& v0 = m["variants"][0]["classes"][0];
  CHECK(v0["iteration_s"].get<double>() == doctest::Approx(ocs));
  CHECK(v0["iterations_per_s"].get<double>() == doctest::Approx(1 / ocs));
  CHECK(v0["tokens_per_s"].get<double>() == doctest::Approx(128 * 2048 / ocs));
  CHECK(v0["mfu"].get<double>() > 0);
  CHECK(v0["mfu"].get<double>() < 1);
  CHECK(v0["completed"].get<long>() > 0);
  CHECK(v0["iterations_completed"].get<long>() > 0);
}

TEST_CASE("pod-scheduling: the cached iteration time is a world run of that job on that slice") {
  const std::string job = "model: gpt3-13b, parallel: {tp: 4, pp: 4, dp: 8, micro_batches: 4}";
  for (const bool ocs : {true, false}) {
    CAPTURE(ocs);
    const Json m = run_text(pod_scenario(fmt::format("{{shape: [4, 4, 8], {}, iterations: 200}}", job),
                                         fmt::format("[{{ocs: {}}}]", ocs ? "true" : "false")));
    REQUIRE(m["geometries"].size() >= 1);
    const Json& g = m["geometries"][0];
    // The same job in a world on the same pod, placed by `place: {slice: ...}` (first-fit:
    // with OCS the first cubes, static the block at cube 0, the canonical placements).
    const Json w = run_text(fmt::format(
        "cluster: {{topology: {{catalog: tpu-v4-pod-{}, cubes: [4, 4, 4]}}, hardware: tpu-v4}}\n"
        "workloads:\n  - {{name: j, kind: training, {}, iterations: 2, place: {{slice: [{}]}}}}\n",
        ocs ? "ocs" : "static", job, g["geometry"].get<std::string>().find("4x4x8") != std::string::npos ? "4, 4, 8" : "8, 4, 4"));
    CAPTURE(g.dump());
    REQUIRE(w["training"].contains("iteration_s_mean"));
    CHECK(g["iteration_s"].get<double>() == doctest::Approx(w["training"]["iteration_s_mean"].get<double>()).epsilon(1e-9));
  }
}

TEST_CASE("pod-scheduling: a parallelism that does not match the slice, or does not fit memory, is refused before the run") {
  const std::string wrong = config_error(pod_scenario(
      "{shape: [4, 4, 8], model: gpt3-13b, parallel: {tp: 4, pp: 4, dp: 4}, iterations: 100}", "[{ocs: true}]"));
  CAPTURE(wrong);
  CHECK(wrong.find("jobs.shapes[0].parallel") != std::string::npos);
  CHECK(wrong.find("tp 4 x pp 4 x dp 4 = 64 chips, but the slice 4x4x8 has 128") != std::string::npos);
  const std::string big = config_error(pod_scenario(
      "{shape: [4, 4, 4], model: gpt3-175b, parallel: {tp: 4, pp: 4, dp: 4}, iterations: 100}", "[{ocs: true}]"));
  CAPTURE(big);
  CHECK(big.find("gpt3-175b with tp 4 x pp 4 x dp 4 does not fit") != std::string::npos);
  CHECK(big.find("GiB") != std::string::npos);
  const std::string size = config_error(pod_scenario("{shape: [4, 4, 4], model: gpt3-1b, parallel: {dp: 64}}", "[{ocs: true}]"));
  CHECK(size.find("needs its size") != std::string::npos);
  const std::string both = config_error(pod_scenario("{shape: [4, 4, 4], model: gpt3-1b, parallel: {dp: 64}, iterations: 5, tokens: 1e9}", "[{ocs: true}]"));
  CHECK(both.find("both iterations and tokens") != std::string::npos);
  const std::string nomodel = config_error(pod_scenario("{shape: [4, 4, 4], iterations: 5}", "[{ocs: true}]"));
  CHECK(nomodel.find("needs a model") != std::string::npos);
}

TEST_CASE("pod-scheduling: the same seed gives the same figures, tokens size a job like iterations") {
  const std::string cls = "{shape: [4, 4, 4], model: gpt3-1b, parallel: {dp: 64, micro_batches: 1}, tokens: 1.31072e9}";  // 10000 iterations of 131072 tokens
  const std::string its = "{shape: [4, 4, 4], model: gpt3-1b, parallel: {dp: 64, micro_batches: 1}, iterations: 10000}";
  const std::string vars = "[{ocs: true}, {ocs: false, placement: best-fit}]";
  const std::string fail = "failures: {host_mtbf: 500h, host_repair: 12h}\n";
  const Json a = run_text(pod_scenario(cls, vars, fail));
  const Json b = run_text(pod_scenario(cls, vars, fail));
  const Json c = run_text(pod_scenario(its, vars, fail));
  CHECK(a.dump() == b.dump());
  CHECK(a["variants"].dump() == c["variants"].dump());
  CHECK(a["variants"][0]["classes"][0]["iterations_completed"].get<long>() > 0);
}

TEST_CASE("pod-scheduling: a slice of the same geometry elsewhere on the pod trains at the cached rate") {
  // Job b lands on other cubes than the canonical ones (job a holds cube 0). Static: the
  // same block extents on the shared torus give exactly the same time (dimension-order routes
  // are translation-invariant). OCS: the same torus, but equal-cost routes are chosen by a
  // hash of the node ids, so the time may differ slightly (measured: 0.015%).
  const std::string job = "model: gpt3-13b, parallel: {tp: 4, pp: 4, dp: 8, micro_batches: 4}";
  for (const bool ocs : {true, false}) {
    CAPTURE(ocs);
    const Json m = run_text(pod_scenario(fmt::format("{{shape: [4, 4, 8], {}, iterations: 200}}", job),
                                         fmt::format("[{{ocs: {}}}]", ocs ? "true" : "false")));
    const double cached = geometry(m, ocs ? "ocs 4x4x8" : "static 4x4x8")["iteration_s"].get<double>();
    const Json w = run_text(fmt::format(
        "cluster: {{topology: {{catalog: tpu-v4-pod-{}, cubes: [4, 4, 4]}}, hardware: tpu-v4}}\n"
        "workloads:\n"
        "  - {{name: a, kind: training, model: gpt3-1b, parallel: {{dp: 64, micro_batches: 1}}, iterations: 1, place: {{slice: [4, 4, 4]}}}}\n"
        "  - {{name: b, kind: training, {}, iterations: 2, place: {{slice: [4, 4, 8]}}}}\n",
        ocs ? "ocs" : "static", job));
    const double elsewhere = w["workloads"]["b"]["iteration_s_mean"].get<double>();
    if (ocs) CHECK(elsewhere == doctest::Approx(cached).epsilon(1e-3));
    else CHECK(elsewhere == doctest::Approx(cached).epsilon(1e-9));
  }
}

TEST_CASE("pod-scheduling: a training job class's keys reach its training config") {
  const Json m = run_text(
      "study: pod-scheduling\nseed: 3\npod: {cubes: [4, 4, 4]}\njobs:\n  rate: 200/h\n  horizon: 48h\n  measure_iterations: 1\n"
      "  shapes:\n"
      "    - {shape: [4, 4, 4], name: mine, weight: 3, model: gpt3-1b, sequence: 1024, recompute: true, iterations: 100,\n"
      "       parallel: {tp: 2, pp: 2, dp: 16, schedule: gpipe, micro_batches: 4, micro_batch_size: 2}}\n"
      "    - {shape: [4, 4, 4]}\n"
      "variants: [{ocs: true}]\n");
  CHECK(m["measure_iterations"] == 1);
  REQUIRE(m["geometries"].size() == 1);
  const Json& g = m["geometries"][0];
  CAPTURE(g.dump());
  CHECK(g["class"] == "mine");
  CHECK(g["tp"] == 2);
  CHECK(g["pp"] == 2);
  CHECK(g["dp"] == 16);
  CHECK(g["tokens_per_iteration"].get<double>() == 2.0 * 1024 * 4 * 16);  // micro_batch_size x sequence x micro_batches x dp
  // The memory of that configuration (gpipe holds every micro-batch, recompute keeps layer inputs only).
  training::TrainingConfig c;
  c.model = load_model("gpt3-1b");
  c.hardware = load_hardware("tpu-v4");
  c.tp = 2, c.pp = 2, c.dp = 16, c.micro_batches = 4, c.micro_batch_size = 2, c.sequence = 1024;
  c.schedule = training::Schedule::GPipe;
  c.recompute = true;
  CHECK(g["memory_bytes"].get<double>() == doctest::Approx(training::training_memory(c).total()).epsilon(1e-12));
  c.recompute = false;
  CHECK(g["memory_bytes"].get<double>() < training::training_memory(c).total());
  // weight 3 against 1: three arrivals in four are of the training class.
  const Json& classes = m["variants"][0]["classes"];
  REQUIRE(classes.size() == 2);
  const double a = classes[0]["jobs"].get<double>(), b = classes[1]["jobs"].get<double>();
  CHECK(a / (a + b) == doctest::Approx(0.75).epsilon(0.03));
}

TEST_CASE("pod-scheduling: the study's keys reach the run: pod, jobs, failures, backfill and ocs_reconfig") {
  // Abstract jobs only (no world runs): one cube, or the whole pod.
  auto scenario = [](const std::string& extra, const std::string& jobs = "  duration_mean: 1h\n") {
    return "study: pod-scheduling\nseed: 4\npod: {cubes: [4, 4, 4], cube_edge: 2, hosts_per_cube: 4}\n"
           "jobs:\n  rate: 30/h\n  horizon: 100h\n" + jobs +
           "  shapes:\n    - {shape: [2, 2, 2], weight: 9}\n    - {shape: [8, 8, 8]}\n"
           "variants: [{ocs: true}, {ocs: false}]\n" + extra;
  };
  const Json m = run_text(scenario("failures: {host_mtbf: 300h, host_repair: 20h, restart_penalty: 2h}\n"));
  CHECK(m["pod"]["chips"] == 64 * 8);  // cube_edge 2
  CHECK(m["pod"]["hosts"] == 64 * 4);
  CHECK(m["host_availability"].get<double>() == doctest::Approx(300.0 / 320));
  CHECK(m["jobs"].get<double>() == doctest::Approx(3000).epsilon(0.08));  // Poisson: rate x horizon
  bool interrupted = false;
  for (const Json& v : m["variants"])
    for (const Json& c : v["classes"]) {
      CAPTURE(c.dump());
      // Each interruption loses the restart penalty of slice time.
      CHECK(c["lost_slice_h"].get<double>() == doctest::Approx(2.0 * c["interruptions"].get<double>()));
      interrupted |= c["interruptions"].get<long>() > 0;
    }
  CHECK(interrupted);
  // A non-default value changes the run: each of these keys reaches the stream.
  const Json base = run_text(scenario(""));
  CHECK(run_text(scenario("backfill: false\n"))["variants"].dump() != base["variants"].dump());
  CHECK(run_text(scenario("", "  duration_mean: 1h\n  duration_sigma: 0\n"))["variants"].dump() != base["variants"].dump());
  CHECK(run_text(scenario("", "  duration_mean: 2h\n"))["variants"].dump() != base["variants"].dump());
  // ocs_reconfig delays OCS slices only.
  const Json slow = run_text(scenario("ocs_reconfig: 30min\n"));
  CHECK(slow["variants"][0].dump() != base["variants"][0].dump());
  CHECK(slow["variants"][1].dump() == base["variants"][1].dump());
}
