// The cost model of one iteration (a forward pass of a batch on one pipeline stage).
//
// What an iteration is made of, per layer of the stage (iteration(): ceil(layers / pp) layers
// with the LM head, a bound on the pipeline's slowest stage; stage_ns() / stage_iteration():
// a stage's own layers under Megatron's split, the embedding on the first, the LM head on the
// last; slice(): any range of layers, l new tokens after a prefix of c):
//   gemm.qkv, gemm.o, gemm.gate_up (gemm.up), gemm.down   M = all new tokens of the batch
//   attention.prefill   fresh prompts as one batched call; chunks after a prefix one each
//   attention.decode    the decode sequences together, each over its own KV length
//   the implementation's memory-bound kernels (layer_elementwise): norms, rotary, cache
//   writes, activation, residual adds, each with its kernel count
//   allreduce           tensor parallel: 2 ring all-reduces of tokens x hidden
// and once per iteration: the embedding gather (first stage), the final norm (pytorch: of the
// sampled rows only), lm_head (only rows that sample a token: decode sequences and the chunk
// that finishes a prompt, SeqWork::produces_token), argmax (pytorch) or sampling (fused), the
// logits all-gather (tp > 1) and the send of activations to the next stage (pp > 1).
//
// Tensor parallel splits column-parallel GEMMs (qkv, gate_up, LM head) along N and
// row-parallel ones (o, down) along K; each device keeps heads / tp query heads and
// max(1, kv_heads / tp) KV heads (KV heads are replicated when tp exceeds them).
//
// Sources, in order: measured tables (interpolated, or scaled from the nearest measured point
// or shape: see hardware/tables.h), then physics: a kernel no table measures moves its least
// traffic at the copy ceiling (its FLOPs at the GEMM ceiling) and never costs less than the
// device's per-kernel launch floor (kernel_launch). A whole step differs from its kernels
// timed alone in three measured ways (model_steps.csv, Llama-2-7B and TinyLlama-1.1B):
// untabled kernels and their floors, the sustained clock of a long compute-bound step
// (compute-bound kernel time stretches by 1 / sustained_clock), and the glue kernels a plain
// PyTorch decoder layer launches that no table holds (glue_kernels(), fitted to those steps). Collectives are analytic (ring formulas over the
// device's scale-up links). Tables are measured in bf16; another dtype uses the roofline.
// Derived tables (CostOptions::tables_device) cost every part on the tables' device and move
// it to this one by the ratio of rooflines, with this device's launch floors.
//
// The serving hot path (iteration_ns) sums three precomputed parts: everything that depends
// only on the batch's total new tokens M (cached per M), everything that depends only on the
// sampled rows R (cached per R), and attention, which is per sequence: for decode a
// piecewise-linear share read from a table by context (filled at construction with the same
// expression, so the sums are the breakdown's term for term), a table interpolation for each
// prefill chunk.
#include "hardware/cost_model.h"

#include "config/paths.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "hardware/tables.h"
#include "hardware/cost_model_impl.h"  // CostModel::Impl and its parts (this file's private body)
#include "hardware/cost_model_attention.h"
#include "hardware/cost_model_moe.h"
#include "hardware/cost_model_elementwise.h"

