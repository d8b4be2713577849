// Data-parallel attention on a prefill pool (deployment.prefill_pool.data_parallel_attention):
// each prefill device prefills its own prompts whole and holds their KV cache until the copy,
// which leaves from it alone; the routed experts stay spread over the pool, reached by
// all-to-all. DeepSeek's prefill deployment, and the setting of DeepEP's normal kernels
// (scenarios/deepep-normal-ep16.yaml, three validation rows).
#include <doctest/doctest.h>

#include "test_support.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "config/error.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

// testing::kDeepSeekTwoServers with its prefill server at EP 8 under data-parallel attention (or
// tensor-parallel), prompts of 4,096 of the model's tokens and two-token answers, all at once.
Json pool_run(bool dp, int requests) {
  return run_text(testing::kDeepSeekTwoServers,
                  {fmt::format("workloads.0.deployment.prefill_pool={{tensor_parallel: 8, data_parallel_attention: {}}}", dp ? "true" : "false"),
                   "workloads.0.scheduler={kind: vllm, max_num_seqs: 64, max_num_batched_tokens: 262144}",
                   fmt::format("workloads.0.workload={{kind: llmperf, requests: {0}, input_tokens: {{mean: 4097, sd: 0}}, "
                               "output_tokens: {{mean: 2, sd: 0}}, tokenizer: llama3, arrival: {{kind: closed_loop, clients: {0}}}}}",
                               requests)})["serving"];
}
double ttft(const Json& s) { return s["latency_ms"]["ttft"]["mean"].get<double>(); }

}  // namespace

TEST_CASE("prefill dp attention: each device prefills its own prompts, dealt round-robin, in one pass") {
  const Json dp1 = pool_run(true, 1), dp2 = pool_run(true, 2), dp8 = pool_run(true, 8);
  const Json tp1 = pool_run(false, 1), tp2 = pool_run(false, 2), tp8 = pool_run(false, 8);
  for (const Json* s : {&dp1, &dp2, &dp8, &tp1, &tp2, &tp8}) CHECK((*s)["disaggregation"]["prefill"]["iterations"] == 1);
  CHECK(dp1["moe"]["prefill_data_parallel_attention"] == true);
  CHECK_FALSE(tp1["moe"].contains("prefill_data_parallel_attention"));
  // A second prompt goes to another device: the pass grows by the experts' and all-to-alls' part
  // alone (7% here), where tensor parallelism runs both prompts' attention and dense layers on
  // every device (1.8x).
  CHECK(ttft(dp2) / ttft(dp1) < 1.2);
  CHECK(ttft(tp2) / ttft(tp1) > 1.6);
  // One prompt alone: one device's whole attention against eight devices' eighths (2.4x); eight,
  // one a device: data-parallel attention is the faster (no all-reduces, each device its own).
  CHECK(ttft(dp1) > 2 * ttft(tp1));
  CHECK(ttft(dp8) < 0.7 * ttft(tp8));
  // Eight prompts, one a device: the same tokens cross the same all-to-alls either way (EP 8 over
  // the pool). One prompt: under tensor parallelism each device sends an eighth of its tokens'
  // rows, under data-parallel attention its one device sends them all, as eight prompts' devices
  // each do (the pass's all-to-all is sized by its busiest device).
  const auto a2a = [](const Json& s) { return s["moe"]["prefill_alltoall_us_per_layer"].get<double>(); };
  CHECK(a2a(dp8) == doctest::Approx(a2a(tp8)).epsilon(1e-9));
  CHECK(a2a(dp1) == doctest::Approx(a2a(dp8)).epsilon(1e-9));
  CHECK(a2a(tp1) < a2a(dp1) / 4);
  // Every device holds the attention and dense weights whole.
  CHECK(dp1["deployment"]["prefill_pool"]["weights_bytes_per_gpu"].get<double>() >
        tp1["deployment"]["prefill_pool"]["weights_bytes_per_gpu"].get<double>() + 5e9);
}

TEST_CASE("prefill dp attention: a prompt's KV copy leaves the one device that prefilled it") {
  // The same bytes, from one GPU's links instead of eight: the copy takes about four times as
  // long (the routes spread it over NVLink to other NICs, not eight-fold).
  const Json dp = pool_run(true, 1), tp = pool_run(false, 1);
  CHECK(dp["disaggregation"]["kv_transfer_bytes"].get<double>() == tp["disaggregation"]["kv_transfer_bytes"].get<double>());
  CHECK(dp["disaggregation"]["kv_transfer_ms"]["mean"].get<double>() > 3 * tp["disaggregation"]["kv_transfer_ms"]["mean"].get<double>());
  // Eight prompts prefilled on eight devices: eight copies at once, each from its own device (had
  // they all left one device, they would share its links: about eight times one copy).
  const Json dp8 = pool_run(true, 8);
  CHECK(dp8["disaggregation"]["kv_transfer_ms"]["mean"].get<double>() < 4 * dp["disaggregation"]["kv_transfer_ms"]["mean"].get<double>());
}

