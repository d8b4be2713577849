// Group-limited routing (DeepSeek-V3's n_group/topk_group, "node-limited" when a group is a
// node's experts): a token's experts come from a few groups, so its dispatch reaches fewer
// devices and servers. Each figure by hand, then the catalog's model on a run, then bad input.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/error.h"
#include "hardware/cost_model.h"
#include "hardware/spec.h"

using namespace sluice;
using sluice::testing::round_device;
using sluice::testing::run_text;

namespace {

double binom(int n, int k) {
  double c = 1;
  for (int i = 0; i < k; ++i) c = c * (n - i) / (i + 1);
  return c;
}

CostOptions ep(int devices) {
  CostOptions o{devices, 1, ""};
  o.moe.expert_parallel = true;
  o.moe.alltoall = true;
  return o;
}

// One MoE layer of 8 experts (top-2, hidden 1024) in 4 groups of 2.
ModelSpec grouped_moe(int groups_per_token) {
  ModelSpec m = sluice::testing::tiny_moe(8);
  m.name = "grouped-moe";
  m.expert_groups = 4;
  m.groups_per_token = groups_per_token;
  return m;
}

}  // namespace

TEST_CASE("moe groups: one group a token, a group a device: every token's dispatch reaches exactly one device") {
  // 8 experts over 4 devices (2 each, a group each): with one group a token, both experts of a
  // token are on one device, so 256 tokens (64 a device) send 64 rows each, out and back.
  const CostModel one(round_device(), grouped_moe(1), ep(4));
  CHECK(one.moe_alltoall_bytes(256, 0) == doctest::Approx(64.0 * 1 * 1024 * 2 * 2).epsilon(1e-12));
  // All 4 groups a token is no limit: the ungrouped figure, 4 (1 - (3/4)^2) = 1.75 devices, to the bit.
  ModelSpec none = grouped_moe(4);
  const double all4 = CostModel(round_device(), none, ep(4)).moe_alltoall_bytes(256, 0);
  none.expert_groups = none.groups_per_token = 0;
  CHECK(all4 == CostModel(round_device(), none, ep(4)).moe_alltoall_bytes(256, 0));
  CHECK(all4 == doctest::Approx(64.0 * 1.75 * 1024 * 2 * 2));
  // Two groups of the four: each chosen group gives the token its best expert, so a token's two
  // experts are on the two devices of its two groups: 4 x 1/2 = 2 devices (1.5 if both picks
  // could land in one group).
  CHECK(CostModel(round_device(), grouped_moe(2), ep(4)).moe_alltoall_bytes(256, 0) == doctest::Approx(64.0 * 2 * 1024 * 2 * 2).epsilon(1e-12));
  // With 2 devices (2 groups each, a token's 2 groups drawn from the 4): a device holds none of
  // them with chance C(2,2)/C(4,2) = 1/6, and otherwise gets that group's expert.
  CHECK(CostModel(round_device(), grouped_moe(2), ep(2)).moe_alltoall_bytes(256, 0) ==
        doctest::Approx(128.0 * 2 * (5.0 / 6) * 1024 * 2 * 2).epsilon(1e-12));
}

