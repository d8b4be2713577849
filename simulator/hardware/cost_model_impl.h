// The private body of hardware/cost_model.cpp: CostModel::Impl (the tables, the per-layer
// kernels of each implementation, the caches of the serving hot path). The parts an iteration
// is summed from and their sinks are in cost_model_parts.h, expert placement in
// cost_model_experts.h, attention in cost_model_attention.h, a layer's memory-bound kernels and
// glue in cost_model_elementwise.h. Included by cost_model.cpp alone, so
// the whole cost model stays one translation unit: its helpers keep internal linkage and the
// compiler inlines the hot path exactly as before the split (moving them into a header shared
// by several files made GCC stop inlining them: Vidur's benchmark went from 484 to 501 M
// instructions under callgrind).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "hardware/cost_model.h"
#include "hardware/cost_model_experts.h"
#include "hardware/cost_model_parts.h"
#include "hardware/tables.h"

namespace sluice {



struct CostModel::Impl {
  HardwareSpec hw;
  ModelSpec m;
  CostOptions opt;
  Implementation impl = Implementation::PytorchLean;
  double knl = 0;  // per-kernel floor (launch + gap) of kernels no table measures
  Ceilings ceil;
  // Derived tables: the ceilings and launch floor of this device (ceil and knl then hold the
  // tables device's, which cost every kernel before derive() moves it here).
  bool derived = false;
  Ceilings target;
  double knl_target = 0;
  int tp = 1, pp = 1, layers_stage = 0;
  // Data-parallel attention: the devices the batch is dealt over and the experts spread over (the
  // deployment's tensor_parallel), tp then 1 (all else whole on every device). 1: off.
  int dp = 1;
  // What one costed unit of work holds: decoder layers, and whether the embedding gather, the
  // LM head (with the final norm and sampling) and the send to the next stage are on it.
  struct Span {
    double L = 0;
    bool embed = false, head = false, send = false;
    double Lm = 0;  // of the L layers, those with an MoE block in place of the dense MLP
    double mtp = 0;  // multi-token prediction modules (their layers among L): projection, embedding, LM head each
  };
  // spans[0]: the legacy costed stage (ceil(layers / pp) layers, the LM head, the embedding when
  // pp == 1, the send when pp > 1) that iteration() and iteration_ns() cost; then one span per
  // distinct pipeline stage under Megatron's split, stage_span[s] its index.
  std::vector<Span> spans;
  std::vector<int> stage_span;
  std::vector<LayerRange> ranges;
  std::vector<std::unique_ptr<std::atomic<double>[]>> span_cache;  // dense parts per span, by M
  double H = 0, KV = 0, hd = 0, hidden = 0, ffn = 0, vocab = 0, b = 2;
  // Precision (ModelSpec::weights, kv_fp8): bytes of a weight, of a GEMM input row element and of
  // a KV element, and the ceilings its GEMMs run at (ceil itself for bf16).
  Precision prec = Precision::BF16;
  double wb = 2, ab = 2, kvb = 2;
  bool kv8 = false;
  bool moved_decode = false;  // derived || kv8: the decode attention part needs its FLOPs and bytes
  Ceilings pceil, ptarget;  // the precision's GEMM ceilings on the tables device, and on this one (derived)

  std::optional<costtab::GemmTable> gemm;
  std::optional<costtab::DecodeTable> decode;
  std::optional<costtab::PrefillTable> prefill;
  std::optional<costtab::SliceTable> slice;
  std::optional<costtab::ElementwiseTable> elem;

  struct GemmPlan {
    double K = 0, N = 0;
    int shape = -1;
  };
  GemmPlan qkv, o, up, down, lm;
  GemmPlan mtp_proj;  // a multi-token prediction module's projection of [hidden; embedding], 2h -> h / tp
  // Latent attention (m.mla()): the query's bottleneck down (replicated) and up (split by heads),
  // the latent down (replicated) and its up-projection to keys and values (split by heads).
  GemmPlan lq_a, lq_b, lkv_a, lkv_b;
  bool mla = false;
  double latent = 0;  // the cached latent per token: kv_lora_rank + qk_rope_head_dim
  costtab::DecodeTable::Plan dplan;
  // Decode shares by context, row-major over the plan's batch rows: dshare[row * dshare_ctx + c]
  // is DecodeTable::share(row, (c + 1) * len_scale), for contexts below dshare_ctx.
  std::vector<double> dshare;
  int dshare_ctx = 0;
  // DecodeTable::bracket of each batch size below 1024 (its two logarithms, once).
  struct Bracket {
    size_t lo, hi;
    double w;
  };
  std::vector<Bracket> dbracket;
  int pgroup = -1;
  double prefill_head_scale = 1, slice_head_scale = 1;
  const costtab::ElementwiseTable::Op *e_norm = nullptr, *e_rope = nullptr, *e_act = nullptr, *e_res = nullptr;

  mutable std::unique_ptr<std::atomic<double>[]> rows_cache;
  mutable std::unique_ptr<std::atomic<double>[]> experts_cache;  // data-parallel attention: experts_dp_ns by M

