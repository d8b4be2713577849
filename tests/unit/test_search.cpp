// `sluice search` (run/search.h): it finds the optimum of a small space that is simulated
// exhaustively point by point, its Pareto front is exactly the undominated feasible points,
// pruning by the roofline bound never drops a point that meets the SLO, and a space with no
// answer says which constraint excluded what.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "test_support.h"
#include "run/search.h"

using namespace sluice;
using sluice::testing::registry;
using sluice::testing::run_text;

namespace {

namespace fs = std::filesystem;

const std::string kBase =
    sluice::testing::llama3_8b_on_h200("st", 200, "{kind: poisson, rate: 20/s}") + "outputs: {trace: false, requests_csv: false, timeseries: false}\n";

struct Tmp {
  fs::path dir = fs::temp_directory_path() / ("sluice-search-" + std::to_string(::getpid()));
  Tmp() { fs::create_directories(dir); }
  ~Tmp() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

SearchOutcome search(const Tmp& t, const std::string& block, const std::string& tag, bool prune = true) {
  const fs::path file = t.dir / (tag + ".yaml");
  std::ofstream(file) << kBase << block;
  SearchOptions o;
  o.out_dir = (t.dir / tag).string();
  o.threads = 2;
  o.prune = prune;
  return run_search(load_search_file(file.string()), file.string(), registry(), o);
}

const std::string kSpace = R"(search:
  grid:
    deployment.tensor_parallel: [1, 2, 4]
    deployment.replicas: [1, 2, 3]
)";

// A lower bound the pruning uses against the fastest request each run simulates (its `stat`'s min).
void bound_below_every_run(double (*bound)(const Params&, const Registry&), const char* stat,
                           const std::vector<std::vector<std::string>>& cases) {
  for (const auto& sets : cases) {
    std::string label;
    for (const auto& x : sets) label += x + " ";
    CAPTURE(label);
    const Scenario sc = load_scenario_text(kBase, "t.yaml", sets, registry());
    const double lb = bound(*sc.params, registry());
    const Json m = run_text(kBase, sets);
    CHECK(lb > 0);
    CHECK(lb <= m["serving"]["latency_ms"][stat]["min"].get<double>());
  }
}

}  // namespace

TEST_CASE("search: the cheapest point meeting the SLO is the one every point simulated alone gives, and the front is the undominated") {
  Tmp t;
  const SearchOutcome s = search(t, kSpace + "  slo: ['ttft.p99<100ms', 'tpot.p99<8ms']\n", "opt");
  REQUIRE(s.rows.size() == 9);
  // Each point alone, by run_text: its cost, its SLO figures.
  double best_cost = INFINITY;
  size_t best = 99, feasible = 0;
  for (const auto& r : s.rows) {
    std::vector<std::string> sets;
    for (const auto& [k, v] : r.values) sets.push_back(k + "=" + v);
    sets.push_back("seed=" + std::to_string(r.seed));
    const std::string yaml = kBase;
    if (r.status == SearchRow::Status::Invalid) {
      CHECK_THROWS_AS(run_text(yaml, sets), ConfigError);
      continue;
    }
    const Json m = run_text(yaml, sets);
    const Json& sv = m["serving"];
    const bool meets = sv["latency_ms"]["ttft"]["p99"].get<double>() < 100 && sv["latency_ms"]["tpot"]["p99"].get<double>() < 8;
    CAPTURE(r.point);
    CHECK(meets == (r.status == SearchRow::Status::Feasible));
    const double cost = sv["cost"]["usd_per_million_output_tokens"].get<double>();
    CHECK(r.objectives.at(0) == doctest::Approx(cost).epsilon(1e-12));
    if (meets) {
      ++feasible;
      if (cost < best_cost) best_cost = cost, best = r.point;
    }
  }
  REQUIRE(feasible >= 2);  // a space with a choice in it
  REQUIRE(s.best >= 0);
  CHECK(s.rows[static_cast<size_t>(s.best)].point == best);
  // The front: a feasible point is on it exactly when no other feasible point is at least as
  // good on every objective and better on one (all three objectives are lowered).
  for (const auto& a : s.rows) {
    if (a.status != SearchRow::Status::Feasible) {
      CHECK_FALSE(a.pareto);
      continue;
    }
    bool dominated = false;
    for (const auto& b : s.rows) {
      if (&a == &b || b.status != SearchRow::Status::Feasible) continue;
      bool all = true, one = false;
      for (size_t k = 0; k < a.objectives.size(); ++k) {
        all &= b.objectives[k] <= a.objectives[k];
        one |= b.objectives[k] < a.objectives[k];
      }
      dominated |= all && one;
    }
    CAPTURE(a.point);
    CHECK(a.pareto == !dominated);
  }
  CHECK(s.rows[static_cast<size_t>(s.best)].pareto);
  CHECK(s.json["best"].get<size_t>() == best);
}

