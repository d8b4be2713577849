// A training job's keys and its registration (`kind: training`): the schema bound to
// TrainingConfig, the shape checks, token slicing, and the factory that makes the job.
#include "workloads/training/training.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/units.h"
#include "hardware/cost_band.h"
#include "hardware/cost_source.h"
#include "registry/registry.h"
#include "network/pod.h"
#include "world/placement.h"

namespace sluice::training {

namespace {

// Hot spares: the first `n` servers (device groups) none of whose devices anyone holds, each
// claimed whole for the job; refused at spare_servers when fewer are free or the job is a
// TPU slice (it re-forms from free cubes instead).
std::vector<std::vector<int>> claim_spares(World& world, const Params& rec, const std::vector<int>& mine, int n, const std::string& who,
                                           bool slice) {
  if (slice) rec.fail("spare_servers", "a TPU slice re-forms from free cubes after a failure; it keeps no spare servers", "0");
  std::map<int, std::vector<int>> groups;
  for (int d = 0; d < world.device_count(); ++d) groups[world.group_of(d)].push_back(d);
  // Servers as large as the job's first one: a spare takes a failed server's place rank for rank.
  const size_t size = groups[world.group_of(mine.front())].size();
  std::vector<std::vector<int>> out;
  for (const auto& [g, devs] : groups) {
    if (g < 0 || devs.size() != size) continue;
    bool free = true;
    for (int d : devs) free = free && world.holder(d).empty();
    if (!free) continue;
    out.push_back(devs);
    if (static_cast<int>(out.size()) == n) break;
  }
  if (static_cast<int>(out.size()) < n)
    rec.fail("spare_servers", fmt::format("{} spare servers asked, but {} free servers of {} devices are left beside the job", n, out.size(), size),
             fmt::format("at most {}, or a larger cluster", out.size()));
  for (const auto& devs : out) world.claim(devs, who);
  return out;
}

}  // namespace

TrainingSetup training_setup(const TrainingConfig& c) {
  TrainingSetup s;
  s.model = c.model.name;
  s.hardware = c.hardware.name;
  s.precision = precision_name(c.precision);
  s.cost_source = c.cost_source;
  s.hbm_bytes = c.hardware.hbm_bytes;
  s.tp = c.tp, s.pp = c.pp, s.dp = c.dp, s.ep = c.ep, s.cp = c.cp;
  s.cp_comm = c.cp_comm == TrainingConfig::CpComm::AllGather ? "allgather" : "p2p";
  s.virtual_stages = c.virtual_stages;
  s.zero = c.zero;
  s.zero3_prefetch = c.zero3_prefetch;
  s.schedule = c.schedule == Schedule::GPipe ? "gpipe" : "1f1b";
  s.micro_batches = c.micro_batches, s.micro_batch_size = c.micro_batch_size, s.sequence = c.sequence;
  s.recompute = c.recompute;
  s.mtp_layers = c.mtp_layers;
  s.loss_fusion = c.loss_fusion;
  s.dropout = c.dropout_masks();
  for (int r = 0; r < c.pp; ++r) s.stage_layers.push_back(rank_layers(c, r));
  s.dp_algorithm = net::collective_name(c.dp_algorithm);
  s.tp_algorithm = net::collective_name(c.tp_algorithm);
  s.moe = c.model.moe();
  s.routing = c.routing == MoeOptions::Routing::Zipf ? "zipf" : "uniform";
  s.alltoall_overlap = c.alltoall_overlap;
  s.token_dispatcher = c.rows_per_expert ? "alltoall" : "flex";
  s.active_parameters = c.model.active_parameters();
  s.slicing_policy = slicing_policy_name(c.slicing.policy);
  s.slicing_granularity = c.slicing.granularity;
  return s;
}

namespace {

// The `slicing` section's keys, declared on `s` with the fields they fill.
Binding<SlicingConfig> slicing_keys(Schema& s) {
  using S = SlicingConfig;
  Binding<S> b(s);
  std::vector<std::pair<std::string, SlicingPolicy>> policies;
  for (SlicingPolicy p : {SlicingPolicy::None, SlicingPolicy::Uniform, SlicingPolicy::TeraPipe}) policies.emplace_back(slicing_policy_name(p), p);
  b.choice<SlicingPolicy>("policy", policies, &S::policy,
                          "none: the whole sequence as one slice; uniform: `slices` equal slices; terapipe: the DP minimising "
                          "sum t + (stages - 1) max t over slice lengths in steps of `granularity`")
      .def("none");
  b.integer("slices", &S::slices, "uniform: slices per sequence (at most sequence / granularity)").def("1").range(1, 1 << 20);
  b.integer("granularity", &S::granularity, "slice lengths in steps of this many tokens").def("8").range(1, 1 << 20);
  b.real("candidate_gap", &S::candidate_gap,
         "terapipe: t_max candidates within this relative gap share one DP (T within this factor of the optimum; 0: every candidate)")
      .def("0.001")
      .range(0, 0.5);
  return b;
}

// The `slicing` section, checked against the job (schedule, sequence).
SlicingConfig slicing_from_params(const Params& p, const Binding<SlicingConfig>& keys, const TrainingConfig& c, const Params& par) {
  const SlicingConfig sc = keys.make(p);
  const std::string& pol = p.str("policy");
  if (sc.policy != SlicingPolicy::Uniform && p.given("slices") && sc.slices != 1)
    p.fail("slices", fmt::format("policy {} chooses its own slices", pol), "policy: uniform, or no `slices`");
  if (sc.policy == SlicingPolicy::None) return sc;
  if (c.cp > 1)
    p.fail("policy", "token slicing and context parallelism both cut the sequence (combining them is not modelled)",
           "none with parallel.cp > 1");
  if (c.ep > 1)
    par.fail("expert_parallel",
             "token slicing plans slices on a schedule without the expert all-to-alls each slice would pay (not modelled yet)",
             "1, or slicing.policy: none");
  if (c.zero >= 3)
    par.fail("zero", "ZeRO-3 gathers parameters per micro-batch op, and token slicing's per-slice ops would each gather (not modelled yet)",
             "0, 1 or 2, or slicing.policy: none");
  if (c.schedule != Schedule::GPipe)
    par.fail("schedule", "token slicing runs slices through the pipeline GPipe-style (a slice's backward needs the later slices')",
             "gpipe (or slicing.policy: none)");
  const int units = (c.sequence + sc.granularity - 1) / sc.granularity;
  if (sc.policy == SlicingPolicy::Uniform && sc.slices > units)
    p.fail("slices", fmt::format("{} tokens in steps of {} make at most {} slices", c.sequence, sc.granularity, units),
           fmt::format("1..{}", units));
  // The DP's table holds a slice for every (start, length) pair of units.
  if (sc.policy == SlicingPolicy::TeraPipe && units > 4096)
    p.fail("granularity", fmt::format("{} tokens in steps of {} are {} units; the DP's table grows with their square", c.sequence,
                                      sc.granularity, units),
           fmt::format("at least {}", (c.sequence + 4095) / 4096));
  return sc;
}

}  // namespace

void check_training_shape(const TrainingConfig& c, const Params& job, const Params& parallel) {
  if (c.ep > 1) {
    if (!c.model.moe())
      parallel.fail("expert_parallel", fmt::format("{} is a dense model: it has no experts to spread", c.model.name), "1");
    if (c.cp == 1 && c.dp % c.ep != 0)
      parallel.fail("expert_parallel",
                    fmt::format("expert parallelism groups {} consecutive data-parallel replicas, and dp is {}", c.ep, c.dp),
                    "a divisor of dp");
    // With context parallelism the groups are cut from the dp x cp ranks, context-parallel
    // fastest (Megatron-Core's MoE folding): a group holds whole CP groups or an equal part of one.
    if (c.cp > 1 && ((c.ep % c.cp != 0 && c.cp % c.ep != 0) || (c.dp * c.cp) % c.ep != 0))
      parallel.fail("expert_parallel",
                    fmt::format("expert parallelism groups {} consecutive ranks of the dp x cp = {} x {} ones (context-parallel "
                                "fastest), and a group must hold whole context-parallel groups or an equal part of one",
                                c.ep, c.dp, c.cp),
                    fmt::format("a divisor of cp ({}), or a multiple of it that divides dp x cp ({})", c.cp, c.dp * c.cp));
    if (c.cp > 1 && c.alltoall_overlap)
      job.section("moe").fail("alltoall_overlap", "overlapping the all-to-alls with the next op is not modelled with context parallelism",
                              "false with parallel.cp > 1");
  }
  if (parallel.given("zero3_prefetch") && c.zero < 3)
    parallel.fail("zero3_prefetch", fmt::format("only ZeRO-3 gathers parameters layer by layer, and zero is {}", c.zero),
                  "zero: 3, or no zero3_prefetch");
  if (c.zero >= 3 && c.cp == 1 && c.dp > 1 && c.model.layers >= c.pp * c.virtual_stages) {
    // Prefetching as many layers as an op runs would gather a layer for the next op while this
    // op still holds it: FSDP keeps such a layer, it does not gather it twice.
    const int chunks = c.pp * c.virtual_stages;
    int fewest = c.model.layers;
    for (int vs = 0; vs < chunks; ++vs)
      fewest = std::min(fewest, pipeline_stage_layers(c.model.layers, chunks, vs, c.first_stage_layers, c.last_stage_layers).count +
                                    (vs == chunks - 1 ? c.mtp_layers : 0));
    if (c.zero3_prefetch >= fewest && !(fewest == 1 && c.zero3_prefetch == 1))
      parallel.fail("zero3_prefetch",
                    fmt::format("an op runs as few as {} layers, and prefetching {} would gather a layer for the next op while "
                                "this one still holds it",
                                fewest, c.zero3_prefetch),
                    fewest > 1 ? fmt::format("1..{}", fewest - 1) : std::string("1 (an op of one layer)"));
  }
  if (c.cp > 1) {
    if (c.sequence % (2 * c.cp) != 0)
      parallel.fail("cp", fmt::format("context parallelism cuts each sequence into 2 x {} = {} equal chunks, and {} tokens do not divide",
                                      c.cp, 2 * c.cp, c.sequence),
                    fmt::format("a cp whose double divides the sequence ({} tokens)", c.sequence));
  }
  if (c.alltoall_overlap && c.ep == 1)
    job.section("moe").fail("alltoall_overlap", "without expert parallelism there are no all-to-alls to overlap",
                            "false, or parallel.expert_parallel > 1");
  if (c.rows_per_expert && c.ep == 1)
    job.section("moe").fail("token_dispatcher", "without expert parallelism no token is dispatched to another device",
                            "flex, or parallel.expert_parallel > 1");
  if (c.model.moe() && c.ep == 1 && c.routing != MoeOptions::Routing::Uniform)
    job.section("moe").fail("routing", "skewed routing slows the replicas holding hot experts, and without expert parallelism every replica holds them all",
                            "uniform, or parallel.expert_parallel > 1");
  if (c.model.moe()) {
    MoeOptions mo;
    mo.data_parallel_ep = c.ep;
    mo.routing = c.routing;
    mo.zipf_s = c.zipf_s;
    if (const auto problem = moe_problem(c.model, mo, c.tp))
      (problem->key == "expert_parallel" ? parallel : job.section("moe")).fail(problem->key, problem->problem, problem->valid);
  }
  if (c.model.heads % c.tp != 0)
    parallel.fail("tp", fmt::format("{} has {} heads; tensor parallelism must divide them", c.model.name, c.model.heads),
                  "a divisor of the head count");
  if (c.pp > c.model.layers)
    parallel.fail("pp", fmt::format("{} has {} layers", c.model.name, c.model.layers), fmt::format("at most {}", c.model.layers));
  if (c.virtual_stages > 1) {
    const int v = c.virtual_stages;
    if (c.schedule != Schedule::OneFOneB)
      parallel.fail("virtual_stages", "interleaving is a 1F1B schedule (Megatron's interleaved 1F1B)", "1 with schedule: gpipe");
    if (c.pp < 2) parallel.fail("virtual_stages", "interleaving needs a pipeline (pp >= 2)", "1 with pp: 1");
    if (c.pp * v > c.model.layers)
      parallel.fail("virtual_stages", fmt::format("{} x {} virtual stages but {} has {} layers", c.pp, v, c.model.name, c.model.layers),
                    fmt::format("at most {}", c.model.layers / c.pp));
    if (c.micro_batches % c.pp != 0)
      parallel.fail("virtual_stages", fmt::format("interleaving runs micro-batches in groups of pp = {}; {} micro-batches do not divide", c.pp,
                                                  c.micro_batches),
                    fmt::format("micro_batches a multiple of {}", c.pp));
  }
  for (const auto& [key, n] : {std::pair<const char*, int>{"first_stage_layers", c.first_stage_layers}, {"last_stage_layers", c.last_stage_layers}}) {
    if (n == 0) continue;
    if (c.pp < 2) parallel.fail(key, "sets a pipeline end's layers, and this job has one stage", "0, or pp >= 2");
    if (c.virtual_stages > 1) parallel.fail(key, "is not modelled with interleaving", "0, or virtual_stages: 1");
  }
  if (c.pp >= 2 && (c.first_stage_layers > 0 || c.last_stage_layers > 0)) {
    const int ends = (c.first_stage_layers > 0) + (c.last_stage_layers > 0);
    const int rest = c.model.layers - c.first_stage_layers - c.last_stage_layers;
    if (rest < c.pp - ends || (ends == c.pp && rest != 0))
      parallel.fail(c.last_stage_layers > 0 ? "last_stage_layers" : "first_stage_layers",
                    fmt::format("{} of {}'s {} layers on the ends leave {} for the {} stages between", c.first_stage_layers + c.last_stage_layers,
                                c.model.name, c.model.layers, rest, c.pp - ends),
                    ends == c.pp ? fmt::format("first_stage_layers + last_stage_layers = {}", c.model.layers)
                                 : fmt::format("at most {} on the ends together (a layer for each stage between)", c.model.layers - (c.pp - ends)));
  }
  if (c.sequence > c.model.max_context)
    job.fail("sequence", fmt::format("longer than {}'s context of {} tokens", c.model.name, c.model.max_context),
             fmt::format("at most {}", c.model.max_context));
}

SLUICE_REGISTER(workload, training_workload) {
  Schema s;
  s.add("name", ParamType::String, "the workload's name (metrics under workloads.<name>)");
  s.ref("model", {"models/llm"}, model_schema(), "the model: a catalog name (gpt3-13b, llama3-8b) or an inline shape");
  using T = TrainingConfig;
  auto par = std::make_shared<Schema>();
  Binding<T> par_keys(*par);
  par_keys.integer("tp", &T::tp, "tensor parallel ranks per stage (inside one server)").def("1").range(1, 64);
  par_keys.integer("pp", &T::pp, "pipeline stages").def("1").range(1, 512);
  par_keys.integer("dp", &T::dp, "data-parallel replicas of the pipeline").def("1").range(1, 65536);
  par_keys.integer("cp", &T::cp,
                   "context parallel ranks per stage (Megatron's CP, ring attention): each sequence cut into 2 cp chunks, rank i "
                   "holding chunks i and 2cp-1-i (causal attention balanced); every layer's keys and values go around the CP ring "
                   "as flows while its attention runs (a backward: twice the bytes), activations / cp, gradients reduced over "
                   "dp x cp. Devices: tp x cp x pp x dp, tensor parallel fastest, then context parallel. 1: off")
      .def("1")
      .range(1, 1024);
  par_keys.choice<TrainingConfig::CpComm>("cp_comm", {{"p2p", TrainingConfig::CpComm::P2P}, {"allgather", TrainingConfig::CpComm::AllGather}},
                                          &T::cp_comm,
                                          "how context parallelism moves keys and values (Megatron's --cp-comm-type): p2p, ring attention "
                                          "(each block arrives while the previous one's attention runs, the last block's attention after "
                                          "the ring); allgather, Llama 3's (all gathered first, then the attention: the gather exposed)")
      .def("p2p");
  par_keys.choice<Schedule>("schedule", {{"1f1b", Schedule::OneFOneB}, {"gpipe", Schedule::GPipe}}, &T::schedule, "pipeline schedule")
      .def("1f1b");
  par_keys.integer("micro_batches", &T::micro_batches, "micro-batches per replica per iteration").def("8").range(1, 65536);
  par_keys.integer("micro_batch_size", &T::micro_batch_size, "sequences per micro-batch").def("1").range(1, 65536);
  par_keys.integer("virtual_stages", &T::virtual_stages,
                   "model chunks per pipeline rank (Megatron's interleaved 1F1B): the model cut into pp x v stages, stage j on rank "
                   "j mod pp; the bubble shrinks v-fold for v times the hand-offs. 1: plain 1F1B")
      .def("1")
      .range(1, 64);
  par_keys.integer("first_stage_layers", &T::first_stage_layers,
                   "decoder layers on the first pipeline stage (Megatron's decoder_first_pipeline_num_layers), the stages "
                   "between splitting the rest evenly; 0: the even split")
      .def("0")
      .range(0, 1024);
  par_keys.integer("last_stage_layers", &T::last_stage_layers,
                   "decoder layers on the last pipeline stage (Megatron's decoder_last_pipeline_num_layers): fewer where it "
                   "also runs the LM head and MTP modules; 0: the even split")
      .def("0")
      .range(0, 1024);
  par_keys.integer("zero", &T::zero,
                   "ZeRO stage over the data-parallel replicas (dp x cp with context parallelism): 0 none; 1 optimizer state sharded (gradients reduce-scattered, "
                   "each replica updates its shard, parameters all-gathered: Megatron's distributed optimizer); 2 gradients "
                   "sharded too (memory; the same traffic); 3 parameters sharded too (FSDP): every forward and backward op "
                   "all-gathers its stage's parameters layer by layer before each layer computes (prefetched zero3_prefetch layers "
                   "ahead; interleaved, its chunk's; with cp, each layer with its share of the ring attention), every layer's backward "
                   "reduce-scatters its gradients, "
                   "and nothing is gathered after Adam's step. With expert_parallel, every stage shards a device's experts "
                   "over the replicas holding the same ones (dp x cp / expert_parallel) and the rest over all; 3 gathers and "
                   "reduce-scatters each layer's over both")
      .def("0")
      .range(0, 3);
  par_keys.integer("zero3_prefetch", &T::zero3_prefetch,
                   "ZeRO-3: how many layers' gathers may run ahead of the layer computing (FSDP's forward and backward "
                   "prefetch is one; DeepSpeed's prefetch bucket may hold more). Each holds one more layer's parameters "
                   "whole, and lets more of an op's gathers run while its stage waits for its pipeline input")
      .def("1")
      .range(1, 1024);
  par_keys.integer("expert_parallel", &T::ep,
                   "a mixture-of-experts model's expert parallelism (Megatron-Core's EP): its routed experts spread over "
                   "groups of this many consecutive data-parallel replicas (dividing dp and the experts); every MoE layer's "
                   "forward and backward move its tokens to their experts' replicas and back by two all-to-alls (flows), and "
                   "expert gradients are all-reduced over the dp / ep replicas holding the same experts. With cp the groups "
                   "are cut from the dp x cp ranks, context-parallel fastest (Megatron-Core's MoE folding: a divisor of cp, or a "
                   "multiple of it dividing dp x cp), each rank sending its s / cp tokens, and the expert gradients reduced over "
                   "dp x cp / ep. 1: off")
      .def("1")
      .range(1, 65536);
  s.section("parallel", par, "tensor x pipeline x data parallelism and the pipeline schedule");
  auto moe = std::make_shared<Schema>();
  Binding<T> moe_keys(*moe);
  moe_keys.choice<MoeOptions::Routing>("routing", {{"uniform", MoeOptions::Routing::Uniform}, {"zipf", MoeOptions::Routing::Zipf}},
                                       &T::routing,
                                       "a mixture of experts: each expert's share of the tokens, uniform or zipf (expert i's share "
                                       "proportional to 1/(i+1)^zipf_s; the replicas holding hot experts compute more and receive "
                                       "more of the all-to-alls, and every step waits for the slowest)")
      .def("uniform");
  moe_keys.real("zipf_s", &T::zipf_s, "the Zipf exponent of routing: zipf").def("1").range(0, 10);
  moe_keys.flag("alltoall_overlap", &T::alltoall_overlap,
                "overlap an op's dispatch and combine all-to-alls with the stage's next op when that one goes the other way "
                "(a forward beside a backward: Megatron-Core's EP communication overlap, DeepSeek's DualPipe pairing): the "
                "stage computes on while they run, slowed while they fly by the SMs communication takes (the device's comm_sms), and the "
                "op hands off when they end; at most one op's all-to-alls out per stage (with parallel.expert_parallel > 1)")
      .def("false");
  moe_keys.choice<bool>("token_dispatcher", {{"flex", false}, {"alltoall", true}}, &T::rows_per_expert,
                        "what the all-to-alls carry (with parallel.expert_parallel > 1): flex sends a token once to each "
                        "device its experts are on and combines its outputs there (DeepEP's kernels, Megatron-Core's flex "
                        "dispatcher); alltoall sends a row per (token, expert) pair, k a token, its own device's included "
                        "(Megatron-Core's alltoall dispatcher: up to k / distinct devices times the bytes)")
      .def("flex");
  s.section("moe", moe, "a mixture-of-experts model's routing and its all-to-alls' overlap (with parallel.expert_parallel)");
  Binding<T> keys(s);
  keys.integer("sequence", &T::sequence, "tokens per sequence").def("2048").range(1, 1 << 20);
  keys.choice<Precision>("precision", {{"bf16", Precision::BF16}, {"fp8", Precision::FP8}}, &T::precision,
                         "the decoder layers' GEMMs, forward and backward: bf16 (the model's dtype) or fp8 (DeepSeek-V3's and "
                         "Transformer Engine's FP8 training: every linear layer's forward, input-gradient and weight-gradient GEMM "
                         "in E4M3 at the device's FP8 rate, activations quantized before them, an MoE dispatch in FP8 with its "
                         "scales and the combine in bf16; attention, the embedding and LM head stay bf16, and master weights, "
                         "gradients and optimizer state keep their types, so memory and the data-parallel traffic are unchanged). "
                         "MFU is then against the FP8 peak")
      .def("bf16");
  keys.integer("iterations", &T::iterations, "iterations to run (0: as long as the other workloads run; up to 10 million, weeks of simulated training: repeated iterations are fast-forwarded)").def("2").range(0, 1e7);
  keys.flag("recompute", &T::recompute,
            "full activation recomputation: activations kept per layer input only, one more forward in the backward")
      .def("false");
  keys.integer("mtp_layers", &T::mtp_layers,
               "multi-token prediction modules trained beside the model (DeepSeek-V3 trains 1; Megatron-Core's "
               "mtp_num_layers), on the last pipeline stage: each one more decoder layer of the model's last kind "
               "(an MoE one where it has experts), a 2h -> h projection and its own pass through the shared "
               "embedding and LM head; its FLOPs count in MFU")
      .def("0")
      .range(0, 8);
  keys.flag("loss_fusion", &T::loss_fusion,
            "Megatron's cross_entropy_loss_fusion: the vocabulary-parallel cross-entropy's element-wise steps fused "
            "(cast and max in one kernel, subtract, exp and sum in one, the division in one; the backward's scale, "
            "one-hot subtraction and cast back in one): 22 bytes a bf16 logit forward and 10 backward instead of 38 and 14 "
            "and the loss's per-token all-reduces over tp two instead of three (false: Megatron's default, unfused); "
            "the fp32 softmax kept for the backward is the same either way")
      .def("false");
  keys.flag("dropout", &T::dropout,
            "dropout in training (Megatron's attention_dropout and hidden_dropout above 0; its GPT default 0.1): "
            "each layer keeps its attention and MLP outputs' one-byte dropout masks for the backward (Korthikanti et al.'s "
            "accounting). false: no dropout, no masks (PyTorch's dropout at p = 0 saves nothing). Default: the model's "
            "(model.dropout: false in the catalog for Llama, Mixtral, DeepSeek-V3, Qwen3, TinyLlama and ChatGLM2, whose code has "
            "no dropout or whose configs set it to 0)")
      .optional();
  std::vector<std::pair<std::string, net::CollectiveKind>> allreduces;  // the registered all-reduces (`sluice list collective`)
  for (const auto* c : reg.in("collective"))
    if (c->name.rfind("allreduce-", 0) == 0) allreduces.emplace_back(c->name, *net::parse_collective(c->name));
  keys.choice<net::CollectiveKind>("dp_algorithm", allreduces, &T::dp_algorithm,
                                   "data-parallel gradient all-reduce, one per stage and tensor-parallel rank")
      .def("allreduce-ring");
  keys.choice<net::CollectiveKind>("tp_algorithm", net::tp_allreduces(), &T::tp_algorithm,
                                   "tensor-parallel collectives (two all-reduces a layer, twice in a recomputing backward, and the embedding's, "
                                   "the LM heads' and the loss's; fused per stage and op): the ring, NVLink SHARP "
                                   "(allreduce-nvls, where the topology's NVSwitch has nvls: true) or NCCL's choice between them")
      .def("allreduce-ring");
  s.add("cost_tables", ParamType::String, kCostTablesDoc).def("auto");
  auto slicing = std::make_shared<Schema>();
  const Binding<SlicingConfig> sl_keys = slicing_keys(*slicing);
  s.section("slicing", slicing,
            "token-level pipelining (TeraPipe): each sequence cut into slices that enter the pipeline one after another "
            "(GPipe order, backwards in reverse slice order)");
  s.add("trace", ParamType::Bool,
        "write trace.json (Perfetto): replica 0's forward and backward passes (per slice with token slicing) of the first two "
        "iterations, a track per stage")
      .def("false");
  s.section("place", placement_schema(reg),
            "the devices it runs on: tp x cp x pp x dp of them (tensor parallel fastest, then context parallel, then data parallel)");
  auto rec = std::make_shared<Schema>();
  Binding<T> rec_keys(*rec);
  rec_keys.time_ns("checkpoint_interval", &T::checkpoint_interval_ns,
                   "a checkpoint after the first iteration that ends this long after the last one (0s: none)")
      .def("30min")
      .nonneg();
  rec_keys.time_ns("checkpoint_write", &T::checkpoint_write_ns, "the pause to write a checkpoint (checkpoint_to: pause)").def("30s").nonneg();
  rec_keys.choice<bool>("checkpoint_to", {{"pause", false}, {"storage", true}}, &T::checkpoint_to_storage,
                        "pause: the job stops for checkpoint_write; storage: every device writes its share (the model's weights and "
                        "Adam state once, 14 bytes a parameter, spread over the job's devices) to the cluster's storage servers as flows on the fabric, "
                        "and the job waits for the last byte (needs cluster.storage_servers)")
      .def("pause");
  rec_keys.integer("spare_servers", &T::spare_servers,
                   "hot spares: free servers the job holds idle; a failed server is swapped for a healthy spare (one in its rack "
                   "first) and the job restarts without waiting for the repair (0: it waits)")
      .def("0")
      .range(0, 4096);
  rec_keys.time_ns("restart", &T::restart_ns, "from healthy devices to training again: reload the checkpoint, re-initialise")
      .def("5min")
      .nonneg();
  rec_keys.time_ns("collective_timeout", &T::collective_timeout_ns,
                   "a job whose transfers make no progress this long (group cut off) fails (0s: never)")
      .def("10min")
      .nonneg();
  s.section("recovery", rec, "what a failure costs: checkpoints, restart, and the timeout of a cut-off collective (used when the world has faults)");
  reg.add("workload", "training",
          "a training job: forward and backward per stage from the cost model, GPipe/1F1B pipelines, TP/PP/DP transfers as flows",
          std::move(s), WorkloadKindFactory([&reg, keys, par_keys, rec_keys, sl_keys, moe_keys](const Params& p, World& world, const WorkloadContext& ctx) -> std::unique_ptr<Workload> {
            TrainingConfig c = keys.make(p);
            const Params& par = p.section("parallel");
            par_keys.fill(par, c);
            moe_keys.fill(p.section("moe"), c);
            rec_keys.fill(p.section("recovery"), c);
            if (c.checkpoint_to_storage && world.storage_nodes().empty())
              p.section("recovery").fail("checkpoint_to", "storage, but the cluster has no storage servers",
                                         "pause, or cluster.storage_servers: N (storage servers on the fabric)");
            c.model = model_from_params(p.section("model"));
            c.hardware = world.hardware();
            if (!c.hardware.supports(c.precision))
              p.fail("precision", fmt::format("{} has no {} tensor cores", c.hardware.name, precision_name(c.precision)),
                     "bf16 (training runs bf16 or fp8; this device has no fp8)");
            c.model.weights = c.precision;  // (the cost model's GEMMs and dispatch; training's memory counts dtype_bytes)
            check_training_shape(c, p, par);
            if (const Params& mp = p.section("moe"); !c.model.moe() && (mp.given("routing") || mp.given("zipf_s") || mp.given("alltoall_overlap") || mp.given("token_dispatcher")))
              mp.fail(mp.given("routing")            ? "routing"
                      : mp.given("zipf_s")           ? "zipf_s"
                      : mp.given("token_dispatcher") ? "token_dispatcher"
                                                     : "alltoall_overlap", fmt::format("{} is a dense model: nothing is routed", c.model.name),
                      "leave the moe section out");
            c.slicing = slicing_from_params(p.section("slicing"), sl_keys, c, par);
            {
              const CostSource src = resolve_cost_source(p.str("cost_tables"), c.hardware, p, "cost_tables");
              c.tables_dir = src.tables_dir;
              c.tables_device = src.tables_device;
              c.cost_time_scale = band_time_scale(src, c.hardware);
              c.cost_source = src.describe(c.hardware);
            }
            const TrainingMemory mem = training_memory(c);
            if (mem.total() > c.hardware.hbm_bytes)
              p.fail("parallel", fmt::format("{} does not fit: each device of the fullest pipeline rank needs {} (weights {}, gradients {}, "
                                             "optimizer {}, activations {}) but {} has {}",
                                             c.model.name, format_bytes(mem.total()), format_bytes(mem.weights), format_bytes(mem.gradients),
                                             format_bytes(mem.optimizer), format_bytes(mem.activations), c.hardware.name,
                                             format_bytes(c.hardware.hbm_bytes)),
                     "more tensor, pipeline or context parallelism, parallel.zero (ZeRO shards the optimizer state, gradients, parameters), "
                     "fewer micro-batches in flight (1f1b), recompute: true, or smaller "
                     "micro-batches");
            const int need = job_devices(c);
            const auto devices = place_devices(world, p.section("place"), need, ctx.name, reg);
            // The slice's extents, read once place_devices has checked them (it names the bad one).
            if (p.section("place").given("slice") && world.slices().is_pod()) {
              const Node& sn = p.section("place").node("slice");
              for (size_t i = 0; i < 3 && i < sn.seq.size(); ++i)
                c.slice_cubes[i] = static_cast<int>(parse_int(sn.seq[i].scalar).value_or(0)) / world.slices().cube_edge();
              c.slice_twisted = p.section("place").flag("twisted");
            }
            for (int g = 0; g < need; g += c.tp)
              for (int k = 1; k < c.tp; ++k)
                if (world.group_of(devices[static_cast<size_t>(g + k)]) != world.group_of(devices[static_cast<size_t>(g)]))
                  p.fail("place", fmt::format("a tensor-parallel group spans servers (devices {} and {})", devices[static_cast<size_t>(g)],
                                              devices[static_cast<size_t>(g + k)]),
                         "a placement whose consecutive groups of tp devices share a server");
            if (c.spare_servers > 0) c.spares = claim_spares(world, p.section("recovery"), devices, c.spare_servers, ctx.name, c.slice_cubes[0] > 0);
            if (p.flag("trace")) world.trace().enable(true);
            return make_training_job(ctx.name, std::move(c), world, devices);
          }));
}

}  // namespace sluice::training