  Impl(HardwareSpec h, ModelSpec mm, CostOptions o_) : hw(std::move(h)), m(std::move(mm)), opt(std::move(o_)) {
    tp = opt.tensor_parallel;
    pp = opt.pipeline_parallel;
    if (tp < 1 || pp < 1) throw std::invalid_argument(fmt::format("tensor and pipeline parallel must be >= 1 (tp {}, pp {})", tp, pp));
    if (opt.moe.data_parallel_attention && m.moe()) {
      if (tp < 2 || pp != 1 || !opt.moe.expert_parallel || !opt.moe.alltoall)
        throw std::invalid_argument("data-parallel attention needs tensor_parallel >= 2, one pipeline stage and expert parallelism with all-to-all dispatch");
      if (hw.interconnect_Bps <= 0)
        throw std::invalid_argument(fmt::format("expert parallelism over {} devices needs scale-up links, and {} has none", tp, hw.name));
      dp = std::exchange(tp, 1);
    }
    if (m.layers <= 0 || m.hidden <= 0 || m.heads <= 0 || m.kv_heads <= 0 || m.head_dim <= 0 || m.ffn <= 0 || m.vocab <= 0)
      throw std::invalid_argument(fmt::format("model '{}' has a non-positive size", m.name));
    if (m.heads % tp != 0)
      throw std::invalid_argument(fmt::format("tensor parallel {} does not divide the {} heads of {}", tp, m.heads, m.name));
    if (m.kv_heads % tp != 0 && tp % m.kv_heads != 0)
      throw std::invalid_argument(
          fmt::format("tensor parallel {} neither divides nor is a multiple of the {} KV heads of {}", tp, m.kv_heads, m.name));
    if (pp > m.layers)
      throw std::invalid_argument(fmt::format("pipeline parallel {} exceeds the {} layers of {}", pp, m.layers, m.name));
    if (tp > 1 && hw.interconnect_Bps <= 0)
      throw std::invalid_argument(fmt::format("tensor parallel {} needs scale-up links, and {} has none", tp, hw.name));
    if (pp > 1 && hw.interconnect_Bps <= 0 && hw.pcie_Bps <= 0)
      throw std::invalid_argument(fmt::format("pipeline parallel {} needs a link between devices, and {} has none", pp, hw.name));
    if (hw.effective_flops() <= 0 || hw.effective_bandwidth_Bps() <= 0)
      throw std::invalid_argument(fmt::format("hardware '{}' has no compute or memory ceiling", hw.name));
    layers_stage = (m.layers + pp - 1) / pp;
    spans.push_back(Span{static_cast<double>(layers_stage), pp == 1, true, pp > 1,
                         static_cast<double>(m.moe_layers_in(m.layers - layers_stage, layers_stage))});
    for (int s = 0; s < pp; ++s) {
      LayerRange r = pipeline_stage_layers(m.layers, pp, s, opt.first_stage_layers, opt.last_stage_layers);
      if (s == pp - 1) r.mtp = opt.mtp_layers;
      ranges.push_back(r);
      const Span sp = span_of(r);
      int at = -1;
      for (size_t i = 0; i < spans.size(); ++i)
        if (spans[i].L == sp.L && spans[i].embed == sp.embed && spans[i].head == sp.head && spans[i].send == sp.send &&
            spans[i].Lm == sp.Lm && spans[i].mtp == sp.mtp)
          at = static_cast<int>(i);
      if (at < 0) {
        at = static_cast<int>(spans.size());
        spans.push_back(sp);
      }
      stage_span.push_back(at);
    }
    H = static_cast<double>(m.heads) / tp;
    KV = std::max(1.0, static_cast<double>(m.kv_heads) / tp);
    hd = m.head_dim;
    hidden = m.hidden;
    ffn = static_cast<double>(m.ffn) / tp;
    vocab = std::ceil(static_cast<double>(m.vocab) / tp);
    b = m.dtype_bytes;
    ceil = Ceilings{hw.effective_flops(), hw.effective_bandwidth_Bps()};
    impl = opt.fused_elementwise ? Implementation::Fused : opt.implementation;
    prec = m.weights;
    if (!hw.supports(prec))
      throw std::invalid_argument(fmt::format("{} has no {} tensor cores (it runs {})", hw.name, precision_name(prec), hw.precisions()));
    wb = weight_bytes_per_element(prec, m.dtype_bytes);
    ab = prec == Precision::FP8 ? 1.0 : prec == Precision::FP4 ? wb : b;
    kv8 = m.kv_fp8;
    kvb = m.kv_element_bytes();
    moved_decode = kv8;  // and derived, below
    knl = hw.kernel_launch_ns > 0 ? hw.kernel_launch_ns : opt.kernel_floor_ns;
    knl_target = knl;
    if (opt.tables_device && !opt.tables_dir.empty()) {
      const HardwareSpec& src = *opt.tables_device;
      derived = true;
      moved_decode = true;
      target = ceil;
      ceil = Ceilings{src.effective_flops(), src.effective_bandwidth_Bps()};
      knl = src.kernel_launch_ns > 0 ? src.kernel_launch_ns : opt.kernel_floor_ns;
    }

    // The precision's GEMM ceiling, moved with ceil (the tables device's under derived tables).
    pceil = Ceilings{ceil.flops * hw.effective_flops(prec) / hw.effective_flops(), ceil.bytes_per_s};
    ptarget = Ceilings{target.flops * hw.effective_flops(prec) / hw.effective_flops(), target.bytes_per_s};
    qkv = {hidden, (H + 2 * KV) * hd};
    o = {H * hd, hidden};
    mla = m.mla();
    if (mla) {
      const double qk = m.head_dim + m.qk_rope_head_dim, v = m.v_head_dim;
      latent = m.kv_lora_rank + m.qk_rope_head_dim;
      lq_a = {hidden, static_cast<double>(m.q_lora_rank)};
      lq_b = {m.q_lora_rank > 0 ? static_cast<double>(m.q_lora_rank) : hidden, H * qk};
      lkv_a = {hidden, latent};
      // Absorbed into the query and the output at decode (vLLM's MLA): the same weights and FLOPs
      // per token either way.
      lkv_b = {static_cast<double>(m.kv_lora_rank), H * (m.head_dim + v)};
      o = {H * v, hidden};
      // Attention as the prefill runs it, multi-head over the up-projected keys and values:
      // every head its own key, of the mean of the query/key and value widths.
      hd = (qk + v) / 2;
      KV = H;
    }
    up = {hidden, (m.gated_ffn ? 2 : 1) * ffn};
    down = {ffn, hidden};
    lm = {hidden, vocab};
    mtp_proj = {2 * hidden, hidden / tp};
    if (m.moe()) plan_experts();

    if (!opt.tables_dir.empty()) load_tables();
    rows_cache.reset(new std::atomic<double>[kCacheSize]);
    for (long i = 0; i < kCacheSize; ++i) rows_cache[i].store(-1, std::memory_order_relaxed);
    if (dp > 1) experts_cache.reset(new std::atomic<double>[kCacheSize]);
    for (long i = 0; dp > 1 && i < kCacheSize; ++i) experts_cache[i].store(-1, std::memory_order_relaxed);
    for (size_t k = 0; k < spans.size(); ++k) {
      span_cache.emplace_back(new std::atomic<double>[kCacheSize]);
      for (long i = 0; i < kCacheSize; ++i) span_cache.back()[i].store(-1, std::memory_order_relaxed);
    }
  }