namespace sluice {

std::string default_tables_dir(const HardwareSpec& hw) {
  if (hw.calibration.empty()) return "";
  return (std::filesystem::path(catalog_root()) / "results" / "calibration" / hw.calibration).string();
}

CostModel::CostModel(HardwareSpec hw, ModelSpec model, CostOptions opt)
    : impl_(std::make_unique<Impl>(std::move(hw), std::move(model), std::move(opt))) {}
CostModel::~CostModel() = default;
CostModel::CostModel(CostModel&&) noexcept = default;

const HardwareSpec& CostModel::hardware() const { return impl_->hw; }
const ModelSpec& CostModel::model() const { return impl_->m; }
const CostOptions& CostModel::options() const { return impl_->opt; }
int CostModel::stage_layers() const { return impl_->layers_stage; }
Implementation CostModel::implementation() const { return impl_->impl; }
double CostModel::kernel_ns() const { return impl_->knl_target; }

std::vector<std::pair<std::string, int>> CostModel::layer_kernels(bool prefill) const {
  const Impl& im = *impl_;
  ListSink sink;
  auto layer = [&](Part p) { sink(p); };
  im.layer_elementwise(prefill ? 512.0 : 1.0, layer);
  const std::vector<SeqWork> one{SeqWork{prefill ? 512 : 1, prefill ? 0 : 512, true}};
  ListSink attn;
  im.attention_parts<ListSink, false>(one, prefill ? 0 : 1, attn, im.layers_stage);
  std::vector<std::pair<std::string, int>> out;
  std::vector<Op> gemms = {Op::Qkv, Op::O, Op::GateUp, Op::Down};
  if (im.mla) gemms = {Op::QB, Op::KVA, Op::KVB, Op::O, Op::GateUp, Op::Down};
  if (im.mla && im.m.q_lora_rank > 0) gemms.insert(gemms.begin(), Op::QA);
  for (Op g : gemms) out.emplace_back(im.op_name(g), 1);
  for (const Part& p : attn.parts)
    out.emplace_back(im.op_name(p.op), static_cast<int>(std::lround(p.kernels / im.layers_stage)));
  for (const Part& p : sink.parts) out.emplace_back(im.op_name(p.op), static_cast<int>(std::lround(p.kernels)));
  return out;
}

std::vector<std::string> CostModel::gemm_sources() const {
  const Impl& im = *impl_;
  std::vector<std::string> out;
  std::vector<std::pair<Op, const Impl::GemmPlan*>> plans = {{Op::Qkv, &im.qkv}, {Op::O, &im.o}};
  if (im.mla) {  // latent attention: its projections in place of qkv
    plans = {{Op::QB, &im.lq_b}, {Op::KVA, &im.lkv_a}, {Op::KVB, &im.lkv_b}, {Op::KVBContext, &im.lkv_b}, {Op::O, &im.o}};
    if (im.m.q_lora_rank > 0) plans.insert(plans.begin(), {Op::QA, &im.lq_a});
  }
  if (im.m.moe_layers_in(0, im.m.layers) < im.m.layers) plans.insert(plans.end(), {{Op::GateUp, &im.up}, {Op::Down, &im.down}});
  if (im.m.moe()) {
    plans.push_back({Op::Router, &im.router});
    if (im.m.shared_experts > 0) plans.insert(plans.end(), {{Op::SharedGateUp, &im.sh_up}, {Op::SharedDown, &im.sh_down}});
  }
  plans.push_back({Op::LmHead, &im.lm});
  for (const auto& [op, g] : plans) {
    std::string line = fmt::format("{} (K {:.0f}, N {:.0f}): ", im.op_name(op), g->K, g->N);
    if (!im.gemm || g->shape < 0) {
      line += "roofline (no measured shape within the weight-size ratio)";
    } else {
      const auto& s = im.gemm->shapes()[static_cast<size_t>(g->shape)];
      if (im.gemm->exact(g->shape, g->K, g->N))
        line += fmt::format("measured as {}", s.op);
      else
        line += fmt::format("scaled from {} (K {:.0f}, N {:.0f}): its time at the same M x the ratio of the two rooflines "
                            "(a memory-bound M by weight bytes, a compute-bound one by FLOPs)",
                            s.op, s.K, s.N);
    }
    out.push_back(std::move(line));
  }
  return out;
}

const char* implementation_name(Implementation i) {
  switch (i) {
    case Implementation::PytorchLean: return "pytorch-lean";
    case Implementation::PytorchNaive: return "pytorch-naive";
    case Implementation::Fused: return "fused";
  }
  return "?";
}

std::optional<MoeProblem> moe_problem(const ModelSpec& m, const MoeOptions& mo, int tp, int pp) {
  const int E = m.experts;
  if (mo.data_parallel_ep > 1) {
    if (E % mo.data_parallel_ep != 0)
      return MoeProblem{"expert_parallel",
                        fmt::format("expert parallelism over {} replicas does not divide the {} experts of {}", mo.data_parallel_ep, E, m.name),
                        fmt::format("a divisor of {} (and of dp)", E)};
    if (mo.expert_parallel || mo.eplb || mo.two_batch_overlap)
      return MoeProblem{"expert_parallel", "expert parallelism over data-parallel replicas (training) is combined with serving's EP, EPLB or two-batch overlap",
                        "one of them"};
  }
  // (Under EPLB the slots are what divide: experts and their redundant copies, as DeepSeek's
  // decode places 256 + 32 over 144 GPUs; checked below.)
  if (mo.expert_parallel && !mo.eplb && E % tp != 0)
    return MoeProblem{"expert_parallel",
                      fmt::format("expert parallelism over {} devices does not divide the {} experts of {}", tp, E, m.name),
                      fmt::format("a tensor_parallel dividing {}, eplb with redundant_experts making up a multiple of it, or expert_parallel: false", E)};
  if (mo.alltoall && !mo.expert_parallel)
    return MoeProblem{"dispatch", "all-to-all dispatch moves tokens between the devices of expert parallelism, and it is off",
                      "allreduce, or expert_parallel: true"};
  if (mo.eplb && !mo.expert_parallel)
    return MoeProblem{"eplb", "balances experts over the devices of expert parallelism, and it is off", "false, or expert_parallel: true"};
  if (mo.redundant_experts > 0 && !mo.eplb)
    return MoeProblem{"redundant_experts", "copies are placed by eplb, and it is off", "0, or eplb: true"};
  if (mo.eplb && mo.redundant_experts > E)
    return MoeProblem{"redundant_experts", fmt::format("more copies than the {} experts", E), fmt::format("0 to {}", E)};
  if (mo.eplb && (E + mo.redundant_experts) % tp != 0)
    return MoeProblem{"redundant_experts", fmt::format("{} experts + {} copies do not divide over {} devices", E, mo.redundant_experts, tp),
                      fmt::format("a count making experts + copies a multiple of {}", tp)};
  if (mo.two_batch_overlap && !mo.alltoall)
    return MoeProblem{"two_batch_overlap", "overlaps the all-to-alls with compute, and dispatch is by all-reduce", "dispatch: alltoall, or false"};
  if (mo.data_parallel_attention && !mo.alltoall)
    return MoeProblem{"data_parallel_attention",
                      "each device's own tokens reach the experts by all-to-all under data-parallel attention, and dispatch is by all-reduce",
                      "expert_parallel: true with dispatch: alltoall, or false"};
  if (mo.data_parallel_attention && tp < 2)
    return MoeProblem{"data_parallel_attention", "splits the batch over the tensor-parallel devices, and there is one",
                      "tensor_parallel of 2 or more, or false"};
  if (mo.two_batch_overlap && pp > 1)
    return MoeProblem{"two_batch_overlap", "overlaps a single stage's compute with its communication", "pipeline_parallel: 1, or false"};
  if (mo.data_parallel_attention && pp > 1)
    return MoeProblem{"pipeline_parallel", "data-parallel attention deals each stage's sequences over its devices, and pipeline stages are not modelled with it",
                      "1 with data_parallel_attention, or data_parallel_attention: false"};
  if (mo.zipf_s != 1 && mo.routing != MoeOptions::Routing::Zipf)
    return MoeProblem{"zipf_s", "only Zipf routing has an exponent", "routing: zipf, or leave it out"};
  if (mo.routing == MoeOptions::Routing::Measured) {
    if (static_cast<int>(mo.expert_load.size()) != E)
      return MoeProblem{"expert_load", fmt::format("{} counts for the {} experts of {}", mo.expert_load.size(), E, m.name),
                        fmt::format("one count per expert, {} of them", E)};
    double total = 0;
    for (double x : mo.expert_load) total += x;
    if (!(total > 0)) return MoeProblem{"expert_load", "every count is 0: no expert was ever chosen", "counts with a positive sum"};
  } else if (!mo.expert_load.empty()) {
    return MoeProblem{"expert_load", "only measured routing reads logged counts", "routing: measured, or leave expert_load out"};
  }
  return std::nullopt;
}

Implementation implementation_from_name(const std::string& name) {
  for (Implementation i : {Implementation::PytorchLean, Implementation::PytorchNaive, Implementation::Fused})
    if (name == implementation_name(i)) return i;
  throw std::invalid_argument(fmt::format("unknown implementation '{}' (pytorch-lean, pytorch-naive, fused)", name));
}

double CostModel::tp_allreduce_bytes(double tokens) const {
  // Two all-reduces per layer (after attention and after the MLP) of tokens x hidden; one on
  // an MoE layer whose tokens move by all-to-all. (Serving's: training's expert parallelism,
  // whose experts' rows move instead, goes by the stage, below.)
  const Impl& im = *impl_;
  if (im.tp <= 1) return 0.0;
  const int moe = im.moe_ar_saved(im.m.layers - im.layers_stage, im.layers_stage);
  return (2.0 * im.layers_stage - moe) * tokens * im.hidden * im.b;
}

double CostModel::tp_allreduce_bytes(double tokens, int stage) const {
  const Impl& im = *impl_;
  if (im.tp <= 1) return 0.0;
  double per_token = tp_allreduce_count(stage);
  // Training's expert parallelism splits each expert over tp as the dense MLP is (Megatron-Core's
  // expert tensor parallelism equal to tp): an MoE layer's MLP all-reduce becomes the all-gather
  // over tp of the rows its device's experts receive and the reduce-scatter of their outputs, the
  // bytes of an all-reduce of those rows (k a token under even routing; the busiest device's
  // under skew, as its compute is), and a shared expert's output is all-reduced as a dense MLP's.
  if (im.pool > 1) {
    const double Lm = im.span_of(stage_range(stage)).Lm;
    double rows = 0;  // a replica's token-expert rows per token on the busiest device of its EP group
    for (const auto& sh : im.experts.dev_share) rows = std::max(rows, ExpertPlacement::rows(sh, im.pool, im.m.experts_per_token));
    per_token += Lm * (rows - 1 + (im.m.shared_experts > 0 ? 1 : 0));
  }
  return per_token * tokens * im.hidden * im.b;
}

int CostModel::tp_allreduce_count(int stage) const {
  if (impl_->tp <= 1) return 0;  // (data-parallel attention too: nothing is split over devices)
  const CostModel::Impl::Span sp = impl_->span_of(stage_range(stage));  // (multi-token prediction's layers among them)
  return static_cast<int>(2 * sp.L) - (impl_->moe_ar_saved(0, impl_->m.layers) > 0 ? static_cast<int>(sp.Lm) : 0);
}

int CostModel::moe_alltoall_count(int stage) const {
  return impl_->a2a ? 2 * static_cast<int>(impl_->span_of(stage_range(stage)).Lm) : 0;
}

double CostModel::moe_alltoall_bytes(double tokens, int stage) const {
  return moe_alltoall_count(stage) / 2 * impl_->a2a_pair_bytes(tokens);  // a dispatch and a combine a layer
}

double CostModel::moe_dispatch_fraction() const { return impl_->dispatch_fraction(); }

double CostModel::moe_alltoall_server_share(const std::vector<int>& positions) const {
  const Impl& im = *impl_;
  if (im.opt.moe.rows_per_expert || im.experts.dev_share.size() < 2) return 1.0;
  const int k = im.m.experts_per_token;
  double server = 0, devices = 0;
  if (im.experts.grouped()) {  // (group-limited routing: the server's groups and each device's, ExpertPlacement::hit)
    std::vector<double> sum(im.experts.group_share.size(), 0.0);
    for (int p : positions) {
      const std::vector<double>& dg = im.experts.dev_group.at(static_cast<size_t>(p));
      for (size_t g = 0; g < sum.size(); ++g) sum[g] += dg[g];
      devices += im.experts.hit(dg);
    }
    return devices > 0 ? std::min(1.0, im.experts.hit(sum) / devices) : 1.0;
  }
  for (int p : positions) {
    double d = 0;
    for (double q : im.experts.dev_share.at(static_cast<size_t>(p))) d += q;
    d = std::min(1.0, d);
    server += d;
    devices += 1 - std::pow(1 - d, k);
  }
  return devices > 0 ? std::min(1.0, (1 - std::pow(1 - std::min(1.0, server), k)) / devices) : 1.0;
}

const std::vector<double>& CostModel::moe_alltoall_weights() const { return impl_->experts.a2a_weight; }

std::vector<double> CostModel::expert_tokens_per_device(double tokens) const {
  const Impl& im = *impl_;
  std::vector<double> out;
  for (const auto& sh : im.experts.dev_share) out.push_back(ExpertPlacement::rows(sh, tokens * im.pool, im.m.experts_per_token));
  return out;
}

// (Moved like every other part: derived tables and the error band's scale apply to it too.)
double CostModel::lm_head_ns(double rows) const {
  if (rows <= 0) return 0.0;
  Part p = impl_->gemm_part(Op::LmHead, impl_->lm, rows);
  impl_->derive(p);
  return p.ns;
}

double CostModel::activation_bytes(double tokens) const { return tokens * impl_->hidden * impl_->b; }

namespace {
// New tokens, sampling rows and decode sequences of a batch.
// (Drafts a speculative decode step verifies count as tokens and rows, SeqWork::drafts.)
struct BatchTotals {
  long new_tokens, rows, decodes, drafts;
};
BatchTotals batch_totals(std::span<const SeqWork> batch) {
  BatchTotals t{0, 0, 0, 0};
  for (const SeqWork& s : batch) {
    if (s.new_tokens <= 0) continue;
    t.new_tokens += s.new_tokens + s.drafts;
    t.rows += s.produces_token ? 1 + s.drafts : 0;
    t.decodes += s.new_tokens == 1 ? 1 : 0;
    t.drafts += s.drafts;
  }
  return t;
}
// Data-parallel attention: each device's own (non-empty) share of the batch, to `each`: the
// sequences `ranks` puts on it, or without ranks (or for a negative one) those at positions
// i = device mod dp, the batch dealt round-robin.
template <class Each>
void dp_shares(const CostModel::Impl& im, std::span<const SeqWork> batch, std::span<const int32_t> ranks, Each&& each) {
  // One pass to bucket the sequences by device (stable: each device's in batch order), not a
  // pass over the batch per device: at DeepSeek's DP 144 that was 144 passes of ~10k rows a step.
  // (Reused: the serving hot path calls this every step. So `each` must not call dp_shares again:
  // a nested call would overwrite the spans and cursors this one is walking.)
  thread_local std::vector<SeqWork> own;
  thread_local std::vector<uint32_t> at, dev;
  const size_t dp = static_cast<size_t>(im.dp), n = batch.size();
  dev.resize(n);
  at.assign(dp + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const int32_t r = i < ranks.size() ? ranks[i] : -1;
    dev[i] = static_cast<uint32_t>(r >= 0 && static_cast<size_t>(r) < dp ? static_cast<size_t>(r) : i % dp);
    ++at[dev[i] + 1];
  }
  for (size_t g = 0; g < dp; ++g) at[g + 1] += at[g];
  own.resize(n);
  for (size_t i = 0; i < n; ++i) own[at[dev[i]]++] = batch[i];  // (at[g] ends at device g's end)
  size_t from = 0;
  for (size_t g = 0; g < dp; ++g) {
    if (at[g] > from) each(std::span<const SeqWork>(own.data() + from, at[g] - from));
    from = at[g];
  }
}
}  // namespace

IterationCost CostModel::iteration(std::span<const SeqWork> batch) const {
  const Impl& im = *impl_;
  const Impl::Span& sp = im.spans[0];
  // The costed stage is the last one's layer count: its layers are the model's last (an MoE
  // model's dense layers come first).
  const int L = static_cast<int>(sp.L);
  return range_iteration(batch, LayerRange{impl_->m.layers - L, L, sp.embed, sp.head, sp.send});
}

IterationCost CostModel::stage_iteration(std::span<const SeqWork> batch, int stage) const {
  return range_iteration(batch, stage_range(stage));
}

IterationCost CostModel::range_iteration(std::span<const SeqWork> batch, const LayerRange& r) const {
  const Impl& im = *impl_;
  const Impl::Span sp = im.span_of(r);
  auto parts_of = [&](std::span<const SeqWork> seqs) {
    const auto [M, R, nd, drafts] = batch_totals(seqs);
    ListSink sink;
    Impl::Moved<ListSink> moved{im, sink};
    im.dense_parts(static_cast<double>(M), moved, sp);
    if (sp.L > 0) im.attention_parts<Impl::Moved<ListSink>, true>(seqs, nd, moved, sp.L, drafts);
    if (sp.head) im.row_parts(static_cast<double>(R), moved);
    return sink;
  };
  ListSink sink;
  if (im.dp > 1) {
    // Data-parallel attention: the busiest device's own parts, then the experts over all tokens.
    double busiest = -1;
    long tokens = 0;
    dp_shares(im, batch, {}, [&](std::span<const SeqWork> own) {
      tokens += batch_totals(own).new_tokens;
      ListSink s = parts_of(own);
      double t = 0;
      for (const Part& p : s.parts) t += p.ns;
      if (t > busiest) {
        busiest = t;
        sink = std::move(s);
      }
    });
    Impl::Moved<ListSink> moved{im, sink};
    im.experts_dp_parts(static_cast<double>(tokens), moved, sp);
  } else {
    sink = parts_of(batch);
  }
  std::stable_sort(sink.parts.begin(), sink.parts.end(),
                   [](const Part& a, const Part& b) { return static_cast<int>(a.op) < static_cast<int>(b.op); });
  IterationCost out;
  for (const Part& p : sink.parts) {
    std::string src = Impl::source_name(p.src, p.file);
    if (im.derived && p.file != File::None) src = "derived(" + im.opt.tables_device->name + "):" + src;
    out.ops.push_back(OpCost{im.op_name(p.op), p.ns, std::move(src), p.flops, p.bytes, p.kernels});
    out.total_ns += p.ns;
    out.kernels += p.kernels;
  }
  return out;
}

namespace {
OpCost named(const CostModel::Impl* im, const std::string& name, Part p);
}  // namespace

OpCost CostModel::gemm(const std::string& name, double M, double K, double N) const {
  const Impl& im = *impl_;
  Impl::GemmPlan g{K, N, im.gemm ? im.gemm->nearest(K, N, im.opt.max_shape_ratio) : -1};
  Part p = im.gemm_part(Op::Qkv, g, M);
  im.derive(p);
  return named(impl_.get(), name, p);
}

OpCost CostModel::attention(const std::string& name, double q, double kv, int heads, int head_dim, bool causal) const {
  const Impl& im = *impl_;
  const double pairs = causal ? q * (kv - q) + q * (q + 1) / 2 : q * kv;
  const double flops = 4.0 * head_dim * heads * pairs, bytes = im.b * head_dim * heads * (2 * q + 2 * kv);
  Part p{Op::AttnPrefill, Src::Roofline, File::None, 0, flops, bytes, 1};
  const int group = im.prefill ? im.prefill->plan(1.0, causal) : -1;
  if (group >= 0) {
    // The measured group at the length of equal work (sqrt(q kv) queries over as many keys),
    // scaled by the width of the heads; a head dim that is not a multiple of 32 is padded to
    // one, as the flash kernels tile it (DiT-XL's 72 runs as 96).
    const auto& gr = im.prefill->groups()[static_cast<size_t>(group)];
    const double l = causal ? q : std::sqrt(q * kv), padded = std::ceil(head_dim / 32.0) * 32;
    Estimate e = im.prefill->estimate(group, l, im.ceil);
    const double scale = heads * padded / (gr.heads * gr.head_dim);
    e.ns = std::max(e.ns * scale, im.prefill->min_ns());
    const bool exact = scale == 1 && q == kv && !e.scaled;
    p = Part{Op::AttnPrefill, exact ? Src::Table : Src::Scaled, File::Prefill, e.ns, flops, bytes, 1};
  } else {
    p.ns = im.roof(flops / im.hw.attention_efficiency(q), bytes);
  }
  p.ns = im.in_step(p.ns, flops, bytes);
  im.derive(p);
  return named(impl_.get(), name, p);
}

OpCost CostModel::elementwise(const std::string& name, const std::string& table_op, double tokens, double bytes_per_token,
                              double kernels) const {
  const Impl& im = *impl_;
  const costtab::ElementwiseTable::Op* t = im.elem && !table_op.empty() ? im.elem->find(table_op) : nullptr;
  // With a table: `kernels` calls of the measured op, each moving its share of the traffic.
  Part p = t ? im.elem_part(Op::Act, t, tokens, bytes_per_token / kernels, kernels, 1, true)
             : im.kernels_part(Op::Act, kernels, tokens * bytes_per_token / kernels);
  if (t) p.src = Src::Scaled;
  im.derive(p);
  return named(impl_.get(), name, p);
}

IterationCost CostModel::sliced_prefill(int batch, long tokens, int slices) const {
  if (batch < 1 || slices < 1 || tokens < slices || tokens % slices != 0)
    throw std::invalid_argument(fmt::format("{} tokens do not cut into {} equal slices", tokens, slices));
  const long s = tokens / slices;
  const Impl::Span& sp = impl_->spans[0];
  const LayerRange costed{impl_->m.layers - static_cast<int>(sp.L), static_cast<int>(sp.L), sp.embed, sp.head, sp.send};
  IterationCost it;
  for (int k = 0; k < slices; ++k) {
    const IterationCost one = slice(batch, s, k * s, costed);
    for (const auto& o : one.ops) {
      auto at = std::find_if(it.ops.begin(), it.ops.end(), [&](const OpCost& q) { return q.op == o.op && q.source == o.source; });
      if (at == it.ops.end()) {
        it.ops.push_back(o);
      } else {
        at->ns += o.ns;
        at->flops += o.flops;
        at->bytes += o.bytes;
        at->kernels += o.kernels;
      }
    }
    it.total_ns += one.total_ns;
    it.kernels += one.kernels;
  }
  return it;
}

IterationCost CostModel::slice(int batch, long l, long c, const LayerRange& r) const {
  if (batch < 1 || l < 1 || c < 0) throw std::invalid_argument(fmt::format("a slice of {} tokens after {} for {} sequences", l, c, batch));
  const std::vector<SeqWork> step(static_cast<size_t>(batch), SeqWork{static_cast<int>(l), static_cast<int>(c), false});
  return range_iteration(step, r);
}

namespace {
OpCost named(const CostModel::Impl* im, const std::string& name, Part p) {
  std::string src = CostModel::Impl::source_name(p.src, p.file);
  if (im->derived && p.file != File::None) src = "derived(" + im->opt.tables_device->name + "):" + src;
  return OpCost{name, p.ns, std::move(src), p.flops, p.bytes, p.kernels};
}
}  // namespace

namespace {
// The whole model's time of a batch whose totals are known: the parts cached by new tokens M
// and sampled rows R, and attention over its nd decodes and its chunks.
double whole_ns(const CostModel::Impl& im, std::span<const SeqWork> batch, long M, long R, long nd, long drafts = 0) {
  SumSink sink;
  CostModel::Impl::Moved<SumSink> moved{im, sink};
  im.attention_parts<CostModel::Impl::Moved<SumSink>, false>(batch, nd, moved, im.layers_stage, drafts);
  return im.cached(im.span_cache[0].get(), M, true, im.spans[0]) + im.cached(im.rows_cache.get(), R, false, im.spans[0]) +
         sink.total;
}
}  // namespace

namespace {
// The busiest device's own parts (attention over its sequences, its tokens' dense layers, shared
// experts, LM head rows and all-to-alls), then the routed experts over every device's tokens.
double dp_whole_ns(const CostModel::Impl& im, std::span<const SeqWork> batch, std::span<const int32_t> ranks = {}) {
  double busiest = 0;
  long tokens = 0;
  dp_shares(im, batch, ranks, [&](std::span<const SeqWork> own) {
    const auto [M, R, nd, drafts] = batch_totals(own);
    tokens += M;
    busiest = std::max(busiest, whole_ns(im, own, M, R, nd, drafts));
  });
  return busiest + im.experts_dp_ns(tokens, im.spans[0]);
}
}  // namespace

double CostModel::decode_ns(std::span<const SeqWork> batch) const {
  if (impl_->dp > 1) return dp_whole_ns(*impl_, batch);
  const long n = static_cast<long>(batch.size());
  return whole_ns(*impl_, batch, n, n, n);
}

double CostModel::iteration_ns(std::span<const SeqWork> batch, std::span<const int32_t> ranks) const {
  if (impl_->dp > 1) return dp_whole_ns(*impl_, batch, ranks);
  return iteration_ns(batch);
}

double CostModel::iteration_ns(std::span<const SeqWork> batch) const {
  if (impl_->dp > 1) return dp_whole_ns(*impl_, batch);
  const auto [M, R, nd, drafts] = batch_totals(batch);
  return whole_ns(*impl_, batch, M, R, nd, drafts);
}

double CostModel::stage_ns(std::span<const SeqWork> batch, int stage) const {
  const Impl& im = *impl_;
  if (stage < 0 || stage >= im.pp) throw std::invalid_argument(fmt::format("stage {} of a {}-stage pipeline", stage, im.pp));
  const int k = im.stage_span[static_cast<size_t>(stage)];
  const Impl::Span& sp = im.spans[static_cast<size_t>(k)];
  if (im.dp > 1) return dp_whole_ns(im, batch);  // (one stage: the whole model)
  const auto [M, R, nd, drafts] = batch_totals(batch);
  SumSink sink;
  Impl::Moved<SumSink> moved{im, sink};
  if (sp.L > 0) im.attention_parts<Impl::Moved<SumSink>, false>(batch, nd, moved, sp.L, drafts);
  return im.cached(im.span_cache[static_cast<size_t>(k)].get(), M, true, sp) +
         (sp.head ? im.cached(im.rows_cache.get(), R, false, sp) : 0.0) + sink.total;
}

void CostModel::slice_stage_ns(int batch, long l, long c, bool all_logits, std::span<double> out) const {
  const Impl& im = *impl_;
  if (batch < 1 || l < 1 || c < 0 || static_cast<int>(out.size()) != im.pp)
    throw std::invalid_argument(fmt::format("a slice of {} tokens after {} for {} sequences over {} stages", l, c, batch, out.size()));
  if (im.dp > 1)  // (its cached parts leave the routed experts to dp_whole_ns, which this does not deal)
    throw std::logic_error("internal: slice_stage_ns under data-parallel attention (pipeline stages are refused with it)");
  // One layer's attention, once: every stage runs the same attention per layer.
  const SeqWork w{static_cast<int>(l), static_cast<int>(c), false};
  std::array<SeqWork, 8> few;
  std::vector<SeqWork> many;
  std::span<const SeqWork> seqs;
  if (batch <= static_cast<int>(few.size())) {
    few.fill(w);
    seqs = std::span<const SeqWork>(few.data(), static_cast<size_t>(batch));
  } else {
    many.assign(static_cast<size_t>(batch), w);
    seqs = many;
  }
  SumSink sink;
  Impl::Moved<SumSink> moved{im, sink};
  im.attention_parts<Impl::Moved<SumSink>, false>(seqs, 0, moved, 1.0, 0, /*paged_context=*/false);
  const long M = static_cast<long>(batch) * l;
  const double head = all_logits ? lm_head_ns(static_cast<double>(M)) : 0.0;
  // Once per distinct stage (a deep pipeline has at most four kinds: first, last, and the
  // middle stages with floor or ceil layers).
  std::array<double, 8> per_span;
  const size_t kinds = std::min(per_span.size(), im.spans.size());
  for (size_t k = 0; k < kinds; ++k) {
    const Impl::Span& sp = im.spans[k];
    per_span[k] = im.cached(im.span_cache[k].get(), M, true, sp) + sp.L * sink.total + (sp.head ? head : 0.0);
  }
  for (int s = 0; s < im.pp; ++s) {
    const size_t k = static_cast<size_t>(im.stage_span[static_cast<size_t>(s)]);
    const Impl::Span& sp = im.spans[k];
    out[static_cast<size_t>(s)] = k < kinds ? per_span[k]
                                            : im.cached(im.span_cache[k].get(), M, true, sp) + sp.L * sink.total + (sp.head ? head : 0.0);
  }
}

LayerRange CostModel::stage_range(int stage) const {
  const Impl& im = *impl_;
  if (stage < 0 || stage >= im.pp) throw std::invalid_argument(fmt::format("stage {} of a {}-stage pipeline", stage, im.pp));
  return im.ranges[static_cast<size_t>(stage)];
}

LayerRange pipeline_stage_layers(int layers, int pp, int stage, int first_layers, int last_layers) {
  if (pp < 1 || layers < pp || stage < 0 || stage >= pp)
    throw std::invalid_argument(fmt::format("stage {} of {} layers over {} stages", stage, layers, pp));
  // The ends Megatron lets a job set (decoder_first/last_pipeline_num_layers); the stages between
  // take what is left, each at least one layer.
  const int head = pp > 1 ? first_layers : 0, tail = pp > 1 ? last_layers : 0;
  const int ends = (head > 0) + (tail > 0);
  if (head < 0 || tail < 0 || layers - head - tail < pp - ends || (ends == pp && head + tail != layers))
    throw std::invalid_argument(fmt::format("{} layers over {} stages with {} on the first and {} on the last", layers, pp, head, tail));
  LayerRange r;
  if (head > 0 && stage == 0) {
    r.count = head;
  } else if (tail > 0 && stage == pp - 1) {
    r.count = tail, r.first = layers - tail;
  } else {
    // Megatron's split of the rest: every stage floor(n / k) layers, the first n % k one more.
    const int k = pp - ends, n = layers - head - tail, i = stage - (head > 0 ? 1 : 0);
    const int base = n / k, extra = n % k;
    r.count = base + (i < extra ? 1 : 0);
    r.first = head + i * base + std::min(i, extra);
  }
  r.embedding = stage == 0;
  r.lm_head = stage == pp - 1;
  r.send = stage < pp - 1;
  return r;
}

}  // namespace sluice