TEST_CASE("prefill dp attention: DeepEP's normal-kernel set-up crosses the network once a token and server, at line rate") {
  // scenarios/deepep-normal-ep16.yaml: 16 H800s prefill 16 prompts of 4,096 tokens, one a GPU,
  // EP 16 over two servers, hierarchical all-to-all. A GPU's 4,096 tokens cross once to the
  // other server when one of their 8 experts is there (1 - 2^-8 of them under sluice's uniform
  // routing), FP8 rows with their scales out and BF16 back, over its 50 GB/s NIC: the layer's
  // all-to-alls take at least that, and the NVLink forwarding beside it adds less than half.
  const std::string yaml = testing::slurp(std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/deepep-normal-ep16.yaml");
  const Json s = run_text(yaml)["serving"];
  CHECK(s["disaggregation"]["prefill"]["iterations"] == 1);
  CHECK(s["moe"]["prefill_data_parallel_attention"] == true);
  const double line = 4096 * (1 - std::pow(0.5, 8)) * 7168 * (1 + 4.0 / 128 + 2) / 50e9 * 1e6;  // us
  const double layer = s["moe"]["prefill_alltoall_us_per_layer"].get<double>();
  CHECK(layer > line);
  CHECK(layer < 1.5 * line);
  // The decode pool's own figure apart (two steps of 16 sequences).
  CHECK(s["moe"]["decode_alltoall_us_per_layer"].get<double>() < 0.01 * layer);
}

TEST_CASE("prefill dp attention: bad input is refused at its key before anything runs") {
  const auto with_pool = [](std::vector<std::string> sets) {
    sets.insert(sets.begin(), "workloads.0.deployment.prefill_pool={tensor_parallel: 8, data_parallel_attention: true}");
    return sets;
  };
  auto refused = [&](std::vector<std::string> sets, const char* why) {
    CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers, with_pool(sets)), doctest::Contains(why), ConfigError);
    CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers, with_pool(sets)), doctest::Contains("prefill_pool.data_parallel_attention"), ConfigError);
  };
  refused({"workloads.0.deployment.moe={expert_parallel: true, dispatch: allreduce}"}, "all-to-all");
  refused({"workloads.0.deployment.prefill_pool={tensor_parallel: 1, data_parallel_attention: true}"}, "there is one");
  refused({"workloads.0.model=llama3-8b", "workloads.0.deployment.moe=null", "workloads.0.deployment.precision=bf16"}, "dense");
  // false with the decode engines data-parallel: a prefill pool of its own, tensor-parallel (as
  // deepep-low-latency-ep16.yaml's), where without it the prefill engines would run the decode
  // engines' data-parallel attention and are refused, saying so.
  CHECK_NOTHROW(run_text(testing::kDeepSeekTwoServers, {"workloads.0.deployment.prefill_pool={data_parallel_attention: false}",
                                                        "workloads.0.deployment.moe.data_parallel_attention=true",
                                                        "workloads.0.workload.requests=8"}));
  CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers,
                                {"workloads.0.deployment.prefill_pool=null", "workloads.0.deployment.moe.data_parallel_attention=true"}),
                       doctest::Contains("prefill engines, with no deployment.prefill_pool of their own"), ConfigError);
  // Without a prefill pool of its own there is no key to give it.
  CHECK_THROWS_WITH_AS(run_text(testing::kDeepSeekTwoServers, with_pool({"workloads.0.deployment.prefill_replicas=0", "workloads.0.deployment.replicas=1"})),
                       doctest::Contains("prefill_pool"), ConfigError);
}

TEST_CASE("prefill dp attention: a chunking scheduler's token budget is shared out among the devices, each chunking its own prompts") {
  // SGLang's data-parallel attention runs a scheduler a device and divides chunked_prefill_size
  // among them. Eight prompts of 4,096 tokens, one a device: under sarathi's 1,024 tokens each
  // device chunks its own 128 a pass and every prompt ends in the 32nd pass; one budget for the
  // engine would have run them one after another on one device at a time (the last TTFT 1.8x the
  // first). vllm_chunked's 2,048: 256 a device, 16 passes.
  const auto run = [](const std::string& scheduler) {
    return run_text(testing::kDeepSeekTwoServers,
                    {"workloads.0.deployment.prefill_pool={tensor_parallel: 8, data_parallel_attention: true}",
                     "workloads.0.scheduler=" + scheduler,
                     "workloads.0.workload={kind: llmperf, requests: 8, input_tokens: {mean: 4097, sd: 0}, output_tokens: {mean: 2, sd: 0}, "
                     "tokenizer: llama3, arrival: {kind: closed_loop, clients: 8}}"})["serving"];
  };
  for (const auto& [scheduler, passes] : {std::pair<std::string, int>{"{kind: sarathi, token_budget: 1024, max_num_seqs: 64}", 32},
                                          {"{kind: vllm_chunked, max_num_batched_tokens: 2048, max_num_seqs: 64}", 16}}) {
    CAPTURE(scheduler);
    const Json s = run(scheduler);
    CHECK(s["disaggregation"]["prefill"]["iterations"] == passes);
    const Json& t = s["latency_ms"]["ttft"];
    CHECK(t["max"].get<double>() < 1.02 * t["min"].get<double>());
  }
}