  Span span_of(const LayerRange& r) const {
    // (A multi-token prediction module's layer is of the model's last layer's kind.)
    const double mtp = r.mtp, mtp_moe = m.moe() ? mtp : 0.0;
    return Span{r.count + mtp, r.embedding, r.lm_head, r.send, m.moe_layers_in(r.first, r.count) + mtp_moe, mtp};
  }

  // Mixture of experts: the router and shared experts' GEMMs, one expert's inner width on a
  // device, and where the experts sit (cost_model_experts.h).
  GemmPlan router, sh_up, sh_down;
  double eF = 0;
  bool ep = false, a2a = false;
  ExpertPlacement experts;
  // MLP all-reduces an MoE layer saves under all-to-all dispatch: the routed experts' outputs come
  // back by the combine; shared experts split over the tensor-parallel devices still need one.
  // Training's EP over data-parallel replicas keeps them: its experts are split over the
  // tensor-parallel group, whose partial outputs still sum.
  int moe_ar_saved(int first, int count) const { return a2a && pool == 1 && m.shared_experts == 0 ? m.moe_layers_in(first, count) : 0; }
  // Replicas whose tokens one device's experts serve (MoeOptions::data_parallel_ep; 1 otherwise).
  int pool = 1;

  void plan_experts() {
    const MoeOptions& mo = opt.moe;
    pool = std::max(1, mo.data_parallel_ep);
    if (pool > 1) {  // training's EP: placed over the replicas, experts split over tp like the dense MLP
      if (const auto problem = moe_problem(m, mo, tp)) throw std::invalid_argument(problem->problem);
      MoeOptions over = mo;
      over.expert_parallel = over.alltoall = true;
      over.data_parallel_ep = 1;
      experts = ExpertPlacement::plan(m, over, pool);
      ep = a2a = true;
      eF = static_cast<double>(m.expert_ffn) / tp;
    } else {
      experts = ExpertPlacement::plan(m, mo, ep_size());
      ep = mo.expert_parallel && ep_size() > 1;
      a2a = ep && mo.alltoall;
      eF = ep ? m.expert_ffn : static_cast<double>(m.expert_ffn) / tp;
    }
    router = {hidden, static_cast<double>(m.experts)};
    const double sf = static_cast<double>(m.shared_experts) * m.expert_ffn / tp;
    sh_up = {hidden, 2 * sf};
    sh_down = {sf, hidden};
  }

  // One device's grouped expert GEMMs (gate_up, then down) and the activation between them over
  // an MoE layer of M tokens: for each expert copy, its expected token count, and its weights read
  // with the probability that at least one token goes to it.
  Part experts_on(const std::vector<double>& shares, double M) const {
    const double k = m.experts_per_token, h = hidden;
    const double tok = ExpertPlacement::rows(shares, M, m.experts_per_token);
    double w = 0;
    for (double q : shares) w += 1 - std::pow(std::max(0.0, 1 - k * q), M);  // no share is above 1/k
    // Weights at wb bytes, input rows at ab (quantized), outputs in dtype; FLOPs at the precision.
    const double f_up = 2 * tok * h * 2 * eF, b_up = wb * w * h * 2 * eF + tok * (ab * h + b * 2 * eF);
    const double f_dn = 2 * tok * eF * h, b_dn = wb * w * eF * h + tok * (ab * eF + b * h);
    const double act = tok * 3 * eF * b;  // SiLU(gate) * up over each assignment's row
    auto grouped = [&](double f, double by) { return in_step_at(std::max(costtab::roof_ns(f, by, pceil), knl), f, by, pceil); };
    const double ns = grouped(f_up, b_up) + grouped(f_dn, b_dn) + kernel(act, act / b * 4);
    return {Op::Experts, Src::Roofline, File::None, ns, f_up + f_dn, b_up + b_dn + act, 3, true};
  }

  // The slowest device's experts: the layer waits for it.
  Part experts_part(double M) const {
    Part worst{Op::Experts, Src::Roofline, File::None, -1, 0, 0, 3};
    for (const auto& sh : experts.dev_share) {
      const Part q = experts_on(sh, M * pool);  // training's EP: every replica's tokens reach it
      if (q.ns > worst.ns) worst = q;
    }
    return worst;
  }

