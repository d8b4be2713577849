// The cost model: the only place that knows kernel timings. It turns one forward pass
// (iteration) of a batch into a duration, from measured tables first (interpolated) and a
// roofline over the device's ceilings where no table covers the point.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hardware/spec.h"

namespace sluice {

// The work of one sequence in an iteration: `new_tokens` computed after `context` cached ones.
// Decode: new_tokens = 1, context = tokens already in the KV cache. Prefill chunk: new_tokens
// = chunk length, context = prefix already cached (0 for a fresh prompt).
// A sequence with new_tokens == 1 is a decode step over context + 1 keys; more is a prefill
// chunk (causal over its own tokens after `context` cached ones).
struct SeqWork {
  int new_tokens = 1;
  int context = 0;
  // Whether this sequence samples a token this iteration (one LM-head row): true for decode
  // and for the chunk that finishes a prompt, false for the earlier chunks of a chunked prefill.
  bool produces_token = true;
  // Speculative decoding: a decode step (new_tokens 1) that also scores this many proposed
  // tokens (verification): 1 + drafts tokens through every layer and the LM head, one attention
  // call over the same cache with 1 + drafts queries. 0: a plain decode step. (16 bits keep the
  // struct at 12 bytes: the hot loops read arrays of these.)
  int16_t drafts = 0;
};
static_assert(sizeof(SeqWork) == 12, "SeqWork stays small: the decode loops stream arrays of it");

// One operation's share of an iteration.
struct OpCost {
  std::string op;      // gemm.qkv, gemm.o, gemm.gate_up, gemm.down, attention.prefill, attention.decode,
                       // elementwise.rmsnorm, ..., lm_head, sampling, allreduce
  double ns = 0;
  std::string source;  // "table:<file>" or "roofline" or "analytic"
  double flops = 0;
  double bytes = 0;
  double kernels = 0;  // kernel launches of this op in the iteration (all layers of the stage)
};

struct IterationCost {
  double total_ns = 0;
  double kernels = 0;  // kernel launches of the iteration
  std::vector<OpCost> ops;
};

// How a deployment executes its model: which kernels one layer launches (see cost_model.cpp).
//   pytorch-lean   plain PyTorch decoder, F.rms_norm, rotary from precomputed cos/sin tables
//                  (what the h200-torch tables measure kernel by kernel)
//   pytorch-naive  the same, with RMSNorm upcast to fp32 by hand and rotary recomputing its
//                  angle table on every call
//   fused          vLLM-style fused add+norm, rotary, SiLU·mul and cache-write kernels: one
//                  kernel per op at its least traffic
enum class Implementation { PytorchLean, PytorchNaive, Fused };
const char* implementation_name(Implementation i);
// Parses "pytorch-lean" | "pytorch-naive" | "fused"; throws std::invalid_argument otherwise.
Implementation implementation_from_name(const std::string& name);

// How a deployment runs a mixture-of-experts model's MoE layers (ignored for a dense model).
struct MoeOptions {
  // Experts spread whole over the tensor-parallel devices, each holding experts / tp of them
  // ((experts + redundant_experts) / tp with EPLB's copies; expert parallelism, EP = tp, as
  // vLLM's enable_expert_parallel); false: every expert split over them as the dense MLP is.
  bool expert_parallel = false;
  // How tokens reach their experts under expert parallelism:
  //   allreduce  every device holds every token (tensor-parallel attention); each runs its
  //              experts on the tokens routed to them, and the MLP's all-reduce combines them
  //              (vLLM's default with TP + EP): no traffic beyond the dense model's
  //   alltoall   each device takes 1/tp of the tokens into the MoE layer and sends each token
  //              to the devices holding its experts (dispatch) and back (combine): two
  //              all-to-alls per MoE layer in place of the MLP's all-reduce (DeepEP's kernels)
  bool alltoall = false;
  // What an all-to-all dispatch sends (and its combine brings back):
  //   false  a token once to each device holding one of its k experts, its outputs summed there
  //          and sent back once (DeepEP's kernels; Megatron-Core's flex dispatcher)
  //   true   one row per (token, expert) pair, k rows a token, its own device's among them
  //          (Megatron-Core's alltoall token dispatcher: the tokens permuted by expert, then
  //          exchanged; the combine returns every row and sums them at home)
  bool rows_per_expert = false;
  // Routing: the fraction of token-expert assignments each expert receives.
  //   uniform   1/experts each
  //   zipf      proportional to 1/(rank)^zipf_s, expert 0 the hottest (experts placed in order,
  //             so the hottest share a device)
  //   measured  expert e's share proportional to expert_load[e] (counts a router logged, e.g.
  //             from a trace of the deployment; placed in order, as given)
  enum class Routing { Uniform, Zipf, Measured } routing = Routing::Uniform;
  double zipf_s = 1.0;
  std::vector<double> expert_load;  // measured: one non-negative count per expert
  // Expert-parallel load balancing (DeepSeek's EPLB): the hottest `redundant_experts` experts
  // get a second copy (their tokens split between the two), and experts are placed hottest
  // first on the least-loaded device with a free slot; false: experts in order, none copied.
  bool eplb = false;
  int redundant_experts = 0;
  // Two-batch overlap (DeepSeek's and SGLang's): the batch runs as two micro-batches, each's
  // all-to-alls (and all-reduces) under the other's compute. Each half reads the weights
  // again; the serving fabric path times it (ServingSim), the cost model's step does not.
  bool two_batch_overlap = false;
  // The all-to-all's pattern on a topology: false every pair of devices directly (flat); true
  // DeepEP's normal internode kernels (training, prefill; its decode kernels go straight over RDMA,
  // as flat does): across servers once per server a token's experts are on, to the
  // device of the sender's local rank there, then NVLink to the devices holding its experts
  // (net::CollectiveKind::AllToAllHierarchical).
  bool hierarchical_alltoall = false;
  // Data-parallel attention (SGLang's enable_dp_attention, DeepSeek's "MLA DP"): each of the
  // tensor_parallel devices runs the attention, the dense and shared MLPs and the LM head whole
  // (their weights on every device) over its own share of the batch's sequences, whose KV cache
  // only it holds; the routed experts stay spread over the same devices (EP = tensor_parallel),
  // fed by all-to-all dispatch. No tensor-parallel all-reduce remains. The sequences are dealt
  // to the devices as iteration_ns's ranks say (the serving simulator: each request's device,
  // where its KV cache is), else in batch order, round-robin; the step waits for the busiest
  // device's own part and then for the slowest expert device, which serves every device's tokens.
  bool data_parallel_attention = false;
  // Training's expert parallelism (Megatron-Core's EP): the experts spread over this many
  // data-parallel replicas (1: off). Each device holds experts / n of them, each split over its
  // tensor-parallel group as the dense MLP is, and computes the rows that all n replicas' tokens
  // route to them; every MoE layer's tokens go to their experts' replicas and back by two
  // all-to-alls between the replicas' devices of the same tensor-parallel rank, each of which
  // sends 1/tp of its replica's (with context parallelism: its rank's) tokens (sequence parallel). The MLP's tensor-parallel all-reduce
  // stays. Exclusive with expert_parallel (serving's EP = tp).
  int data_parallel_ep = 1;
};

// A placement of an MoE model's experts that cannot be (the one check the scenario keys, `sluice
// cost` and the cost model share): the deployment.moe key at fault (pipeline_parallel: the
// deployment's own), the problem, what is valid. `pp`: the pipeline stages (two-batch overlap
// and data-parallel attention are modelled for one).
struct MoeProblem {
  std::string key, problem, valid;
};
std::optional<MoeProblem> moe_problem(const ModelSpec& m, const MoeOptions& mo, int tp, int pp = 1);

struct CostOptions {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  std::string tables_dir;  // results/calibration/<device>; "" = roofline only
  double kernel_floor_ns = 2000;  // roofline: no kernel is shorter (launch + tail); cost_source params
  double max_shape_ratio = 16;    // table: scale a GEMM from a measured shape at most this far (weight size)
  // Tensor-parallel all-reduce of `bytes` over the replica's tp devices, from the network's
  // flow simulation on a topology (the serving study sets it when a topology is named);
  // empty: the analytic ring over the hardware's interconnect.
  std::function<double(double bytes)> allreduce_ns;
  // Model the memory-bound layer work as an engine with fused kernels would run it (vLLM's
  // fused add+RMSNorm, rotary and SiLU·mul kernels): one roofline kernel per op at its least
  // traffic, instead of the measured PyTorch kernels (rope alone is several kernels there).
  // Set with tables_dir naming another device's tables: that device, whose ceilings read its
  // tables; each table time is then moved to this device by the ratio of the two rooflines
  // (its launch floors swapped for this device's), and labelled derived.
  std::shared_ptr<const HardwareSpec> tables_device;
  bool fused_elementwise = false;  // alias of implementation = fused (kept for old scenarios)
  Implementation implementation = Implementation::PytorchLean;
  // The world's fabric times every transfer (tensor-parallel all-reduces, pipeline hand-offs)
  // as flows: those operations cost no time here, and their bytes come from the functions below.
  bool comm_on_fabric = false;
  // Megatron's sequence parallelism (training): the GEMMs every tensor-parallel rank runs whole
  // (latent attention's query-bottleneck and latent down projections) run on the rank's 1/tp of
  // the rows, as the rest of its non-GEMM work does there. Off (serving): on every row.
  bool sequence_parallel = false;
  // The pytorch profiles' per-layer glue kernels {always, more when a layer runs several token
  // rows}; unset: the counts fitted to model_steps.csv (cost_model.cpp, glue_kernels()). Tests
  // refit them, e.g. on one model's steps to predict another's.
  std::optional<std::array<double, 2>> glue_kernels;
  MoeOptions moe;  // a mixture-of-experts model's expert placement and routing
  // Every kernel's time (not the collectives') multiplied by this: an end of the cost model's
  // error band (hardware/cost_band.h), set by CostSource::apply under a CostBandScope.
  double time_scale = 1;
  // Training's multi-token prediction (DeepSeek-V3; Megatron-Core's mtp_num_layers): modules on
  // the last stage, each one more decoder layer of the model's last kind (an MoE one where it has
  // experts), its own embedding lookup of the shifted tokens, a 2h -> h projection (split over
  // tp), and one more LM head over every token. 0: none (serving drafts with them instead).
  int mtp_layers = 0;
  // Decoder layers on the first and the last pipeline stage (0: Megatron's even split; see
  // pipeline_stage_layers), e.g. fewer on a last stage that also runs the LM head and MTP.
  int first_stage_layers = 0, last_stage_layers = 0;
};

// The layers one pipeline stage holds, and what else runs on it.
struct LayerRange {
  int first = 0;           // its first decoder layer
  int count = 0;           // decoder layers on it
  bool embedding = false;  // the token embedding gather (the first stage)
  bool lm_head = false;    // the final norm, LM head and sampling of the rows that sample (the last stage)
  bool send = false;       // hands its activations to a next stage (every stage but the last)
  int mtp = 0;             // multi-token prediction modules after its layers (training's last stage; CostOptions::mtp_layers)
};
// Megatron's split of `layers` over `pp` stages: floor(layers / pp) each, the first layers % pp
// stages one more; the embedding on the first stage, the LM head on the last. first_layers and
// last_layers (> 0) set the ends' counts (Megatron's decoder_first/last_pipeline_num_layers),
// the stages between splitting the rest so; throws when a stage would be left without a layer.
LayerRange pipeline_stage_layers(int layers, int pp, int stage, int first_layers = 0, int last_layers = 0);

// <catalog_root()>/results/calibration/<hw.calibration>, or "" when the device has none.
std::string default_tables_dir(const HardwareSpec& hw);


class CostModel {
 public:
  CostModel(HardwareSpec hw, ModelSpec model, CostOptions opt);
  ~CostModel();
  CostModel(CostModel&&) noexcept;
  // Full breakdown of one iteration of the costed stage, the pipeline's slowest bound:
  // ceil(layers / pp) layers plus the LM head (and the embedding when pp == 1), summed over
  // operations, for `sluice cost` and tests.
  IterationCost iteration(std::span<const SeqWork> batch) const;
  // The same breakdown for pipeline stage `stage` as it is (its own layers, the embedding on the
  // first, the LM head on the last), or for any range of layers.
  IterationCost stage_iteration(std::span<const SeqWork> batch, int stage) const;
  IterationCost range_iteration(std::span<const SeqWork> batch, const LayerRange& r) const;
  // One slice: `l` new tokens after a prefix of `c` cached ones for `batch` sequences through
  // the layers of `r` (attention over the prefix grows with c); no LM-head rows (nothing samples).
  IterationCost slice(int batch, long l, long c, const LayerRange& r) const;
  // The hot-path total of stage_iteration (cached as iteration_ns is).
  double stage_ns(std::span<const SeqWork> batch, int stage) const;
  // t(l, c) of one slice on every pipeline stage at once (`out` has pp entries): `batch`
  // sequences of `l` new tokens after `c` cached ones; with `all_logits` the last stage also
  // runs the LM head over every token (training computes logits for all of them).
  void slice_stage_ns(int batch, long l, long c, bool all_logits, std::span<double> out) const;
  // Stage `stage`'s layers under Megatron's split (pipeline_stage_layers).
  LayerRange stage_range(int stage) const;
  // `tokens` new tokens per sequence for `batch` sequences, prefilled as `slices` equal slices
  // one after another, each after the previous slices' cache (slice() over the costed stage's
  // layers), through the decoder layers only (no LM head): the parts of all slices merged, as
  // model_steps.csv times a sliced prefill.
  IterationCost sliced_prefill(int batch, long tokens, int slices) const;
  // Single kernels by shape, for workloads that are not decoder LLMs (a DiT step): each costed
  // as the iteration costs its parts (tables first, scaled, then physics), moved to this
  // device when its tables are derived, with the sustained clock applied.
  //   gemm: y[M,N] = x[M,K] W[N,K]^T.
  OpCost gemm(const std::string& name, double M, double K, double N) const;
  //   attention of `q` query tokens over `kv` keys, `heads` heads of `head_dim` (no KV sharing).
  OpCost attention(const std::string& name, double q, double kv, int heads, int head_dim, bool causal) const;
  //   `kernels` memory-bound kernels over `tokens` rows of `bytes_per_token` in all: read from
  //   elementwise.csv's `table_op` at the same traffic, or ("" or absent) at the copy ceiling.
  OpCost elementwise(const std::string& name, const std::string& table_op, double tokens, double bytes_per_token,
                     double kernels) const;
  // The same total, without building strings: the serving simulator's hot path (a few hundred ns
  // + ~2 ns per decode sequence, `sluice bench cost`; per-token-count parts are cached lazily in
  // relaxed atomics, so concurrent calls from several threads are safe; decode shares are read
  // from a table built at construction). Equal to iteration().total_ns (a unit test holds it to
  // 1e-12 on random batches).
  double iteration_ns(std::span<const SeqWork> batch) const;
  // The same under data-parallel attention with each sequence's device given (ranks[i] for
  // batch[i], 0 to tensor_parallel - 1; a negative one is dealt by position, i mod
  // tensor_parallel, as iteration_ns deals them all). Without it: iteration_ns.
  double iteration_ns(std::span<const SeqWork> batch, std::span<const int32_t> ranks) const;
  // iteration_ns of a batch of decodes only (each entry one new token that samples), the
  // same value without counting the batch's kinds first (the steady-decode hot path).
  double decode_ns(std::span<const SeqWork> batch) const;
  const HardwareSpec& hardware() const;
  const ModelSpec& model() const;
  const CostOptions& options() const;
  // Layers on the costed (last, LM-head carrying) pipeline stage: ceil(layers / pp).
  int stage_layers() const;
  // Bytes each device of a stage all-reduces per iteration of `tokens` new tokens (the sum of
  // the stage's per-layer tensor-parallel all-reduces; 0 without tensor parallelism).
  double tp_allreduce_bytes(double tokens) const;
  // The same for pipeline stage `stage`'s own layers. Training's expert parallelism (experts split
  // over tp): an MoE layer's MLP all-reduce moves the rows its device's experts receive (k a
  // token, the busiest device's under skew), gathered and reduce-scattered over tp, and a
  // shared expert's output all-reduced besides.
  double tp_allreduce_bytes(double tokens, int stage) const;
  // All-reduces per iteration on stage `stage` (two per layer, one on an MoE layer whose tokens
  // move by all-to-all).
  int tp_allreduce_count(int stage) const;
  // Bytes each device sends per iteration of `tokens` new tokens in the MoE layers' dispatch
  // and combine all-to-alls on stage `stage` (0 unless experts move tokens by all-to-all), and
  // how many all-to-alls those are. Under FP8 or FP4 a dispatch sends its rows in FP8 (1 + 4/128
  // bytes an element, with their scales), the combine in the activations' dtype.
  double moe_alltoall_bytes(double tokens, int stage) const;
  // The dispatches' part of those bytes (0.5 when both go in the activations' dtype).
  double moe_dispatch_fraction() const;
  // Of what a device's dispatch sends to the devices at `positions` (one server's, as positions
  // in the expert-parallel group), the part a hierarchical all-to-all sends across: a token once
  // to the server rather than once to each of its devices holding one of its experts,
  // (1 - (1 - sum s)^k) / sum (1 - (1 - s)^k) over their shares s of the assignments (k picks
  // independent, as a2a_rows takes them; with group-limited routing, ExpertPlacement::hit of the
  // server's groups over its devices'); 1 for rows per expert (a row an expert either way).
  double moe_alltoall_server_share(const std::vector<int>& positions) const;
  int moe_alltoall_count(int stage) const;
  // Each expert-parallel device's part of the all-to-alls' destinations over their mean (empty
  // without expert parallelism): CollectiveOptions::a2a_weights.
  const std::vector<double>& moe_alltoall_weights() const;
  // The routing model's expected assignments per device for one MoE layer of `tokens` tokens:
  // token-expert pairs each device computes (expert parallelism; training's EP over replicas: from
  // every replica's `tokens`), slowest first not implied.
  std::vector<double> expert_tokens_per_device(double tokens) const;
  // The LM head GEMM over `rows` rows (training computes logits for every token).
  double lm_head_ns(double rows) const;
  // Bytes of activations one stage hands to the next for `tokens` new tokens.
  double activation_bytes(double tokens) const;
  // The implementation in force (fused_elementwise folded in).
  Implementation implementation() const;
  // The per-kernel floor (launch + gap under CUDA-graph replay) charged to every kernel that no
  // table measures: the device's kernel_launch term, or kernel_floor_ns when it has none.
  double kernel_ns() const;
  // How each GEMM of the model is read from gemm.csv: the measured shape it uses and the rule
  // when that shape is not its own (one line per GEMM).
  std::vector<std::string> gemm_sources() const;
  // Kernels one decoder layer launches, by op, for a step of `tokens` new tokens (for
  // `sluice cost` and tests; the same counts the iteration charges).
  std::vector<std::pair<std::string, int>> layer_kernels(bool prefill) const;

 public:
  struct Impl;  // public name only so the implementation file's helpers can reach it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