TEST_CASE("data-parallel attention: a decode pool's token budget is a share a device") {
  // 24 sequences over a data-parallel decode pool of 8 devices, 3 each, under vllm_chunked: a
  // budget of 64 tokens (8 a device) decodes all of them every step; one of 20 is 2 a device (20 / 8,
  // as SGLang divides its budget), so a step carries 16, not the 20 one budget for the engine would
  // take, and the answers take about twice the steps. (An engine under data-parallel attention is
  // on the fabric, so its iterations are events: the steady-decode shortcut does not apply.)
  const auto run = [](int budget) {
    return run_text(testing::kDeepSeekTwoServers,
                    {"workloads.0.deployment.moe={expert_parallel: true, dispatch: alltoall, data_parallel_attention: true}",
                     "workloads.0.deployment.prefill_pool={tensor_parallel: 8, scheduler: {kind: vllm_chunked, max_num_batched_tokens: 8192}}",
                     fmt::format("workloads.0.scheduler={{kind: vllm_chunked, max_num_batched_tokens: {}, max_num_seqs: 64}}", budget),
                     "workloads.0.workload={kind: llmperf, requests: 24, input_tokens: {mean: 256, sd: 0}, output_tokens: {mean: 64, sd: 0}, "
                     "arrival: {kind: closed_loop, clients: 24}}"});
  };
  const Json wide = run(64), narrow = run(20);
  const Json &bw = wide["serving"]["batching"], &bn = narrow["serving"]["batching"];
  // (Each run's one prefill pass of 24 prompts counts in the mean batch.)
  const auto decode_mean = [](const Json& b) {
    return (b["mean_batch"].get<double>() * b["iterations"].get<double>() - 24) / b["decode_iterations"].get<double>();
  };
  CHECK(decode_mean(bw) > 23);
  CHECK(decode_mean(bn) <= 16.0);
  CHECK(decode_mean(bn) > 13);
  CHECK(bn["decode_iterations"].get<double>() > 1.8 * bw["decode_iterations"].get<double>());
}

TEST_CASE("prefill dp attention: a prompt its device's share refuses waits on that device alone, the others' go on") {
  // vLLM's budget of 163,840 tokens over 8 prefill devices is 20,480 each. Eight prompts of
  // 18,000 take a device each; the ninth (5,000) is dealt device 0, which has 2,480 left, and
  // waits for the next pass; the seven of 1,000 behind it go to devices 1-7 in this pass, as
  // SGLang's queue a rank lets them, and the last 1,000 (device 0 again) waits behind the 5,000 on
  // its device: a refusal closes the device for the pass. (Stopping at the refusal held all nine
  // for a second pass; not closing the device let the last one pass the 5,000.)
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("sluice-dp-refusal-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream t(dir / "t.csv");
    t << "arrival_s,input_tokens,output_tokens\n";
    for (int i = 0; i < 8; ++i) t << "0,18000,2\n";
    t << "0,5000,2\n";
    for (int i = 0; i < 8; ++i) t << "0,1000,2\n";
  }
  const Json s = run_text(testing::kDeepSeekTwoServers,
                          {"workloads.0.deployment.prefill_pool={tensor_parallel: 8, data_parallel_attention: true}",
                           "workloads.0.scheduler={kind: vllm, max_num_seqs: 512, max_num_batched_tokens: 163840}",
                           "workloads.0.workload={kind: trace, file: " + (dir / "t.csv").string() + ", tokenizer: llama3}"})["serving"];
  fs::remove_all(dir);
  CHECK(s["disaggregation"]["prefill"]["iterations"] == 2);
  const Json& q = s["latency_ms"]["queueing_delay"];
  CHECK(q["count"] == 17);
  CHECK(q["p75"].get<double>() == 0.0);
  CHECK(q["max"].get<double>() > 1000);
  CHECK(q["mean"].get<double>() * 17 == doctest::Approx(2 * q["max"].get<double>()));  // two waited, as long
}