  // The MoE block's all-to-alls and its layer parts (defined in cost_model_moe.h): rows one
  // device's tokens send in a dispatch, bytes an element of a dispatched row, the dispatch's part
  // of a layer's dispatch and combine, their bytes from one device, and the MoE block of a layer.
  double a2a_rows(double M) const;
  double dispatch_b() const;
  double dispatch_fraction() const;
  double a2a_pair_bytes(double M) const;
  // Devices the routed experts are spread over under serving's EP: the tensor-parallel group, or
  // under data-parallel attention the devices the batch is dealt over.
  int ep_size() const { return dp > 1 ? dp : tp; }
  // Devices the experts are placed over.
  double ep_n() const { return static_cast<double>(experts.dev_share.size()); }
  template <class Layer>
  void moe_parts(double M, Layer& layer) const;

  void load_tables() {
    namespace fs = std::filesystem;
    const fs::path dir(opt.tables_dir);
    if (!sluice::path_is_directory(dir))
      throw std::invalid_argument(fmt::format("cost tables folder '{}' does not exist (for {}: calibration '{}')",
                                              opt.tables_dir, hw.name, hw.calibration));
    if (m.dtype_bytes != 2) return;  // tables are bf16 kernels
    auto have = [&](const char* f) { return sluice::path_exists(dir / f); };
    auto csv = [&](const char* f) { return costtab::read_csv((dir / f).string()); };
    if (have("gemm.csv")) {
      gemm = costtab::GemmTable::from_csv(csv("gemm.csv"));
      for (GemmPlan* g : {&qkv, &o, &up, &down, &lm}) g->shape = gemm->nearest(g->K, g->N, opt.max_shape_ratio);
      if (opt.mtp_layers > 0) mtp_proj.shape = gemm->nearest(mtp_proj.K, mtp_proj.N, opt.max_shape_ratio);
      if (mla)
        for (GemmPlan* g : {&lq_a, &lq_b, &lkv_a, &lkv_b})
          if (g->N > 0) g->shape = gemm->nearest(g->K, g->N, opt.max_shape_ratio);
      if (m.moe()) {
        router.shape = gemm->nearest(router.K, router.N, opt.max_shape_ratio);
        if (m.shared_experts > 0)
          for (GemmPlan* g : {&sh_up, &sh_down}) g->shape = gemm->nearest(g->K, g->N, opt.max_shape_ratio);
      }
    }
    if (have("attention_decode.csv") && !mla) {  // latent attention: its own roofline (no measured MLA kernel)
      decode = costtab::DecodeTable::from_csv(csv("attention_decode.csv"));
      dplan = decode->plan(H, KV, hd);
      if (dplan.group >= 0) {
        const auto& g = decode->groups()[static_cast<size_t>(dplan.group)];
        dshare_ctx = std::clamp(m.max_context + 1, 1, 1 << 15);
        dshare.resize(g.rows.size() * static_cast<size_t>(dshare_ctx));
        for (size_t k = 0; k < g.rows.size(); ++k) {
          const Share sh(g.rows[k]);
          for (int c = 0; c < dshare_ctx; ++c)
            dshare[k * static_cast<size_t>(dshare_ctx) + static_cast<size_t>(c)] = sh(static_cast<double>(c + 1) * dplan.len_scale);
        }
        dbracket.resize(1024);
        for (size_t n = 0; n < dbracket.size(); ++n) {
          Bracket& br = dbracket[n];
          decode->bracket(g, static_cast<double>(n), &br.lo, &br.hi, &br.w);
        }
      }
    }
    if (have("attention_prefill.csv") && !mla) {
      prefill = costtab::PrefillTable::from_csv(csv("attention_prefill.csv"));
      pgroup = prefill->plan(H / KV, true);
      if (pgroup >= 0) {
        const auto& g = prefill->groups()[static_cast<size_t>(pgroup)];
        prefill_head_scale = H * hd / (g.heads * g.head_dim);
      }
    }
    if (have("attention_slice.csv") && !mla) {
      slice = costtab::SliceTable::from_csv(csv("attention_slice.csv"));
      if (slice->empty()) slice.reset();
      else slice_head_scale = H * hd / (slice->heads * slice->head_dim);
    }
    if (have("elementwise.csv")) {
      elem = costtab::ElementwiseTable::from_csv(csv("elementwise.csv"));
      e_norm = elem->find("rmsnorm");
      e_rope = elem->find("rope");
      e_act = elem->find("silu_mul");
      e_res = elem->find("residual_add");
    }
  }

  double roof(double flops, double bytes) const { return std::max(costtab::roof_ns(flops, bytes, ceil), knl); }

  // How compute-bound a kernel of these FLOPs and bytes is: its FLOP time over its roofline time.
  double compute_share(double flops, double bytes) const {
    const double r = costtab::roof_ns(flops, bytes, ceil);
    return r > 0 ? costtab::roof_ns(flops, 0, ceil) / r : 0;
  }

  // A kernel's time inside a whole step: its tensor-core share runs at the sustained clock.
  double in_step(double ns, double flops, double bytes) const {
    return ns * (1 + (1 / hw.sustained_clock - 1) * compute_share(flops, bytes));
  }
  // The same against other ceilings (a precision's).
  double in_step_at(double ns, double flops, double bytes, const Ceilings& c) const {
    const double r = costtab::roof_ns(flops, bytes, c);
    const double share = r > 0 ? costtab::roof_ns(flops, 0, c) / r : 0;
    return ns * (1 + (1 / hw.sustained_clock - 1) * share);
  }

