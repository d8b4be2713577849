// The serving study and its components (schedulers, routers, workloads, arrivals).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/scenario.h"
#include "run/study.h"
#include "hardware/cost_band.h"
#include "hardware/cost_source.h"
#include "hardware/spec.h"
#include "network/collective.h"
#include "network/generators.h"
#include "recorder/serving_report.h"
#include "registry/registry.h"
#include "workloads/serving/serving_sim.h"
#include "world/energy.h"

namespace sluice {

namespace serving {
std::unique_ptr<Study> make_serving_short_form(const StudyContext& ctx, const Registry& reg);
std::shared_ptr<Schema> prefill_pool_schema(const Registry& reg, bool short_form);
void read_prefill_pool(ServingConfig& c, const Params& d, const Registry& reg, const HardwareSpec* cluster_hardware,
                       const std::string& deployment_scheduler);

// What a planner should know about a finished run that the figures do not say.
void warn_about_run(const ServingSim& sim, int64_t asked_interval_ns, Recorder& rec) {
  const ServingConfig& c = sim.config();
  if (c.sample_interval_ns > 0 && c.sample_interval_ns != asked_interval_ns)
    rec.warn(fmt::format("outputs.sample_interval {} would keep too many samples; the time series was thinned to one "
                         "sample every {}", SimTime::ns(asked_interval_ns).str(), SimTime::ns(c.sample_interval_ns).str()));
  const ArrivalSpec& a = c.workload->arrival();
  const double span_s = static_cast<double>(sim.last_delivery_ns() - sim.first_arrival_ns()) * 1e-9;
  if ((a.kind == ArrivalSpec::Kind::Poisson || a.kind == ArrivalSpec::Kind::Gamma) && span_s > 0 && sim.completed() > 100) {
    const double served = static_cast<double>(sim.completed()) / span_s;
    if (a.rate_per_s > 1.5 * served && sim.rejected_overload() == 0)
      rec.warn(fmt::format("overloaded: requests arrived at {:.3g}/s but were served at {:.3g}/s, so the queue grew for the "
                           "whole run; latencies describe the backlog, not the deployment", a.rate_per_s, served));
  }
  // Objectives no request can meet on this deployment, whatever the load or the scheduling:
  // even the load's shortest prompt alone on an idle replica is slower.
  const int fewest = c.workload->fewest_new_tokens();
  auto impossible = [&](const std::string& who, int64_t ttft_ns, int64_t tpot_ns) {
    if (const int64_t t = sim.idle_ttft_ns(fewest); ttft_ns > 0 && t > ttft_ns)
      rec.warn(fmt::format("{}TTFT objective {} cannot be met by any request: the shortest prompt of this load ({} tokens to "
                           "compute) alone on an idle replica takes {} to its first token; no load, router or scheduler changes "
                           "that, a faster deployment (more tensor parallelism, a faster device) does",
                           who, SimTime::ns(ttft_ns).str(), fewest, SimTime::ns(t).str()));
    if (const int64_t t = sim.idle_tpot_ns(fewest); tpot_ns > 0 && t > tpot_ns)
      rec.warn(fmt::format("{}TPOT objective {} cannot be met by any request: one decode step of one sequence after a prompt of {} "
                           "tokens takes {} on an idle replica; no load, router or scheduler changes that, a faster deployment does",
                           who, SimTime::ns(tpot_ns).str(), fewest, SimTime::ns(t).str()));
  };
  impossible("", c.slo_ttft_ns, c.slo_tpot_ns);
  for (const auto& cls : c.workload->classes()) impossible(fmt::format("class {}: ", cls.name), cls.ttft_ns, cls.tpot_ns);
  if (sim.rejected_overload() > 0)
    rec.warn(fmt::format("overloaded: {} of {} requests were rejected on arrival because {} were already in flight "
                         "(deployment.max_in_flight); the queue was held at that bound instead of growing without limit",
                         sim.rejected_overload(), c.workload->total_requests(), c.max_in_flight));
}

// Near capacity, always checked (the bands' elasticity measures the same from 2 + N runs). An
// open-loop load's marginal utilization u (ServingSim::marginal_utilization) bounds from below
// how fast latencies move with step costs: with the queue and the batch at their fixed point,
// about 1 / (1 - u) times as fast, more when prefills stall decodes (docs/BANDS.md). At u 0.5
// or more, that is at least twice: the cost model's error doubles in the latencies.
void warn_near_capacity(const ServingSim& sim, double prompt_tokens, double cached_tokens, double output_tokens, Recorder& rec) {
  const ServingConfig& c = sim.config();
  const ArrivalSpec& a = c.workload->arrival();
  if (c.autoscaling.policy != ServingConfig::Autoscaling::Policy::None || sim.completed() < 100 || sim.rejected_overload() > 0) return;
  double rate = 0;
  std::string which;
  if (a.kind == ArrivalSpec::Kind::Poisson || a.kind == ArrivalSpec::Kind::Gamma) {
    rate = std::max({a.rate_per_s, a.rate_per_s * (1 + a.amplitude), a.step_at_ns > 0 ? a.step_rate_per_s : 0.0});
    which = a.varies() ? "at its highest rate, " : "";
  } else if (a.kind == ArrivalSpec::Kind::Trace) {
    const double span_s = static_cast<double>(sim.last_delivery_ns() - sim.first_arrival_ns()) * 1e-9;
    rate = span_s > 0 ? static_cast<double>(sim.completed()) / span_s : 0.0;
    which = "at the trace's mean rate, ";
  }
  const double served = static_cast<double>(sim.completed()) /
                        std::max(1e-9, static_cast<double>(sim.last_delivery_ns() - sim.first_arrival_ns()) * 1e-9);
  if (rate <= 0 || rate > 1.5 * served) return;  // overloaded: warn_about_run says so
  const double u = sim.marginal_utilization(rate, prompt_tokens, cached_tokens, output_tokens);
  if (u < 0.5) return;
  rec.warn(fmt::format("near capacity: {}{:.3g} requests/s take {:.2f} of each replica's capacity at the margin (what one more "
                       "request adds to its iteration times at the run's mean batch); queueing and batch growth feed each other "
                       "here, so latencies move {} as fast as step costs, and the cost model's error grows as much in them "
                       "(docs/BANDS.md); `--bands N` measures it",
                       which, rate, u, u < 1 ? fmt::format("at least {:.1f} times", 1 / (1 - u)) : std::string("many times")));
}

// A deployment's keys, each declared with the ServingConfig field it fills: the schema
// (add_serving_keys) and the config (build_serving_config) both come from here. Keys that
// are interpreted rather than copied stay plain schema keys, read where they are resolved:
// cost_tables (a directory, derived or the roofline), the last mile's d2h and d2h_mode (which
// table rows), and the outputs' trace, requests_csv and timeseries switches.
struct ServingKeys {
  Binding<ServingConfig> deployment, outputs, recovery, slo;
  Binding<ServingConfig::Autoscaling> autoscaling;
  Binding<PrefillSlicingConfig> slicing;
  Binding<LastMile> last_mile;
  Binding<MoeOptions> moe;
};

static ServingKeys bind_serving_keys(Schema& dep, Schema& slicing, Schema& lm, Schema& out, Schema& rec, Schema& slo, Schema& as,
                                     Schema& moe, bool short_form) {
  using C = ServingConfig;
  using A = ServingConfig::Autoscaling;
  ServingKeys k{Binding<C>(dep), Binding<C>(out), Binding<C>(rec), Binding<C>(slo), Binding<A>(as), Binding<PrefillSlicingConfig>(slicing),
                Binding<LastMile>(lm), Binding<MoeOptions>(moe)};
  using MO = MoeOptions;
  k.moe.flag("expert_parallel", &MO::expert_parallel,
             "experts spread whole over each stage's tensor-parallel devices, experts / tensor_parallel on each (expert "
             "parallelism, EP = tensor_parallel, as vLLM's enable_expert_parallel; under eplb, (experts + redundant_experts) "
             "/ tensor_parallel slots); false: every expert split over them as the dense MLP is")
      .def("false");
  k.moe.choice<bool>("dispatch", {{"allreduce", false}, {"alltoall", true}}, &MO::alltoall,
                     "how tokens reach their experts under expert parallelism: allreduce (every device holds every token; "
                     "the MLP's all-reduce combines the experts' outputs, vLLM's default) or alltoall (each device takes 1/tp "
                     "of the tokens and sends each to its experts' devices and back: two all-to-alls per MoE layer, flows on "
                     "a topology, in place of the MLP's all-reduce; DeepEP's kernels)")
      .def("allreduce");
  k.moe.choice<bool>("token_dispatcher", {{"flex", false}, {"alltoall", true}}, &MO::rows_per_expert,
                     "what dispatch: alltoall sends: flex a token once to each device its experts are on, its outputs "
                     "summed there and returned once (DeepEP's kernels); alltoall a row per token and expert, k a token, its "
                     "own device's included (Megatron-Core's alltoall token dispatcher: up to k / distinct devices times the "
                     "bytes)")
      .def("flex");
  k.moe.choice<bool>("alltoall_algorithm", {{"flat", false}, {"hierarchical", true}}, &MO::hierarchical_alltoall,
                     "the all-to-all's pattern on a topology: flat (every pair of devices directly, across servers over the "
                     "NICs; as DeepEP's low-latency kernels, which DeepSeek decodes with, send straight over RDMA) or "
                     "hierarchical (DeepEP's normal kernels, its training and prefill path: what a device sends to another server's devices "
                     "crosses once, a token once per server its experts are on, to the device of the same local rank there, "
                     "which forwards it over NVLink; the combine the same way back; the same number of the group's devices "
                     "on every server)")
      .def("flat");
  k.moe.choice<MO::Routing>("routing", {{"uniform", MO::Routing::Uniform}, {"zipf", MO::Routing::Zipf}, {"measured", MO::Routing::Measured}},
                            &MO::routing,
                            "the experts' share of the token-expert assignments: uniform, zipf (expert i's share "
                            "proportional to 1/(i+1)^zipf_s, the hottest placed together unless eplb), or measured (expert i's "
                            "share proportional to its logged count, expert_load or expert_load_file; placed in order)")
      .def("uniform");
  moe.add("expert_load", ParamType::List, "routing: measured: one non-negative count (or frequency) per expert, in expert order")
      .optional();
  moe.add("expert_load_file", ParamType::String,
          "routing: measured: a file of the same counts, one per line (or comma-separated; # starts a comment), e.g. a "
          "router's logged token counts per expert")
      .optional();
  k.moe.real("zipf_s", &MO::zipf_s, "the Zipf exponent of routing: zipf (0: uniform)").def("1").range(0, 10);
  k.moe.flag("eplb", &MO::eplb,
             "expert-parallel load balancing (DeepSeek's EPLB): the hottest redundant_experts experts get a second copy, "
             "and copies are placed hottest first on the least-loaded device")
      .def("false");
  k.moe.flag("two_batch_overlap", &MO::two_batch_overlap,
             "two-batch overlap (DeepSeek, SGLang): on a topology, an iteration runs as two micro-batches whose all-reduces "
             "and all-to-alls proceed under the other's compute; each half reads the weights again (alltoall dispatch, "
             "pipeline_parallel 1; with data_parallel_attention, each device splits its own sequences into the halves)")
      .def("false");
  k.moe.flag("data_parallel_attention", &MO::data_parallel_attention,
             "data-parallel attention (SGLang's enable_dp_attention, DeepSeek's MLA DP): each of the tensor_parallel "
             "devices runs attention, the dense and shared MLPs and the LM head whole over its own share of the "
             "sequences, whose KV cache only it holds (the replica holds tensor_parallel devices' worth); the routed "
             "experts stay spread over the devices, fed by all-to-all dispatch; no tensor-parallel all-reduce "
             "(expert_parallel with dispatch: alltoall, pipeline_parallel 1); the decode engines' (a prefill pool's own: "
             "prefill_pool.data_parallel_attention)")
      .def("false");
  k.moe.integer("redundant_experts", &MO::redundant_experts, "extra expert copies under eplb (experts + this must divide by "
                "tensor_parallel)")
      .def("0")
      .range(0, 1e5);
  k.autoscaling.choice<A::Policy>("policy", {{"none", A::Policy::None}, {"queue", A::Policy::Queue}, {"concurrency", A::Policy::Concurrency},
                                   {"utilization", A::Policy::Utilization}},
                                  &A::policy,
                                  "none: a fixed pool of deployment.replicas; queue: requests waiting per serving replica against "
                                  "target; concurrency: requests in flight per serving replica (Knative's signal); utilization: the "
                                  "serving replicas' busy fraction (near 1 whenever continuous batching has work)")
      .def("none");
  k.autoscaling.integer("min_replicas", &A::min_replicas,
                        "the fewest replicas (deployment.replicas is the most); disaggregated, of the decode pool (replicas - "
                        "prefill_replicas the most)")
      .def("1")
      .range(1, 1e5);
  k.autoscaling.integer("prefill_min_replicas", &A::prefill_min_replicas,
                        "disaggregated: the fewest prefill replicas (deployment.prefill_replicas the most); each pool is scaled "
                        "on its own signal")
      .def("1")
      .range(1, 1e5);
  k.autoscaling.real("prefill_target", &A::prefill_target, "disaggregated: the prefill pool's target (0: the same as target)")
      .def("0")
      .nonneg();
  k.autoscaling.real("target", &A::target, "the signal's target: waiting requests (queue) or requests in flight (concurrency) per serving "
                     "replica, or a busy fraction (utilization)")
      .def("4")
      .positive();
  k.autoscaling.time_ns("interval", &A::interval_ns, "how often the policy looks").def("10s").positive();
  k.autoscaling.time_ns("provision", &A::provision_ns, "from the decision to a machine with the devices").def("30s").nonneg();
  k.autoscaling.time_ns("model_load", &A::model_load_ns, "then loading the model before it serves").def("30s").nonneg();
  k.autoscaling.time_ns("cooldown", &A::cooldown_ns, "after a change, no other for this long").def("60s").nonneg();
  auto& d = k.deployment;
  d.integer("replicas", &C::replicas, "model replicas behind the router").def("1").range(1, 1e5);  // 1e6 took 1.8 GB to build
  d.integer("tensor_parallel", &C::tensor_parallel, "GPUs per pipeline stage (in a world they may span servers: multi-node tensor parallelism; under "
            "moe.data_parallel_attention, the decode engine's data-parallel and expert-parallel width, e.g. DeepSeek's 144)")
      .def("1")
      .range(1, 1024);
  d.integer("pipeline_parallel", &C::pipeline_parallel, "pipeline stages per replica").def("1").range(1, 256);
  d.choice<Precision>("precision", precision_names(), &C::precision,
                      "the decoder layers' weights and GEMMs: bf16 (the model's dtype), fp8 (E4M3 weights and per-token "
                      "activations at the device's FP8 rate), fp4 (NVFP4 at its FP4 rate) or w4a16 (weight-only INT4, "
                      "computed in bf16); the embedding and LM head stay in the model's dtype")
      .def("bf16");
  d.choice<bool>("kv_cache_dtype", {{"auto", false}, {"fp8", true}}, &C::kv_fp8,
                 "the KV cache's element type: auto (the model's dtype) or fp8 (one byte: twice the tokens, half the "
                 "bytes a decode step reads)")
      .def("auto");
  d.choice<net::CollectiveKind>("tp_algorithm", net::tp_allreduces(), &C::tp_algorithm,
                                "tensor-parallel all-reduces on a topology (a stage's, fused per iteration): the ring, NVLink SHARP "
                                "(allreduce-nvls, where the NVSwitch has nvls: true) or NCCL's choice between them")
      .def("allreduce-ring");
  if (short_form) {
    d.integer("nodes", &C::nodes, "nodes in the cluster").def("1").range(1, 1e6);
    d.integer("gpus_per_node", &C::gpus_per_node, "GPUs per node (NVLink domain)").def("8").range(1, 1024);
  }
  d.integer("max_in_flight", &C::max_in_flight,
            "overload bound: an arrival that finds this many requests in flight (queued, running, swapped, waiting for a "
            "replica) is rejected and counted as requests.rejected_overload, so an overloaded run keeps its memory bounded "
            "(0: no bound)")
      .def("1000000").range(0, 1e9);
  d.real("gpu_memory_utilization", &C::gpu_memory_utilization, "fraction of HBM the server may use (vLLM's setting)").def("0.9").range(0.05, 1.0);
  d.integer("block_size", &C::block_size, "tokens per KV-cache block").def("16").range(1, 4096);
  d.real("watermark", &C::watermark, "fraction of blocks kept free when admitting new sequences").def("0.01").range(0, 0.5);
  d.choice<PreemptionMode>("preemption", {{"recompute", PreemptionMode::Recompute}, {"swap", PreemptionMode::Swap}}, &C::preemption,
                           "what happens to a preempted sequence's KV cache")
      .def("recompute");
  d.quantity("swap_space", UnitKind::Bytes, &C::swap_space_bytes, "host memory per replica for swapped KV").def("16GiB").nonneg();
  d.flag("prefix_reuse", &C::prefix_reuse,
         "keep a finished turn's KV resident for the conversation's next turn (off when disaggregated: the turn ends on a "
         "decode replica, the next one prefills on a prefill replica)")
      .def("true");
  d.flag("priority_scheduling", &C::priority_scheduling,
         "order each replica's waiting queue by the request class's priority (lower first, first come first served within "
         "one) instead of by arrival alone")
      .def("false");
  d.flag("shed_late", &C::shed_late,
         "shed a request not yet scheduled once its class's TTFT objective has passed (requests.rejected_late): it can no "
         "longer meet it, and its work goes to requests that can")
      .def("false");
  d.flag("prefix_caching", &C::prefix_caching,
         "share the KV blocks of a prompt's shared prefix (a system prompt, a template: a load's shared_prefix) across "
         "requests, as vLLM's automatic prefix caching does; cached prefixes no request holds are evicted LRU")
      .def("true");
  d.quantity("kv_host_cache", UnitKind::Bytes, &C::kv_host_cache_bytes,
             "a host-memory tier for the KV cache, per replica: a cached prefix evicted from HBM moves there instead of "
             "being dropped, and is fetched back over the host link on reuse instead of prefilled again (0B: none)")
      .def("0B")
      .nonneg();
  d.quantity("kv_ssd_cache", UnitKind::Bytes, &C::kv_ssd_cache_bytes,
             "a local-SSD tier below host memory, per replica: what the host tier evicts (or HBM, where there is no host "
             "tier or a prefix does not fit it) moves there, and is read back from the drive (hardware ssd_read_bandwidth) "
             "then copied over the host link on reuse (0B: none)")
      .def("0B")
      .nonneg();
  d.quantity("kv_remote_cache", UnitKind::Bytes, &C::kv_remote_cache_bytes,
             "a remote KV pool shared by the replicas (Mooncake Store: the servers' host memory pooled over RDMA), for "
             "the whole deployment: a prefix a replica's lowest tier lets go of moves there, kept in that replica's host "
             "memory, and any replica whose prompt starts with it fetches it over the fabric (flows from that host to its "
             "devices) instead of prefilling it again (0B: none)")
      .def("0B")
      .nonneg();
  d.choice<bool>("kv_ssd_fetch", {{"always", false}, {"when_faster", true}}, &C::kv_ssd_when_faster,
                 "a prefix found on the SSD tier: always read back (as LMCache does), or only when the read and the host-link "
                 "copy take less than prefilling it again on an idle replica")
      .def("always");
  d.integer("prefill_replicas", &C::prefill_replicas,
            "prefill/decode disaggregation: this many of the replicas form the prefill pool, the rest the decode pool; a "
            "prompt prefills on the prefill pool and its KV cache crosses the fabric to a decode replica, which generates "
            "its tokens (0: colocated, every replica prefills and decodes its own requests)")
      .def("0")
      .range(0, 1e5);
  d.choice<bool>("kv_transfer", {{"whole", false}, {"layerwise", true}}, &C::kv_layerwise,
                 "disaggregated: a prompt's KV cache crosses to its decode replica whole, after the prefill, or layer by "
                 "layer during the prefill that completes it (Splitwise), so only the last layer's share is left when it ends; "
                 "layerwise needs the decode replica's blocks when that prefill starts, else the copy is whole")
      .def("whole");
  dep.add("cost_tables", ParamType::String, kCostTablesDoc).def("auto");
  d.choice<Implementation>("implementation",
                           {{"pytorch-lean", Implementation::PytorchLean}, {"pytorch-naive", Implementation::PytorchNaive},
                            {"fused", Implementation::Fused}},
                           &C::implementation, "how the model is executed: its kernels per layer (sluice cost --implementation)")
      .def("pytorch-lean");
  d.flag("fused_elementwise", &C::fused_elementwise, "the same as implementation: fused (kept for old scenarios)").def("false");
  using P = PrefillSlicingConfig;
  k.slicing.choice<PrefillSlicing>("policy",
                                   {{"none", PrefillSlicing::None}, {"uniform", PrefillSlicing::Uniform}, {"terapipe", PrefillSlicing::TeraPipe}},
                                   &P::policy,
                                   "none: a prefill passes the stages whole; uniform: `slices` equal slices; terapipe: the DP minimising "
                                   "sum t + (stages - 1) max t")
      .def("none");
  k.slicing.integer("slices", &P::slices, "uniform: slices per sliced prefill").def("2").range(2, 64);
  k.slicing.integer("granularity", &P::granularity, "slice lengths in steps of this many tokens (the DP coarsens it to at most 256 steps)")
      .def("64")
      .range(1, 1 << 20);
  k.slicing.integer("min_tokens", &P::min_tokens, "prefills of fewer new tokens are not sliced").def("1024").range(2, 1 << 24);
  lm.enumeration("d2h", {"table", "fixed"}, "device-to-host copy of sampled token ids: measured table or fixed").def("table");
  lm.enumeration("d2h_mode", {"pinned", "pageable", "item"}, "which d2h.csv rows to use").def("pinned");
  k.last_mile.time_ns("d2h_latency", &LastMile::d2h_fixed_ns, "copy time when no table is available").def("15us").range(0, 1e9);  // at most 1 s
  k.last_mile.time_ns("detokenize_per_token", &LastMile::detokenize_ns, "host CPU time to detokenize one token (estimate)")
      .def("10us")
      .range(0, 1e9);  // at most 1 s: it is added per hop or token
  k.last_mile.time_ns("stream_per_token", &LastMile::stream_ns, "time to stream one token to the client").def("5us").range(0, 1e9);  // at most 1 s: it is added per hop or token
  out.add("trace", ParamType::Bool, "write trace.json (Perfetto)").def("true");
  k.outputs.integer("trace_max_requests", &C::trace_max_requests,
                    "request tracks in the trace: the first N requests by id (metrics.json says how many were cut; raise it to trace more)")
      .def("200").range(0, 1e7);
  k.outputs.integer("trace_max_iterations", &C::trace_max_iterations,
                    "iteration slices (with KV and batch counters) in the trace: the first N iterations of replicas 0-63 "
                    "(metrics.json says how many were cut; raise it to trace more)")
      .def("2000").range(0, 1e8);
  out.add("requests_csv", ParamType::Bool, "write requests.csv, a row per request").def("true");
  out.add("timeseries", ParamType::Bool, "write timeseries.csv (queues, KV occupancy, busy replicas)").def("true");
  k.outputs.time_ns("sample_interval", &C::sample_interval_ns, "time-series sampling interval").def("1s").positive();  // 0 below when timeseries is off
  k.slo.time_ns("ttft", &C::slo_ttft_ns, "time-to-first-token objective: an answered request meets it at or below this (0s: none)")
      .def("0s")
      .range(0, 1e15);
  k.slo.time_ns("tpot", &C::slo_tpot_ns, "time-per-output-token objective (the mean gap after the first token; 0s: none)")
      .def("0s")
      .range(0, 1e15);
  k.recovery.time_ns("reload", &C::reload_ns, "after its devices are repaired, a replica loads the model this long before serving").def("2min").nonneg();
  k.recovery.time_ns("failover_timeout", &C::failover_timeout_ns, "a request no healthy replica takes within this fails (0s: waits for a repair)")
      .def("60s")
      .nonneg();
  return k;
}

// routing: measured's counts, from the list or the file, each checked where it is written.
static std::vector<double> read_expert_load(const Params& ms) {
  std::vector<double> out;
  auto number = [](const std::string& text, double& v) {
    char* end = nullptr;
    v = std::strtod(text.c_str(), &end);
    return end != text.c_str() && *end == '\0' && std::isfinite(v) && v >= 0;
  };
  if (ms.given("expert_load") && ms.given("expert_load_file"))
    ms.fail("expert_load_file", "says the same as expert_load", "one of expert_load and expert_load_file");
  if (ms.given("expert_load")) {
    const Node& n = ms.node("expert_load");
    for (size_t i = 0; i < n.seq.size(); ++i) {
      double v = 0;
      if (!n.seq[i].is_scalar() || !number(n.seq[i].scalar, v))
        throw ConfigError(n.seq[i].origin, fmt::format("{}.expert_load[{}]", ms.path(), i), n.seq[i].brief(), "not a count",
                          "a number >= 0");
      out.push_back(v);
    }
  } else if (ms.given("expert_load_file")) {
    const auto found = find_input_path(ms.str("expert_load_file"));
    if (!found) ms.fail("expert_load_file", "file not found (looked relative to the working directory and the sluice root)", "an existing file");
    std::error_code ec;
    if (std::filesystem::file_size(*found, ec) > (1u << 24) || ec)
      ms.fail("expert_load_file", "unreadable, or over 16 MB", "a file of one count per expert");
    std::ifstream in(*found);
    std::string line;
    int ln = 0;
    while (std::getline(in, line)) {
      ++ln;
      line = line.substr(0, line.find('#'));
      std::stringstream cells(line);
      std::string cell;
      while (std::getline(cells, cell, ',')) {
        const auto a = cell.find_first_not_of(" \t\r"), b = cell.find_last_not_of(" \t\r");
        if (a == std::string::npos) continue;
        double v = 0;
        if (!number(cell.substr(a, b - a + 1), v))
          throw ConfigError(Origin{*found, ln, 1}, join_path(ms.path(), "expert_load_file"), cell.substr(0, 40), "not a count",
                            "numbers >= 0, one per expert, by line or comma");
        out.push_back(v);
      }
    }
  }
  return out;
}

// A mixture-of-experts deployment's checks, at their keys, before anything runs.
static void check_moe(const ServingConfig& c, const Params& d) {
  const MoeOptions& mo = c.moe;
  const Params& ms = d.section("moe");
  const ModelSpec& m = c.model;
  if (!m.moe()) {
    for (const char* k : {"expert_parallel", "dispatch", "token_dispatcher", "alltoall_algorithm", "routing", "zipf_s", "eplb", "redundant_experts", "expert_load", "expert_load_file",
                          "two_batch_overlap", "data_parallel_attention"})
      if (ms.given(k)) ms.fail(k, fmt::format("{} is a dense model: it has no experts", m.name), "leave deployment.moe out, or an MoE model");
    return;
  }
  if (const auto problem = moe_problem(m, mo, c.tensor_parallel, c.pipeline_parallel))
    (problem->key == "pipeline_parallel" ? d : ms).fail(problem->key, problem->problem, problem->valid);
  if (mo.rows_per_expert && !(mo.expert_parallel && mo.alltoall))
    ms.fail("token_dispatcher", "says what an all-to-all dispatch sends, and this deployment dispatches none",
            "flex, or expert_parallel: true with dispatch: alltoall");
  if (mo.hierarchical_alltoall && !(mo.expert_parallel && mo.alltoall))
    ms.fail("alltoall_algorithm", "says how an all-to-all dispatch crosses the fabric, and this deployment dispatches none",
            "flat, or expert_parallel: true with dispatch: alltoall");
}

// The bindings alone, to fill a config (the schemas they were declared on are thrown away;
// a key the study's own schema lacks, such as nodes outside the short form, is not in its
// parameters and leaves its field as it was).
static const ServingKeys& serving_keys() {
  static Schema dep, slicing, lm, out, rec, slo, as, moe;
  static const ServingKeys k = bind_serving_keys(dep, slicing, lm, out, rec, slo, as, moe, true);
  return k;
}

// Builds a ServingConfig from a validated `serving` study (also used by benchmarks and tests).
ServingConfig build_serving_config(const Params& p, const Registry& reg, uint64_t seed, std::string* workload_desc,
                                   const HardwareSpec* cluster_hardware) {
  ServingConfig c;
  c.hardware = cluster_hardware ? *cluster_hardware : hardware_from_ref(p, "hardware");
  c.model = model_from_params(p.section("model"));
  const Params& d = p.section("deployment");
  const ServingKeys& keys = serving_keys();
  keys.deployment.fill(d, c);
  keys.slicing.fill(d.section("prefill_slicing"), c.prefill_slicing);
  keys.moe.fill(d.section("moe"), c.moe);
  c.moe.expert_load = read_expert_load(d.section("moe"));
  check_moe(c, d);
  c.speculative = speculative_from_params(d.section("speculative"), c.model, c.tensor_parallel, c.pipeline_parallel);
  c.seed = seed;
  if (!c.hardware.supports(c.precision))
    d.fail("precision", fmt::format("{} has no {} tensor cores", c.hardware.name, precision_name(c.precision)),
           fmt::format("one it runs: {}", c.hardware.precisions()));
  c.model.weights = c.precision;
  c.model.kv_fp8 = c.kv_fp8;
  keys.last_mile.fill(p.section("last_mile"), c.last_mile);
  keys.outputs.fill(p.section("outputs"), c);
  keys.recovery.fill(p.section("recovery"), c);
  keys.slo.fill(p.section("slo"), c);
  if (c.kv_ssd_cache_bytes > 0 && (c.hardware.ssd_read_Bps <= 0 || c.hardware.pcie_Bps <= 0))
    d.fail("kv_ssd_cache", fmt::format("an SSD tier is read from the host's drives and copied over the host link, and {} has {}", c.hardware.name,
                                       c.hardware.ssd_read_Bps <= 0 ? "no ssd_read_bandwidth" : "no pcie_bandwidth"),
           "0B, or hardware with ssd_read_bandwidth and pcie_bandwidth > 0");
  if (c.kv_host_cache_bytes > 0 && c.hardware.pcie_Bps <= 0)
    d.fail("kv_host_cache", fmt::format("a host tier is reached over the host link, and {} has no pcie_bandwidth", c.hardware.name),
           "0B, or hardware with pcie_bandwidth > 0");
  keys.autoscaling.fill(p.section("autoscaling"), c.autoscaling);
  if (c.autoscaling.policy != ServingConfig::Autoscaling::Policy::None) {
    const Params& as = p.section("autoscaling");
    const int most = c.replicas - c.prefill_replicas;
    if (c.autoscaling.min_replicas > most)
      as.fail("min_replicas",
              c.prefill_replicas > 0 ? fmt::format("above the decode pool's {} replicas, the most it may have", most)
                                     : fmt::format("above deployment.replicas ({}), the most the pool may have", most),
              fmt::format("at most {}", most));
    if (c.prefill_replicas > 0 && c.autoscaling.prefill_min_replicas > c.prefill_replicas)
      as.fail("prefill_min_replicas", fmt::format("above deployment.prefill_replicas ({}), the most the prefill pool may have", c.prefill_replicas),
              fmt::format("at most {}", c.prefill_replicas));
    if (c.prefill_replicas == 0)
      for (const char* k : {"prefill_min_replicas", "prefill_target"})
        if (as.given(k)) as.fail(k, "is the prefill pool's, and this deployment has none", "deployment.prefill_replicas > 0, or leave it out");
    if (c.pipeline_parallel > 1)
      as.fail("policy", "autoscaling does not yet take pipeline-parallel deployments", "none");
    if (c.autoscaling.policy == ServingConfig::Autoscaling::Policy::Utilization && c.autoscaling.prefill_target > 1)
      as.fail("prefill_target", fmt::format("{} is not a busy fraction", c.autoscaling.prefill_target), "a fraction in (0, 1]");
    if (c.autoscaling.policy == ServingConfig::Autoscaling::Policy::Utilization && c.autoscaling.target > 1)
      as.fail("target", fmt::format("{} is not a busy fraction", c.autoscaling.target), "a fraction in (0, 1]");
  }
  if (c.prefill_replicas > 0) {
    if (c.prefill_replicas >= c.replicas)
      d.fail("prefill_replicas", fmt::format("{} of {} replicas would leave no decode pool", c.prefill_replicas, c.replicas),
             fmt::format("fewer than replicas ({}), or 0 for colocated serving", c.replicas));
    if (c.pipeline_parallel > 1)
      d.fail("prefill_replicas", "disaggregation does not yet take pipeline-parallel replicas", "pipeline_parallel: 1, or prefill_replicas: 0");
    c.prefix_reuse = false;  // a turn ends on a decode replica; its next turn prefills on a prefill replica
  } else if (c.kv_layerwise) {
    d.fail("kv_transfer", "a KV copy between pools needs a disaggregated deployment", "whole, or prefill_replicas > 0");
  }
  if (c.kv_remote_cache_bytes > 0 && c.pipeline_parallel > 1)
    d.fail("kv_remote_cache", "the remote pool does not yet take pipeline-parallel replicas", "0B, or pipeline_parallel: 1");
  if (c.kv_remote_cache_bytes > 0 && !c.prefix_caching)
    d.fail("kv_remote_cache", "holds cached prompt prefixes, and prefix_caching is off", "0B, or prefix_caching: true");
  if (c.preemption == PreemptionMode::Swap && c.hardware.pcie_Bps <= 0)
    d.fail("preemption", fmt::format("swap needs a host link, but {} has no pcie_bandwidth", c.hardware.name),
           "recompute, or hardware with pcie_bandwidth > 0");
  // (Under data-parallel attention every device runs all the heads of its own sequences.)
  const bool whole_heads = c.moe.data_parallel_attention && c.model.moe();
  if (!whole_heads &&
      (c.model.heads % c.tensor_parallel != 0 || (c.model.kv_heads % c.tensor_parallel != 0 && c.tensor_parallel % c.model.kv_heads != 0)))
    d.fail("tensor_parallel", fmt::format("{} has {} heads and {} KV heads; tensor parallelism must split them evenly",
                                          c.model.name, c.model.heads, c.model.kv_heads),
           "a divisor of the head count");
  if (c.model.layers % c.pipeline_parallel != 0)
    d.fail("pipeline_parallel", fmt::format("{} has {} layers, not divisible into {} stages", c.model.name, c.model.layers, c.pipeline_parallel),
           "a divisor of the layer count");
  {
    const Params& ps = d.section("prefill_slicing");
    if (c.prefill_slicing.policy != PrefillSlicing::None && c.pipeline_parallel < 2)
      ps.fail("policy", "slices pass through pipeline stages, and this deployment has one", "none, or deployment.pipeline_parallel >= 2");
  }
  {
    const CostSource src = resolve_cost_source(d.str("cost_tables"), c.hardware, d, "cost_tables");
    c.tables_dir = src.tables_dir;
    c.tables_device = src.tables_device;
    c.cost_time_scale = band_time_scale(src, c.hardware);
    c.cost_source = src.describe(c.hardware);
  }
  for (const Params* at : {&p, &d.section("prefill_pool")}) {
    if (!at->has("scheduler") || at->str("scheduler") != "vllm") continue;
    if (const Params& sp = at->section("scheduler"); sp.given("max_num_batched_tokens") && sp.integer("max_num_batched_tokens") < c.model.max_context)
      sp.fail("max_num_batched_tokens",
            fmt::format("is below {}'s context of {} tokens; vLLM refuses this, since without chunked prefill a longer "
                        "prompt could never be scheduled", c.model.name, c.model.max_context),
            fmt::format("at least {} (or the sarathi scheduler, which chunks prefills)", c.model.max_context));
  }
  auto sched_params = std::make_shared<Params>(p.section("scheduler"));
  const auto& sched_factory = reg.factory<SchedulerFactory>(*reg.find("scheduler", p.str("scheduler")));
  c.make_scheduler = [sched_params, sched_factory] { return sched_factory(*sched_params); };
  read_prefill_pool(c, d, reg, cluster_hardware, p.str("scheduler"));
  if (c.moe.data_parallel_attention && c.model.moe()) {
    if (!c.prefill_pool)
      d.section("moe").fail("data_parallel_attention",
                            c.prefill_replicas > 0
                                ? "is the decode engines', and the prefill engines, with no deployment.prefill_pool of their own, "
                                  "would run it too, scheduled as one engine (a prefill pool that prefills data-parallel says so "
                                  "itself: prefill_pool.data_parallel_attention)"
                                : "runs on decode engines only: colocated, each device would schedule its own prefills, which one "
                                  "scheduler per replica does not model (DeepSeek's deployment prefills on a pool of its own)",
                            "a prefill_pool (e.g. {tensor_parallel: 8}, or {data_parallel_attention: true}), or false");
    // (Speculative decoding is refused with a prefill pool of its own, so with this too.)
  }
  c.router = reg.factory<RouterFactory>(*reg.find("router", p.str("router")))(p.section("router"));
  c.decode_router = reg.factory<RouterFactory>(*reg.find("router", p.str("decode_router")))(p.section("decode_router"));
  auto wb = reg.factory<WorkloadFactory>(*reg.find("load", p.str("workload")))(
      p.section("workload"), reg, seed, c.model.tokenizer, c.model.max_context);
  c.workload = std::move(wb.source);
  // llmperf's counting: its Llama tokenizer over the returned text (tokenizers.yaml ratios).
  c.model_tokens_per_llama = TokenizerTable::ratio("llama", c.model.tokenizer, Origin{"model", 0, 0}, "tokenizer");
  if (workload_desc) *workload_desc = wb.description;
  const Params& lm = p.section("last_mile");
  c.last_mile.d2h_source = fmt::format("fixed {}", lm.time("d2h_latency").str());
  try {
    if (lm.str("d2h") == "table" && !c.tables_dir.empty() && c.last_mile.d2h.load(c.tables_dir, lm.str("d2h_mode")))
      c.last_mile.d2h_source = c.last_mile.d2h.source();
  } catch (const std::runtime_error& e) {  // a malformed d2h.csv (found by fuzzing: it escaped as a raw error)
    d.fail("cost_tables", e.what(), "a directory of well-formed calibration tables (see results/calibration/h200-torch/README.md)");
  }
  if (!p.section("outputs").flag("timeseries")) c.sample_interval_ns = 0;
  c.max_sim_time_ns = p.has("max_sim_time") ? p.time("max_sim_time").count_ns() : 0;
  return c;
}

// The keys of a serving deployment; `short_form` adds what a one-deployment scenario says
// about its cluster (hardware, topology or nodes x GPUs, max_sim_time).
void add_serving_keys(Schema& s, const Registry& reg, bool short_form) {
  if (short_form) {
    s.ref("hardware", {"models/hardware"}, hardware_schema(), "accelerator: a catalog name (h200) or {catalog: h200, ...overrides}").def("h200");
  }
  s.ref("model", {"models/llm"}, model_schema(), "the LLM: a catalog name (llama3-8b) or an inline shape");
  if (short_form)
    s.add("topology", ParamType::Any,
          "cluster topology (a name in topologies/ or {catalog: NAME, ...}): sets nodes and GPUs per node, and "
          "tensor-parallel all-reduces and pipeline hand-offs become flows on its links")
        .optional();
  auto dep = std::make_shared<Schema>();
  auto slicing = std::make_shared<Schema>();
  auto lm = std::make_shared<Schema>();
  auto out = std::make_shared<Schema>();
  auto rec = std::make_shared<Schema>();
  auto slo = std::make_shared<Schema>();
  auto as = std::make_shared<Schema>();
  auto moe = std::make_shared<Schema>();
  bind_serving_keys(*dep, *slicing, *lm, *out, *rec, *slo, *as, *moe, short_form);
  dep->section("moe", moe, "a mixture-of-experts model's experts: expert parallelism, how tokens reach them, the routing model "
               "(refused for a dense model)");
  dep->section("speculative", speculative_schema(),
               "speculative decoding: a drafter proposes tokens that each decode step verifies (draft model, MTP or EAGLE), "
               "with how often they are accepted");
  dep->section("prefill_pool", prefill_pool_schema(reg, short_form),
               "disaggregation (prefill_replicas > 0): the prefill pool's own hardware, tensor parallelism, scheduler or cost "
               "source, where they differ from the deployment's (which then describe the decode pool)");
  dep->section("prefill_slicing", slicing,
               "token-level pipelining of long prompts (pipeline_parallel > 1): an iteration that is one prompt's prefill runs "
               "as slices entering the stages one after another");
  s.section("deployment", dep, "replicas × tensor × pipeline parallelism, KV cache settings");
  s.component("scheduler", &reg, "scheduler", "vllm", "batching scheduler");
  s.component("router", &reg, "router", "round_robin", "router across replicas");
  s.component("decode_router", &reg, "router", "least_outstanding",
              "disaggregated: which decode replica a prefilled request's KV cache goes to (any router; least_outstanding counts "
              "the copies on their way)");
  s.component("workload", &reg, "load", "llmperf", "requests to serve (see `sluice list load`)");
  s.section("last_mile", lm, "the GPU-to-client path of every token");
  s.section("outputs", out, "what to write besides metrics.json");
  s.section("recovery", rec, "what a replica failure costs (used when the world has faults)");
  s.section("autoscaling", as, "grow and shrink the pool of replicas with the load (deployment.replicas is the most)");
  s.section("slo", slo, "service-level objectives: metrics report attainment and goodput (requests meeting both, per second and per GPU)");
  if (short_form)
    s.component_list("faults", &reg, "fault", "fault processes on the deployment's cluster (see `sluice list fault`)").optional();
  if (short_form)
    s.quantity("max_sim_time", UnitKind::Time, "stop simulating at this time (0s: when the workload is done)").def("0s").nonneg();
  if (short_form)
    s.section("economics", economics_schema(), "the facility, its prices and the power of hosts and fabric: energy, cost and carbon (docs/ENERGY.md)");
}

Schema serving_schema(const Registry& reg) {
  Schema s = common_study_schema();
  add_serving_keys(s, reg, true);
  return s;
}

}  // namespace serving

SLUICE_REGISTER(study, serving_study) {
  using namespace serving;
  reg.add("study", "serving",
          "LLM serving, the one-deployment short form: a world whose cluster is the named topology (or nodes x GPUs) "
          "and whose one workload is this deployment",
          serving_schema(reg), StudyFactory([&reg](const StudyContext& ctx) -> std::unique_ptr<Study> {
            return make_serving_short_form(ctx, reg);
          }));
}

}  // namespace sluice