TEST_CASE("search: the roofline bound prunes only points that miss the SLO when simulated, and the best stays the best") {
  Tmp t;
  // An L40S reads Llama-3-8B's 7.5 G non-embedding bf16 weights at 864 GB/s: no step under 17 ms
  // at TP 1, so 'tpot.p99<12ms' excludes it before it runs, while an H200 (3.1 ms at TP 1) runs;
  // the L40S has no scale-up links, so its TP 2 and 4 do not build.
  const std::string block = R"(search:
  zip: {hardware: [h200, l40s]}
  grid: {deployment.tensor_parallel: [1, 2, 4]}
  slo: ['tpot.p99<12ms', 'ttft.p99<1s']
)";
  const SearchOutcome pruned = search(t, block, "pruned");
  const SearchOutcome all = search(t, block, "all", false);
  size_t bound = 0, feasible = 0;
  for (size_t i = 0; i < pruned.rows.size(); ++i) {
    CAPTURE(i);
    const SearchRow& r = pruned.rows[i];
    feasible += r.status == SearchRow::Status::Feasible;
    if (r.status != SearchRow::Status::Bound) continue;
    ++bound;
    CHECK(r.why.find("17.4 ms") != std::string::npos);
    CHECK(all.rows[i].status == SearchRow::Status::Infeasible);  // simulated, it misses too
  }
  CHECK(bound == 1);
  CHECK(feasible >= 1);
  REQUIRE(pruned.best >= 0);
  CHECK(pruned.best == all.best);
  CHECK(pruned.json["pruned_lower_bound"].get<int>() == 1);
  CHECK(all.json["pruned_lower_bound"].get<int>() == 0);
  // Nothing meets an SLO tighter than any point's bound: the search says what excluded what.
  const SearchOutcome none = search(t, kSpace + "  slo: ['tpot.p99<0.5ms']\n", "none");
  CHECK(none.best == -1);
  const std::string& why = none.summary.back();
  CHECK(why.find("no configuration meets tpot.p99<0.5ms") != std::string::npos);
  CHECK(why.find("8 excluded by a lower bound (TPOT, TTFT)") != std::string::npos);
}

TEST_CASE("search: the TPOT bound is below every simulated TPOT, across precisions, parallelism and experts") {
  // The bound the pruning uses against the fastest token gap each run simulates.
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"deployment.tensor_parallel=2"},
      {"deployment.tensor_parallel=4", "deployment.precision=fp8"},
      {"deployment.pipeline_parallel=2"},
      {"hardware=b200", "deployment.precision=fp4"},
      {"model=mixtral-8x7b", "deployment.tensor_parallel=2", "deployment.moe.expert_parallel=true"},
      {"deployment.prefill_replicas=1", "deployment.replicas=2"},
  };
  bound_below_every_run(tpot_lower_bound_ms, "tpot", cases);
}

TEST_CASE("search: a malformed search block is refused at its key before anything runs") {
  Tmp t;
  auto refused = [&](const std::string& block, const std::string& expect) {
    std::string msg;
    try {
      search(t, block, "bad");
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find(expect) != std::string::npos);
  };
  refused(kSpace, "search.slo");                                                  // no SLO
  refused("search: {slo: ['tpot.p99<3ms']}\n", "no space");                       // no axes
  refused(kSpace + "  slo: ['tpot.p99<3ms']\n  budgets: 3\n", "search.budgets");  // unknown key
  refused(kSpace + "  slo: ['tpot.p99<3ms']\n  budget: -3\n", "not a positive amount");
  refused(kSpace + "  slo: ['tpot.p99<3ms']\n  budget: 2.5X\n", "e.g. 2500000, 2.5M or 800k");
  // An objective that needs power figures on a device that has none is named before anything runs.
  refused("search:\n  zip: {hardware: ['{catalog: h200, tdp: 0W, idle_power: 0W, memory_bound_power: 0W}']}\n  slo: ['tpot.p99<30ms']\n",
          "has no power figures (tdp, idle_power, memory_bound_power)");
  refused("search:\n  zip: {hardware: ['{catalog: h200, price_usd: 0}']}\n  slo: ['tpot.p99<30ms']\n  objectives: [min:serving.latency_ms.ttft.p99]\n  budget: 1M\n",
          "has no price (price_usd)");
  refused(kSpace + "  slo: ['tpot.p99 3ms']\n", "METRIC OP VALUE");               // malformed constraint
  refused(kSpace + "  slo: ['tpot.p99<3ms']\n  objectives: ['fastest:ttft.p99']\n", "unknown direction");
  refused("search:\n  grid: {deployment.tensor_parallel: [1, 2]}\n  zip: {deployment.replicas: [1, 2], seed: [1]}\n  slo: ['tpot.p99<3ms']\n",
          "lockstep");
}