  // Derived tables: a part costed on the tables device, moved to this one. Its launch floors
  // become this device's; the rest scales by the ratio of the two rooflines of its FLOPs and
  // bytes (a memory-bound kernel by bandwidth, a compute-bound one by FLOP/s).
  // Then every kernel's time is multiplied by the options' time_scale (an end of the cost
  // model's error band; 1 otherwise). Collectives are neither moved nor scaled.
  void derive(Part& p) const {
    if (p.op == Op::AllReduce || p.op == Op::AllGather || p.op == Op::PpSend || p.op == Op::AllToAll) return;
    if (derived) {
      // A part at another precision moves between that precision's ceilings on the two devices.
      const Ceilings& from = p.at_precision ? pceil : ceil;
      const Ceilings& to = p.at_precision ? ptarget : target;
      const double rs = costtab::roof_ns(p.flops, p.bytes, from), rt = costtab::roof_ns(p.flops, p.bytes, to);
      const double ratio = rs > 0 ? rt / rs : 1, floors = p.kernels * knl;
      p.ns = p.kernels * knl_target + std::max(0.0, p.ns - floors) * ratio;
    }
    if (opt.time_scale != 1) p.ns *= opt.time_scale;
  }

  // A sink that moves each part to this device (derived tables) before passing it on.
  template <class S>
  struct Moved {
    const Impl& im;
    S& s;
    void operator()(Part p) const {
      im.derive(p);
      s(p);
    }
  };

  Part gemm_part(Op id, const GemmPlan& g, double M) const {
    const double flops = 2 * M * g.K * g.N, bytes = b * (M * g.K + g.K * g.N + M * g.N);
    if (gemm && g.shape >= 0) {
      Estimate e = gemm->estimate(g.shape, M, g.K, g.N, b, ceil);
      // Rows are computed in tiles of 64 (cuBLAS's smaller Hopper tiles): where the GEMM is
      // compute-bound, a row count between multiples costs the next multiple's FLOPs. The
      // table's rows are all multiples of 64, so this only moves unmeasured M.
      const double Mq = std::ceil(M / 64) * 64;
      e.ns *= costtab::roof_ns(2 * Mq * g.K * g.N, bytes, ceil) / costtab::roof_ns(flops, bytes, ceil);
      return {id, e.scaled ? Src::Scaled : Src::Table, File::Gemm, in_step(e.ns, flops, bytes), flops, bytes};
    }
    return {id, Src::Roofline, File::None, in_step(roof(flops, bytes), flops, bytes), flops, bytes};
  }

  // A decoder layer's GEMM at the deployment's precision: the bf16 kernel (table or roofline)
  // moved by the ratio of its two rooflines (the weights at wb bytes, the input rows at ab, the
  // FLOPs at the precision's ceiling), its launch floor kept. bf16: the kernel as it is.
  Part layer_gemm(Op id, const GemmPlan& g, double M) const {
    Part p = gemm_part(id, g, M);
    if (prec == Precision::BF16) return p;
    const double bytes = ab * M * g.K + wb * g.K * g.N + b * M * g.N;
    const double r0 = costtab::roof_ns(p.flops, p.bytes, ceil), r1 = costtab::roof_ns(p.flops, bytes, pceil);
    if (p.src == Src::Roofline) {  // the roofline itself at the precision's ceilings
      p.ns = in_step_at(std::max(r1, knl), p.flops, bytes, pceil);
    } else {
      const double floors = p.kernels * knl;
      p.ns = floors + std::max(0.0, p.ns - floors) * (r0 > 0 ? r1 / r0 : 1);
    }
    p.bytes = bytes;
    p.at_precision = true;
    return p;
  }

  // W8A8 and FP4: each GEMM's input rows quantized per token (read in dtype, written at ab): four
  // kernels a layer, two where the implementation fuses the quantization into its norms (fused).
  // Every input is taken at the hidden width.
  template <class Layer>
  void quant_parts(double M, Layer& layer) const {
    if (prec != Precision::FP8 && prec != Precision::FP4) return;
    layer(kernels_part(Op::Quant, impl == Implementation::Fused ? 2 : 4, M * hidden * (b + ab)));
  }

  // `calls` calls of a measured elementwise op over `tokens` rows moving `bpt` bytes per row;
  // `kpc` kernels per call (the table's time per call already holds their floors and gaps).
  Part elem_part(Op id, const costtab::ElementwiseTable::Op* t, double tokens, double bpt, double calls, double kpc,
                 bool other_op = false) const {
    const double bytes = tokens * bpt, flops = tokens * bpt / b * 4;
    if (t) {
      const Estimate e = elem->estimate(*t, tokens, bpt);
      return {id, (e.scaled || other_op) ? Src::Scaled : Src::Table, File::Elementwise, e.ns * calls, flops * calls,
              bytes * calls, kpc * calls};
    }
    return {id, Src::Analytic, File::None, calls * kpc * kernel(bytes / kpc, flops / kpc), flops * calls, bytes * calls,
            kpc * calls};
  }

  // One kernel that no table measures: its traffic at the copy ceiling (FLOPs at the GEMM
  // ceiling), never under the device's per-kernel floor.
  double kernel(double bytes, double flops = 0) const { return std::max(costtab::roof_ns(flops, bytes, ceil), knl); }