TEST_CASE("moe groups: DeepSeek-V3's 4 of 8 groups reach fewer of 16 devices, and the server's share by the hypergeometric count") {
  const ModelSpec m = load_model("deepseek-v3");
  REQUIRE(m.expert_groups == 8);
  REQUIRE(m.groups_per_token == 4);
  const CostModel cm(load_hardware("h800"), m, ep(16));
  // A GPU holds 16 experts, half a group of 32: its group is among a token's 4 with chance 1/2;
  // the group's best expert is on it with 1/2, and each of the other 8 - 4 picks lands on it
  // with 16/128: 16 x (1/2)(1 - (1/2)(7/8)^4) = 5.66 devices a token, against
  // 16 (1 - (15/16)^8) = 6.45 without groups.
  const double device = 0.5 * (1 - 0.5 * std::pow(7.0 / 8, 4));
  ModelSpec ungrouped = m;
  ungrouped.expert_groups = ungrouped.groups_per_token = 0;
  const CostModel flat(load_hardware("h800"), ungrouped, ep(16));
  CHECK(cm.moe_alltoall_bytes(1600, 0) / flat.moe_alltoall_bytes(1600, 0) ==
        doctest::Approx(16 * device / (16 * (1 - std::pow(15.0 / 16, 8)))).epsilon(1e-12));
  // A server of 8 GPUs holds 4 whole groups: a token reaches it unless its 4 groups are the other
  // server's 4, C(4,4) / C(8,4) = 1/70 (hypergeometric).
  const std::vector<int> server{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(cm.moe_alltoall_server_share(server) == doctest::Approx((1 - 1 / binom(8, 4)) / (8 * device)).epsilon(1e-12));
  CHECK(cm.moe_alltoall_server_share(server) > flat.moe_alltoall_server_share(server));  // fewer devices, the server as likely
  // Rows per expert send a row an expert wherever it is: groups change nothing.
  CostOptions rows = ep(16);
  rows.moe.rows_per_expert = true;
  CHECK(CostModel(load_hardware("h800"), m, rows).moe_alltoall_bytes(1600, 0) ==
        CostModel(load_hardware("h800"), ungrouped, rows).moe_alltoall_bytes(1600, 0));
}

TEST_CASE("moe groups: under skewed routing a token's groups are drawn in proportion to the product of their shares") {
  // 6 experts in 3 groups of 2 (shares 0.5, 0.3, 0.2 by group), a device a group, 2 groups a
  // token and top-2: each chosen group gives one expert, so a token reaches exactly 2 devices,
  // device g when g is among its pair. Pairs by the product of their shares: {0,1} 0.15,
  // {0,2} 0.10, {1,2} 0.06.
  ModelSpec m = grouped_moe(2);
  m.experts = 6;
  m.expert_groups = 3;
  m.heads = m.kv_heads = 3;  // (tensor parallelism 3 splits the heads)
  CostOptions o = ep(3);
  o.moe.routing = MoeOptions::Routing::Measured;
  o.moe.expert_load = {25, 25, 15, 15, 10, 10};
  const CostModel cm(round_device(), m, o);
  const std::vector<double>& w = cm.moe_alltoall_weights();
  REQUIRE(w.size() == 3);
  const double pairs = 0.15 + 0.10 + 0.06;
  const double hit[3] = {(0.15 + 0.10) / pairs, (0.15 + 0.06) / pairs, (0.10 + 0.06) / pairs};
  for (int d = 0; d < 3; ++d) CHECK(w[static_cast<size_t>(d)] == doctest::Approx(hit[d] * 3 / 2).epsilon(1e-12));  // over the mean, 2/3
  CHECK(cm.moe_alltoall_bytes(300, 0) == doctest::Approx(100.0 * 2 * 1024 * 2 * 2).epsilon(1e-12));
  // Code-built models are checked too: more than 16 groups is refused, not overrun.
  m.experts = 64;
  m.expert_groups = 32;
  o.moe.routing = MoeOptions::Routing::Uniform;
  o.moe.expert_load.clear();
  CHECK_THROWS_AS(CostModel(round_device(), m, ep(4)), std::invalid_argument);
}

TEST_CASE("moe groups: a run reports the limit, and bad groups are refused at their key") {
  const std::string s = R"(name: t
cluster: {topology: {catalog: rail-optimized, servers: 2, nvlink_bandwidth: 200GB/s}, hardware: h800}
workloads:
  - name: d
    kind: serving
    model: deepseek-v3
    deployment: {tensor_parallel: 16, precision: fp8, moe: {expert_parallel: true, dispatch: alltoall}}
    workload: {kind: llmperf, requests: 4, input_tokens: {mean: 64, sd: 0}, output_tokens: {mean: 4, sd: 0}}
)";
  const Json j = run_text(s);
  CHECK(j["serving"]["moe"]["routing"].get<std::string>().find("group-limited: 4 of 8") != std::string::npos);
  CHECK(j["serving"]["requests"]["completed"] == 4);
  auto refused = [&](const char* model, const char* key) {
    CHECK_THROWS_WITH_AS(run_text(s, {fmt::format("workloads.0.model={}", model)}), doctest::Contains(key), ConfigError);
  };
  refused("{catalog: deepseek-v3, expert_groups: 7}", "expert_groups");                       // 7 does not divide 256
  refused("{catalog: deepseek-v3, groups_per_token: 9}", "groups_per_token");                 // more than the 8 groups
  refused("{catalog: deepseek-v3, expert_groups: 16, groups_per_token: 0}", "groups_per_token");  // none chosen
  refused("{catalog: mixtral-8x7b, expert_groups: 8, groups_per_token: 1}", "groups_per_token");  // 1 expert, and a token takes 2
  refused("{catalog: deepseek-v3, expert_groups: 32}", "expert_groups");                      // above 16
  refused("{catalog: llama3-8b, expert_groups: 2}", "expert_groups");                         // a dense model
}