TEST_CASE("search: the TTFT bound is below every simulated TTFT, and prunes only points that miss when simulated") {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"deployment.tensor_parallel=4"},
      {"deployment.precision=fp8", "deployment.tensor_parallel=2"},
      {"deployment.pipeline_parallel=2"},
      {"hardware=b200", "deployment.precision=fp4"},
      {"model=mixtral-8x7b", "deployment.tensor_parallel=2", "deployment.moe.expert_parallel=true"},
      {"deployment.prefill_replicas=1", "deployment.replicas=2"},
      {"workload.shared_prefix={tokens: 400}"},
      {"workload.conversation={turns: 3}"},
  };
  bound_below_every_run(ttft_lower_bound_ms, "ttft", cases);
  // Llama-3-8B's 512-token prompts on an H200: 2 x its 6.5 G active non-embedding weights x 512 tokens at 989 TFLOP/s is
  // 6.75 ms at TP 1, 3.4 ms at TP 2: 'ttft.p99<5ms' excludes TP 1 before it runs.
  Tmp t;
  const std::string block = "search:\n  grid: {deployment.tensor_parallel: [1, 2, 4]}\n  slo: ['ttft.p99<5ms']\n";
  const SearchOutcome pruned = search(t, block, "ttft");
  const SearchOutcome all = search(t, block, "ttft-all", false);
  REQUIRE(pruned.rows.size() == 3);
  CHECK(pruned.rows[0].status == SearchRow::Status::Bound);
  CAPTURE(pruned.rows[0].why);
  CHECK(pruned.rows[0].why.find("no first token can be faster than 6.75 ms") != std::string::npos);
  for (size_t i = 0; i < pruned.rows.size(); ++i)
    if (pruned.rows[i].status == SearchRow::Status::Bound) CHECK(all.rows[i].status == SearchRow::Status::Infeasible);
}

TEST_CASE("search: a budget prunes what costs more before it runs, and the best is the best within it") {
  Tmp t;
  // 32,000 USD an H200: a budget of 100k holds at most 3 devices (tp x replicas <= 3).
  const SearchOutcome s = search(t, kSpace + "  slo: ['tpot.p99<30ms']\n  budget: $100k\n", "budget");
  const SearchOutcome free = search(t, kSpace + "  slo: ['tpot.p99<30ms']\n", "free");
  size_t over = 0;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    const SearchRow& r = s.rows[i];
    int devices = 1;
    for (const auto& [k, v] : r.values) devices *= std::stoi(v);
    CAPTURE(i);
    if (r.status == SearchRow::Status::Invalid) continue;  // TP 4 x 3 replicas: more GPUs than the server has
    CHECK((r.status == SearchRow::Status::Budget) == (devices * 32000 > 100000));
    over += r.status == SearchRow::Status::Budget;
    if (r.status == SearchRow::Status::Budget) CHECK(r.why.find("more than $0.1M") != std::string::npos);
  }
  CHECK(over == 4);
  CHECK(s.json["pruned_over_budget"].get<int>() == 4);
  CHECK(s.json["budget_usd"].get<double>() == 100000);
  REQUIRE(s.best >= 0);
  // The best within budget is the cheapest of the affordable points the unbounded search simulated.
  double cheapest = INFINITY;
  for (size_t i = 0; i < free.rows.size(); ++i)
    if (s.rows[i].status != SearchRow::Status::Budget && free.rows[i].status == SearchRow::Status::Feasible)
      cheapest = std::min(cheapest, free.rows[i].objectives[0]);
  CHECK(s.rows[static_cast<size_t>(s.best)].objectives[0] == cheapest);
  // Nothing affordable: the search says the budget excluded them.
  const SearchOutcome none = search(t, kSpace + "  slo: ['tpot.p99<30ms']\n  budget: 10k\n", "broke");
  CHECK(none.best == -1);
  CHECK(none.summary.back().find("8 over the budget") != std::string::npos);
}