  // `n` kernels of `bytes` each, from physics (Src::Analytic).
  Part kernels_part(Op id, double n, double bytes, double flops = 0) const {
    return {id, Src::Analytic, File::None, n * kernel(bytes, flops), n * flops, n * bytes, n};
  }
  // Copies of op `id`, a kernel each, moving each of `bytes` (a zero is no copy): one part.
  Part copies_part(Op id, std::initializer_list<double> bytes) const {
    Part p{id, Src::Analytic, File::None, 0, 0, 0, 0};
    for (const double by : bytes) {
      if (by <= 0) continue;
      const Part k = kernels_part(id, 1, by);
      p.ns += k.ns, p.bytes += k.bytes, p.kernels += k.kernels;
    }
    return p;
  }

  // RMSNorm upcast to fp32 by hand over `rows` rows (pytorch-naive): x.float(), pow(2), mean,
  // + eps, rsqrt, x * r, .to(bf16), * weight: eight kernels, each at its own traffic.
  Part naive_norm_part(Op id, double rows) const {
    const double h = hidden, f = 4;  // fp32 bytes
    const double per_row[8] = {h * (b + f), 2 * h * f, h * f + f, 2 * f, 2 * f, h * f + f + h * f, h * (f + b), 2 * h * b};
    Part p{id, Src::Analytic, File::None, 0, rows * h * 6, 0, 8};
    for (double bpr : per_row) {
      p.ns += kernel(rows * bpr);
      p.bytes += rows * bpr;
    }
    return p;
  }

  // Ring collective over tp devices: all-reduce moves 2(n-1)/n of the data in 2(n-1) steps,
  // all-gather half of that.
  double ring_ns(double bytes, double steps_factor) const {
    const double n = tp;
    return steps_factor * ((n - 1) / n * bytes / hw.interconnect_Bps * 1e9 + (n - 1) * hw.interconnect_latency_ns);
  }

  // A fused kernel (vLLM): `calls` kernels of `bpt` bytes per token each, at the least traffic.
  Part fused_part(Op id, double M, double bpt, double calls) const {
    const double bytes = M * bpt, flops = M * bpt / b * 4;
    return {id, Src::Roofline, File::None, calls * kernel(bytes, flops), calls * flops, calls * bytes, calls};
  }

  // The per-layer memory-bound kernels of the implementation, over M new tokens.
  //   pytorch-lean: F.rms_norm x2 (1 kernel each, table), rotary on q and on k (7 kernels each:
  //     4 multiplies, 2 adds, a concat; table), k and v copied into the dense cache (2 copy
  //     kernels, physics), F.silu(g) * u (2 kernels, table), residual adds x2 (table).
  //   pytorch-naive: the norms as 8 kernels each in fp32 (physics), and each rotary call first
  //     rebuilds its angle table (12 small kernels: arange, pow, outer product, cat, cos, sin and
  //     casts; physics) before the same 7 kernels.
  //   fused: fused add+RMSNorm x2, one rotary kernel over q and k, one SiLU*mul, one cache write.
  //   Latent attention (any profile): its two RMSNorms more (the query bottleneck's and the
  //   latent's, on the down projections' rows), and the rotary over the rope part of each query
  //   head and the one shared rotary key only. (The concatenation of the rope and non-rope
  //   parts into whole heads is costed with attention, which knows prefills from decodes:
  //   cost_model_attention.h.)
  template <class Layer>
  void layer_elementwise(double M, Layer& layer, bool act = true) const;  // (cost_model_elementwise.h)
  // The glue kernels no table holds, per layer (cost_model_elementwise.h: fitted to model_steps.csv).
  static constexpr double kGlueAlways = 3, kGlueRows = 6;
  double glue_kernels(double M) const;

  // Every part that depends only on the total new tokens M of the batch.
  template <class Sink>
  void dense_parts(double M, Sink& sink, const Span& sp) const {
    if (M <= 0) return;
    const double L = sp.L, Lm = sp.Lm, Ld = L - Lm;  // all layers, MoE ones, dense ones
    auto times = [&](double n) {
      return [&sink, n](Part p) { sink(p.times(n)); };
    };
    auto layer = times(L);
    auto dense = times(Ld);
    auto moe = times(Lm);
    if (mla) {
      const double Mdown = opt.sequence_parallel ? M / tp : M;  // the replicated down projections' rows
      if (m.q_lora_rank > 0) layer(layer_gemm(Op::QA, lq_a, Mdown));
      layer(layer_gemm(Op::QB, lq_b, M));
      layer(layer_gemm(Op::KVA, lkv_a, Mdown));
      layer(layer_gemm(Op::KVB, lkv_b, M));
    } else {
      layer(layer_gemm(Op::Qkv, qkv, M));
    }
    layer(layer_gemm(Op::O, o, M));
    if (Ld > 0) {
      dense(layer_gemm(Op::GateUp, up, M));
      dense(layer_gemm(Op::Down, down, M));
    }
    quant_parts(M, layer);
    if (Lm > 0) moe_parts(M, moe);
    if (Lm == 0) {
      layer_elementwise(M, layer);
    } else {  // an MoE layer's activation is costed with its experts
      if (Ld > 0) layer_elementwise(M, dense);
      layer_elementwise(M, moe, false);
    }
    if (tp > 1) {
      // Two all-reduces a layer (after attention, after the MLP); one on an MoE layer whose
      // tokens move by all-to-all.
      const double bytes = M * hidden * b, n = 2 * L - (moe_ar_saved(0, m.layers) > 0 ? Lm : 0);
      auto ar = times(n);
      if (opt.comm_on_fabric)
        ar(Part{Op::AllReduce, Src::Network, File::None, 0, M * hidden, bytes, 1});
      else if (opt.allreduce_ns)
        ar(Part{Op::AllReduce, Src::Network, File::None, opt.allreduce_ns(bytes), M * hidden, bytes, 1});
      else
        ar(Part{Op::AllReduce, Src::Analytic, File::None, ring_ns(bytes, 2), M * hidden, bytes, 1});
    }
    if (sp.embed)  // the embedding gather (first stage): a row of the table read and written per token
      sink(kernels_part(Op::Embed, 1, 2 * M * hidden * b));
    if (sp.mtp > 0) {
      // Multi-token prediction (training, all M tokens): each module gathers the embedding of the
      // tokens one further on, projects them with the hidden states (its layer is among L), and
      // runs the LM head over every token for its loss. (Its two input norms are not costed.)
      auto mtp = times(sp.mtp);
      mtp(kernels_part(Op::Embed, 1, 2 * M * hidden * b));
      mtp(layer_gemm(Op::MtpProj, mtp_proj, M));
      mtp(gemm_part(Op::LmHead, lm, M));
    }
    if (sp.head && impl == Implementation::Fused)  // vLLM normalises every token, then selects the sampled rows
      sink(fused_part(Op::FinalNorm, M, 2 * hidden * b, 1));
    if (sp.send && !opt.comm_on_fabric) {
      const double bytes = M * hidden * b;
      const bool nvlink = hw.interconnect_Bps > 0;
      const double bw = nvlink ? hw.interconnect_Bps : hw.pcie_Bps;
      sink(Part{Op::PpSend, Src::Analytic, File::None, bytes / bw * 1e9 + (nvlink ? hw.interconnect_latency_ns : 0), 0, bytes, 1});
    }
  }

  // Every part that depends only on the number R of rows that sample a token.
  template <class Sink>
  void row_parts(double R, Sink& sink) const {
    if (R <= 0) return;
    const double v = m.vocab;
    if (impl != Implementation::Fused) {
      // The norm of each sequence's last token only, then the LM head and a greedy argmax
      // over the bf16 logits (one reduction kernel reading them all).
      if (impl == Implementation::PytorchNaive && !m.layernorm) sink(naive_norm_part(Op::FinalNorm, R));
      else sink(elem_part(Op::FinalNorm, e_norm, R, 2 * hidden * b, 1, 1, m.layernorm));
      sink(gemm_part(Op::LmHead, lm, R));
      sink(kernels_part(Op::Argmax, 1, R * v * b + R * 8, R * v));
    } else {
      sink(gemm_part(Op::LmHead, lm, R));
      // Sampling over the full vocabulary: fp32 logits written, read by softmax, read by the sampler.
      const double bytes = R * v * 4 * 3, flops = R * v * 5;
      sink(Part{Op::Sampling, Src::Roofline, File::None, roof(flops, bytes), flops, bytes});
    }
    if (tp > 1) {
      const double g = R * static_cast<double>(m.vocab) * b;
      sink(Part{Op::AllGather, Src::Analytic, File::None, ring_ns(g, 1), 0, g, 1});
    }
  }

  // The parts of n tokens (dense) or n sampled rows, from the cache once computed: the lookup
  // inline, the computation out of line.
  double cached(std::atomic<double>* cache, long n, bool dense, const Span& sp) const {
    if (n <= 0) return 0;
    if (n < kCacheSize) {
      const double v = cache[n].load(std::memory_order_relaxed);
      if (v >= 0) return v;
    }
    return fill(cache, n, dense, sp);
  }
  [[gnu::noinline]] double fill(std::atomic<double>* cache, long n, bool dense, const Span& sp) const {
    SumSink s;
    Moved<SumSink> ms{*this, s};
    if (dense) dense_parts(static_cast<double>(n), ms, sp);
    else row_parts(static_cast<double>(n), ms);
    if (n < kCacheSize) cache[n].store(s.total, std::memory_order_relaxed);
    return s.total;
  }

  // Data-parallel attention: a span's routed experts over every device's M tokens (all wait for the slowest).
  template <class Sink>
  void experts_dp_parts(double M, Sink& sink, const Span& sp) const {
    if (M <= 0 || sp.Lm <= 0) return;
    sink(experts_part(M).times(sp.Lm));
  }
  // (Cached by M alone: dp_whole_ns asks it of spans[0] only, the one stage data-parallel attention has.)
  double experts_dp_ns(long M, const Span& sp) const {
    if (M <= 0) return 0;
    if (M < kCacheSize) {
      const double v = experts_cache[M].load(std::memory_order_relaxed);
      if (v >= 0) return v;
    }
    SumSink s;
    Moved<SumSink> ms{*this, s};
    experts_dp_parts(static_cast<double>(M), ms, sp);
    if (M < kCacheSize) experts_cache[M].store(s.total, std::memory_order_relaxed);
    return s.total;
  }

  // One prefill chunk's attention per layer.
  // FLOPs and bytes of one chunk's attention (no time).
  Part prefill_part_work(double l, double c) const {
    const double pairs = l * c + l * (l + 1) / 2;
    return {Op::AttnPrefill, Src::Analytic, File::None, 0, 4 * hd * H * pairs, b * hd * (2 * l * H + 2 * (c + l) * KV)};
  }

  Part prefill_part(double l, double c) const {
    const double pairs = l * c + l * (l + 1) / 2;
    const double flops = 4 * hd * H * pairs, bytes = b * hd * (2 * l * H + 2 * (c + l) * KV);
    if (c <= 0 && prefill && pgroup >= 0) {
      Estimate e = prefill->estimate(pgroup, l, ceil);
      if (prefill_head_scale != 1) {
        e.ns = std::max(e.ns * prefill_head_scale, prefill->min_ns());
        e.scaled = true;
      }
      return {Op::AttnPrefill, e.scaled ? Src::Scaled : Src::Table, File::Prefill, e.ns, flops, bytes};
    }
    if (slice && prefill && pgroup >= 0 && l > slice->rows.front().t_ns.x_max()) {
      // A chunk longer than the slice table measures: the prefill table's time for l tokens
      // (prefix 0, measured to 16k) plus the prefix's extra cost, measured at the table's
      // longest slice L and scaled by l/L (each new token attends to c more keys). Continuous
      // with the prefix-0 case as c -> 0, and monotone in c.
      const double L = slice->rows.front().t_ns.x_max();
      Estimate base = prefill->estimate(pgroup, l, ceil);
      base.ns = std::max(base.ns * prefill_head_scale, prefill->min_ns());
      const double extra = std::max(0.0, slice->estimate(L, c, ceil).ns - slice->estimate(L, 0, ceil).ns);
      return {Op::AttnPrefill, Src::Scaled, File::Prefill, base.ns + extra * slice_head_scale * (l / L), flops, bytes};
    }
    if (slice) {
      Estimate e = slice->estimate(l, c, ceil);
      if (slice_head_scale != 1) {
        e.ns = std::max(e.ns * slice_head_scale, slice->min_ns);
        e.scaled = true;
      }
      return {Op::AttnPrefill, e.scaled ? Src::Scaled : Src::Table, File::Slice, e.ns, flops, bytes};
    }
    // No table: the FLOP ceiling at the device's attention efficiency for a chunk this long
    // (short prompts fill few tiles), not the GEMM ceiling.
    return {Op::AttnPrefill, Src::Roofline, File::None, roof(flops / hw.attention_efficiency(l), bytes), flops, bytes};
  }

  // Attention of a whole batch; sums into `sink` per layer x L layers. `nd` decode sequences
  // (defined in cost_model_attention.h). `paged_context`: a chunk's context is a serving
  // engine's paged cache (latent attention then builds its keys and values again: mla_context);
  // false for token slices (TeraPipe, training's slicing), whose earlier slices' keys and values
  // are kept whole.
  template <class Sink, bool kDetail>
  void attention_parts(std::span<const SeqWork> batch, long nd, Sink& sink, double L, long drafted = 0, bool paged_context = true) const;
  // Latent attention's concatenations of head parts (cost_model_attention.h).
  template <class Sink>
  void mla_concat(std::span<const SeqWork> prompts, double queries, Sink& sink, double L) const;
  // Latent attention's cached context behind a chunk, up-projected again (cost_model_attention.h).
  template <class Sink>
  void mla_context(std::span<const SeqWork> prompts, Sink& sink, double L) const;

  std::string op_name(Op op) const {
    switch (op) {
      case Op::Embed: return "embedding";
      case Op::Qkv: return "gemm.qkv";
      case Op::O: return "gemm.o";
      case Op::GateUp: return m.gated_ffn ? "gemm.gate_up" : "gemm.up";
      case Op::Down: return "gemm.down";
      case Op::AttnPrefill: return "attention.prefill";
      case Op::AttnDecode: return "attention.decode";
      case Op::Norm: return m.layernorm ? "elementwise.layernorm" : "elementwise.rmsnorm";
      case Op::Rope: return "elementwise.rope";
      case Op::RopeAngles: return "elementwise.rope_angles";
      case Op::KvWrite: return "kv_cache.write";
      case Op::AttnLayout: return "attention.layout_copy";
      case Op::FinalNorm: return m.layernorm ? "final_norm.layernorm" : "final_norm.rmsnorm";
      case Op::Argmax: return "argmax";
      case Op::Act: return m.gated_ffn ? "elementwise.silu_mul" : "elementwise.gelu";
      case Op::Residual: return "elementwise.residual_add";
      case Op::LmHead: return "lm_head";
      case Op::MtpProj: return "gemm.mtp_proj";
      case Op::MlaConcat: return "elementwise.mla_concat";
      case Op::KVBContext: return "gemm.kv_b_context";
      case Op::MlaContext: return "elementwise.mla_context";
      case Op::Sampling: return "sampling";
      case Op::AllReduce: return "allreduce";
      case Op::AllGather: return "allgather.logits";
      case Op::PpSend: return "pp_send";
      case Op::Glue: return "glue";
      case Op::Router: return "moe.router";
      case Op::TopK: return "moe.topk";
      case Op::Quant: return "quantize";
      case Op::QA: return "gemm.q_a";
      case Op::QB: return m.q_lora_rank > 0 ? "gemm.q_b" : "gemm.q";
      case Op::KVA: return "gemm.kv_a";
      case Op::KVB: return "gemm.kv_b";
      case Op::Experts: return "moe.experts";
      case Op::SharedGateUp: return "moe.shared_gate_up";
      case Op::SharedDown: return "moe.shared_down";
      case Op::AllToAll: return "alltoall.moe";
      case Op::Count: break;
    }
    return "?";
  }

  static std::string source_name(Src s, File f) {
    switch (s) {
      case Src::Table: return std::string("table:") + file_name(f);
      case Src::Scaled: return std::string("table:") + file_name(f) + "~scaled";
      case Src::Roofline: return "roofline";
      case Src::Analytic: return "analytic";
      case Src::Network: return "network";
      case Src::Fitted: return "fitted:model_steps.csv";
    }
    return "?";
  }
};

}  // namespace sluice
