// Diffusion-transformer inference on the world. Two engines under one workload:
//   - the synchronous strategies (one device, tensor, Ulysses, Ring, Ulysses x Ring,
//     DistriFusion): every device of a CFG group runs the same step, as a list of phases
//     (compute, then or alongside the strategy's transfers); a step ends when every phase of
//     every group has;
//   - PipeFusion: the blocks cut into N stages, each step's image cut into M patches that flow
//     through the stages one after another (activations as P2P flows), the last stage's
//     updated latent patch going back to the first stage for the next step; a stage starts
//     patch m of step t+1 as soon as that patch's latent is back, so steps overlap in the
//     pipeline (one-step-stale K/V of the other patches); warm-up steps run the image whole.
// Requests arrive (Poisson or all at once) and join the batch when a step begins.
#include "workloads/diffusion/diffusion.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/units.h"
#include "hardware/cost_band.h"
#include "hardware/cost_source.h"
#include "network/collective.h"
#include "recorder/diffusion_report.h"
#include "registry/registry.h"
#include "world/placement.h"

namespace sluice::diffusion {

using namespace shape;

namespace {

CostOptions cost_options(const DiffusionConfig& c) {
  CostOptions o;
  o.tables_dir = c.tables_dir;
  o.tables_device = c.tables_device;
  o.time_scale = c.cost_time_scale;
  o.implementation = c.implementation;
  o.comm_on_fabric = true;
  return o;
}

struct Request {
  int64_t arrival_ns = 0, start_ns = -1, finish_ns = -1;
  int scheduled = 0;  // steps it has been given
};

// Tags of this workload's own flows: kind (4 bits) | group (4) | stage (16) | step (28) | patch (12).
enum FlowKind : uint64_t { kPhaseFlow = 1, kActivation = 2, kCfgPatch = 3, kLatent = 4 };
uint64_t make_tag(uint64_t kind, int g, int s, long k, int m) {
  return (kind << 60) | (static_cast<uint64_t>(g) << 56) | (static_cast<uint64_t>(s) << 40) |
         ((static_cast<uint64_t>(k) & 0xFFFFFFF) << 12) | (static_cast<uint64_t>(m) & 0xFFF);
}

class DiffusionJob final : public Workload, public EventHandler, public net::FlowSink {
 public:
  DiffusionJob(std::string name, DiffusionConfig cfg, World& world, std::vector<int> devices)
      : Workload(std::move(name)), c_(std::move(cfg)), world_(world), cost_(c_.hardware, c_.dit.as_model(), cost_options(c_)) {
    G_ = c_.group_devices();
    p_ = c_.patch_tokens();
    for (int d : devices) nodes_.push_back(world.device_node(d));
    devices_ = devices;
    busy_ns_.assign(nodes_.size(), 0);
    // Arrivals: Poisson at the rate, or every request at time 0.
    auto rng = world.engine().rng("diffusion/" + this->name());
    int64_t t = 0;
    req_.resize(static_cast<size_t>(c_.requests));
    for (auto& r : req_) {
      if (c_.rate_per_s > 0) t += std::llround(rng.exponential(1e9 / c_.rate_per_s));
      r.arrival_ns = t;
    }
    pid_ = world.trace_pid();
    res_.memory = diffusion_memory(c_);
    const int B1 = c_.branch_factor();
    res_.step_compute_ms = static_cast<double>(group_compute_ns(B1, false).first + group_compute_ns(B1, false).second) / 1e6;
    if (c_.strategy() == Strategy::PipeFusion) res_.step_compute_ms = static_cast<double>(stage_ns(0, B1, c_.patches)) * c_.patches / 1e6;
    res_.single_step_ms = dit_step(cost_, c_.dit, p_, B1).total_ns / 1e6;
    res_.formula_bytes_per_step_per_device = formula_bytes_per_device(c_, B1);
    if (c_.strategy() == Strategy::PipeFusion) {
      const int N = c_.pipefusion;
      stages_.resize(static_cast<size_t>(c_.cfg_degree * N));
    }
  }

  void start(World&) override {
    if (world_.trace().enabled()) {
      world_.trace().name_process(pid_, fmt::format("diffusion {}", name()));
      for (size_t d = 0; d < nodes_.size() && d < 64; ++d)
        world_.trace().name_thread(pid_, static_cast<int>(d),
                                   c_.strategy() == Strategy::PipeFusion
                                       ? fmt::format("group {} stage {}", static_cast<int>(d) / G_, static_cast<int>(d) % G_)
                                       : fmt::format("group {} device {}", static_cast<int>(d) / G_, static_cast<int>(d) % G_));
    }
    schedule_next_arrival();
  }
  bool holds_world() const override { return !done_; }
  void finish(World& w) override {
    // What its devices did, for the world's energy ledger (world/energy.h): busy while they
    // compute a step, all of it compute-bound (a DiT step's GEMMs and attention run over
    // thousands of patch tokens at once).
    const auto profile = std::make_shared<const BusyProfile>(busy_profile_);
    for (size_t d = 0; d < devices_.size(); ++d) {
      const double s = static_cast<double>(busy_ns_[d]) / 1e9;
      w.add_activity(devices_[d], DeviceActivity{s, s, 0, profile});
    }
    res_.flows = flows_;
    res_.fabric_bytes = fabric_bytes_;
    res_.batch_steps = batch_steps_;
    res_.mean_batch = batch_steps_ > 0 ? static_cast<double>(batch_images_) / static_cast<double>(batch_steps_) : 0;
    res_.comm_bytes_per_step_per_device = batch_steps_ > 0 ? strategy_bytes_ / static_cast<double>(batch_steps_) / c_.devices() : 0;
    if (batch_steps_ > 0) res_.formula_bytes_per_step_per_device = formula_sum_ / static_cast<double>(batch_steps_);
    res_.pipefusion_stage_io_bytes_per_step = batch_steps_ > 0 && c_.pipefusion > 2 ? stage1_io_bytes_ / static_cast<double>(batch_steps_) : 0;
    int64_t end = 0;
    for (const auto& r : req_) end = std::max(end, r.finish_ns);
    res_.makespan_s = static_cast<double>(end) / 1e9;
    res_.first_arrival_s = req_.empty() ? 0 : static_cast<double>(req_.front().arrival_ns) / 1e9;
    res_.device_busy_s.clear();
    for (int64_t b : busy_ns_) res_.device_busy_s.push_back(static_cast<double>(b) / 1e9);
  }
  std::string metrics_key() const override { return "diffusion"; }
  WorkUnits work_done() const override { return {{"image", static_cast<double>(res_.completed)}}; }
  void report(Recorder& rec, bool scoped) const override { report_diffusion(res_, diffusion_setup(c_), rec, scoped ? name() : std::string()); }

  void on_event(Engine& e, uint32_t kind, uint32_t arg) override {
    switch (kind) {
      case kArrival: arrival(); break;
      case kPhaseTimer:
        if (e.event_generation() == Generation(timer_gen_)) compute_done();  // else moved by the end of an overlap
        break;
      case kStepBoundary: step_boundary(); break;
      case kStageDone: stage_done(static_cast<int>(arg)); break;
    }
  }

  void on_flow_done(Engine&, uint64_t tag) override {
    const uint64_t kind = tag >> 60;
    const int g = static_cast<int>((tag >> 56) & 0xF), s = static_cast<int>((tag >> 40) & 0xFFFF);
    const long k = static_cast<long>((tag >> 12) & 0xFFFFFFF);
    const int m = static_cast<int>(tag & 0xFFF);
    switch (kind) {
      case kPhaseFlow: comm_done(); break;
      case kActivation: {
        PStep& st = psteps_[static_cast<size_t>(k)];
        st.in[static_cast<size_t>((g * c_.pipefusion + s) * st.M + m)] = 1;
        try_stage(g, s);
        break;
      }
      case kCfgPatch: {
        PStep& st = psteps_[static_cast<size_t>(k)];
        st.cfg_in[static_cast<size_t>(g * st.M + m)] = 1;
        try_sample(g, k, m);
        break;
      }
      case kLatent: {
        PStep& st = psteps_[static_cast<size_t>(k)];
        ++st.latent_back[static_cast<size_t>(g)];
        st.latent_in[static_cast<size_t>(g * st.M + m)] = 1;
        try_stage(g, 0);
        break;
      }
    }
  }

 private:
  enum : uint32_t { kArrival = 1, kPhaseTimer = 2, kStepBoundary = 3, kStageDone = 4 };

  // ---- requests ----
  void schedule_next_arrival() {
    if (next_arrival_ >= req_.size()) return;
    world_.engine().schedule_at(SimTime::ns(req_[next_arrival_].arrival_ns), Priority::Arrival, this, kArrival);
  }
  void arrival() {
    waiting_.push_back(static_cast<int>(next_arrival_));
    ++next_arrival_;
    schedule_next_arrival();
    if (c_.strategy() == Strategy::PipeFusion) try_stage(0, 0);
    else if (!running_) begin_step();
  }
  // The batch of the next step: continuing images, then waiting ones up to max_batch.
  std::vector<int> compose(const std::vector<int>& previous, int64_t now) {
    std::vector<int> batch;
    for (int r : previous)
      if (req_[static_cast<size_t>(r)].scheduled < c_.steps) batch.push_back(r);
    while (!waiting_.empty() && static_cast<int>(batch.size()) < c_.max_batch) {
      const int r = waiting_.front();
      waiting_.pop_front();
      req_[static_cast<size_t>(r)].start_ns = now;
      batch.push_back(r);
    }
    return batch;
  }
  bool warm(const std::vector<int>& batch) const {
    for (int r : batch)
      if (req_[static_cast<size_t>(r)].scheduled < c_.warmup_steps) return true;
    return false;
  }
  void image_done(int r, int64_t now) {
    req_[static_cast<size_t>(r)].finish_ns = now;
    const Request& q = req_[static_cast<size_t>(r)];
    res_.latency_s.push_back(static_cast<double>(now - q.arrival_ns) / 1e9);
    res_.queue_s.push_back(static_cast<double>(q.start_ns - q.arrival_ns) / 1e9);
    if (++res_.completed == c_.requests) {
      done_ = true;
      world_.workload_done();
    }
  }

  // ---- costs ----
  // Sequence parallelism splits the joint sequence (Flux: image and text tokens, as xDiT's
  // USP does when the text length divides); cross-attention text (PixArt) stays replicated.
  DitPart group_part() const {
    DitPart pt;
    const double p = static_cast<double>(p_), T = joint() ? c_.dit.text_tokens : 0;
    auto split_text = [&](double rows, double q, double kv) {
      if (!joint()) return;
      pt.text_rows = rows, pt.text_q = q, pt.text_kv = kv;
    };
    switch (c_.strategy()) {
      case Strategy::Single: case Strategy::PipeFusion: break;
      case Strategy::Tensor: pt.tp = pt.heads_div = c_.tensor; break;
      case Strategy::Ulysses:
        pt.rows = p / c_.ulysses, pt.q = p, pt.kv = p, pt.heads_div = c_.ulysses;
        split_text(T / c_.ulysses, T, T);
        break;
      case Strategy::Ring:
        pt.rows = pt.q = pt.kv = p / c_.ring, pt.attention_calls = c_.ring;
        split_text(T / c_.ring, T / c_.ring, T / c_.ring);
        break;
      case Strategy::UlyssesRing:
        pt.rows = p / (c_.ulysses * c_.ring), pt.q = pt.kv = p / c_.ring, pt.heads_div = c_.ulysses, pt.attention_calls = c_.ring;
        split_text(T / (c_.ulysses * c_.ring), T / c_.ring, T / c_.ring);
        break;
      case Strategy::DistriFusion:
        pt.rows = pt.q = p / c_.distrifusion, pt.kv = p;
        split_text(T / c_.distrifusion, T / c_.distrifusion, T);
        break;
    }
    return pt;
  }
  bool joint() const { return c_.dit.single_layers > 0; }
  // One device's step compute for `B` images: (non-attention, attention) ns; `split` only
  // matters to Ring attention, whose P2P overlaps the attention part.
  std::pair<int64_t, int64_t> group_compute_ns(int B, bool) {
    auto it = gcache_.find(B);
    if (it != gcache_.end()) return it->second;
    const IterationCost ic = dit_step_part(cost_, c_.dit, p_, B, group_part());
    double attn = 0;
    for (const auto& o : ic.ops)
      if (is_attention_op(o.op)) attn += o.ns;
    const int64_t total = std::max<int64_t>(1, std::llround(ic.total_ns));
    const int64_t a = std::min<int64_t>(total, std::llround(attn));
    return gcache_[B] = {total - a, a};
  }
  // PipeFusion stage s: one patch of a step cut into M patches, for B images.
  int64_t stage_ns(int s, int B, int M) {
    const auto key = std::make_tuple(s, B, M);
    auto it = scache_.find(key);
    if (it != scache_.end()) return it->second;
    const int N = c_.pipefusion, Ld = c_.dit.layers;
    const int b0 = static_cast<int>(static_cast<long>(blocks(c_.dit)) * s / N), b1 = static_cast<int>(static_cast<long>(blocks(c_.dit)) * (s + 1) / N);
    DitPart pt;
    pt.rows = pt.q = static_cast<double>(p_) / M;
    pt.kv = static_cast<double>(p_);  // fresh K/V of its own patch, stale of the others
    pt.double_blocks = std::max(0, std::min(b1, Ld) - b0);
    pt.single_blocks = std::max(0, b1 - std::max(b0, Ld));
    pt.embed = s == 0;
    pt.final_layer = s == N - 1;
    const int64_t ns = std::max<int64_t>(1, std::llround(dit_step_part(cost_, c_.dit, p_, B, pt).total_ns));
    return scache_[key] = ns;
  }

  // ---- the synchronous strategies ----
  struct Comm {
    enum Kind { AllReduce, AllToAll, AllGather, RingP2P, CfgExchange } kind;
    double bytes;      // collectives: their buffer; P2P: each flow's bytes
    int fused = 1;     // all-reduce: back-to-back collectives it stands for
    bool strategy = true;  // counted as the strategy's per-step communication
  };
  struct Phase {
    int64_t compute_ns = 0;
    std::vector<Comm> comm;
  };

  std::vector<Phase> plan_step(int B, bool is_warm) {
    const auto [rest, attn] = group_compute_ns(B, true);
    // O(p·hs) of the sequence the blocks run over: image tokens, plus text in joint blocks.
    const double O = static_cast<double>(B) * static_cast<double>(p_ + (joint() ? c_.dit.text_tokens : 0)) * c_.dit.hidden * kBytes,
                 L = blocks(c_.dit);
    std::vector<Phase> ph;
    switch (c_.strategy()) {
      case Strategy::Single: case Strategy::PipeFusion: ph.push_back({rest + attn, {}}); break;
      case Strategy::Tensor: {
        const double rows_O = O;
        const int count = tensor_allreduces(c_.dit);
        ph.push_back({rest + attn, {}});
        ph.push_back({0, {{Comm::AllReduce, count * rows_O, count}}});
        break;
      }
      case Strategy::Ulysses:
        // q, k, v in and the attention output back: four all-to-alls per block of p/N tokens each.
        ph.push_back({rest + attn, {}});
        ph.push_back({0, {{Comm::AllToAll, 4 * L * O / G_}}});
        break;
      case Strategy::Ring:
        // K and V blocks of p/N tokens go round the ring, N-1 hops a block, beside attention.
        ph.push_back({rest, {}});
        ph.push_back({attn, {{Comm::RingP2P, 2 * (O / G_) * (G_ - 1) * L}}});
        break;
      case Strategy::UlyssesRing: {
        const double u = c_.ulysses, r = c_.ring;
        ph.push_back({rest, {}});
        ph.push_back({0, {{Comm::AllToAll, 4 * L * O / (u * r)}}});
        ph.push_back({attn, {{Comm::RingP2P, 2 * (O / (r * u)) * (r - 1) * L}}});
        break;
      }
      case Strategy::DistriFusion:
        // Every block's K and V of its p/N tokens all-gathered: asynchronously beside the step
        // (the next step reads them, one step stale), synchronously in the warm-up steps.
        if (is_warm) {
          ph.push_back({rest + attn, {}});
          ph.push_back({0, {{Comm::AllGather, 2 * O * L}}});
        } else {
          ph.push_back({rest + attn, {{Comm::AllGather, 2 * O * L}}});
        }
        break;
    }
    if (c_.cfg_degree == 2)  // the two branches' noise predictions exchanged, each rank its tokens' share
      ph.push_back({0, {{Comm::CfgExchange, static_cast<double>(B) * static_cast<double>(p_) * latent_out_channels(c_.dit) * kBytes / G_, 1, false}}});
    return ph;
  }

  std::vector<int> group_nodes(int g) const {
    return std::vector<int>(nodes_.begin() + g * G_, nodes_.begin() + (g + 1) * G_);
  }

  void begin_step() {
    const int64_t now = world_.engine().now().count_ns();
    batch_ = compose(batch_, now);
    if (batch_.empty()) {
      running_ = false;
      return;
    }
    running_ = true;
    const int B = static_cast<int>(batch_.size()) * c_.branch_factor();
    const bool w = c_.strategy() == Strategy::DistriFusion && warm(batch_);
    for (int r : batch_) ++req_[static_cast<size_t>(r)].scheduled;
    ++batch_steps_;
    batch_images_ += static_cast<long>(batch_.size());
    formula_sum_ += formula_bytes_per_device(c_, B);
    phases_ = plan_step(B, w);
    phase_ = 0;
    step_start_ns_ = now;
    start_phase();
  }

  void add_bytes(double before, bool strategy) {
    const double d = world_.fabric().stats().bytes_started - before;
    fabric_bytes_ += d;
    if (strategy) strategy_bytes_ += d;
  }

  // A phase's compute and its transfers run together; the phase ends when all have. Compute
  // that a transfer overlaps runs on the SMs NCCL's kernels leave it (HardwareSpec::comm_sms):
  // it advances at 1 / overlap_stretch() while any of the phase's transfers is in flight and
  // at full rate after the last one ends (the timer is moved then).
  void start_phase() {
    const Phase& ph = phases_[phase_];
    const int64_t now = world_.engine().now().count_ns();
    pending_ = 1;  // held until every item is launched
    comm_pending_ = 0;
    compute_running_ = ph.compute_ns > 0;
    if (compute_running_) {
      ++pending_;
      work_left_ = static_cast<double>(ph.compute_ns);
      rate_ = ph.comm.empty() ? 1.0 : 1.0 / c_.hardware.overlap_stretch();
      rate_since_ = compute_start_ = now;
      schedule_compute_end(now);
    }
    for (const Comm& cm : ph.comm) launch(cm);
    if (compute_running_ && comm_pending_ == 0 && rate_ < 1) rate_change(now, 1.0);  // no transfer was started
    item_done();
  }

  void schedule_compute_end(int64_t now) {
    const int64_t end = now + std::max<int64_t>(0, static_cast<int64_t>(std::ceil(work_left_ / rate_)));
    world_.engine().schedule_at(SimTime::ns(end), Priority::Compute, this, kPhaseTimer, 0, Generation(++timer_gen_));
  }

  void rate_change(int64_t now, double rate) {
    work_left_ = std::max(0.0, work_left_ - static_cast<double>(now - rate_since_) * rate_);
    rate_ = rate;
    rate_since_ = now;
    schedule_compute_end(now);
  }

  void compute_done() {
    const int64_t now = world_.engine().now().count_ns(), dur = now - compute_start_;
    compute_running_ = false;
    for (auto& b : busy_ns_) b += dur;
    busy_profile_.add(compute_start_, now);
    if (traced_ < 2000 && world_.trace().enabled()) {
      for (size_t d = 0; d < nodes_.size() && d < 64; ++d)
        world_.trace().complete(pid_, static_cast<int>(d), fmt::format("step {} phase {}", batch_steps_, phase_), "compute", compute_start_, dur);
      ++traced_;
    }
    item_done();
  }

  void comm_done() {
    if (--comm_pending_ == 0 && compute_running_ && rate_ < 1) rate_change(world_.engine().now().count_ns(), 1.0);
    item_done();
  }

  void launch(const Comm& cm) {
    auto& fab = world_.fabric();
    const double before = fab.stats().bytes_started;
    auto collective = [&](net::CollectiveKind kind, std::vector<int> group, double bytes, int fused, uint64_t salt) {
      if (group.size() < 2) return;
      net::CollectiveOptions o;
      o.fused_ring_steps = true;
      o.fused_count = fused;
      o.salt = salt;
      auto coll = std::make_unique<net::Collective>(fab, kind, std::move(group), bytes, o);
      ++pending_;
      ++comm_pending_;
      coll->start([this](Engine&) { comm_done(); });
      flows_ += coll->flows_started();
      live_.push_back(std::move(coll));
    };
    for (int g = 0; g < c_.cfg_degree; ++g) {
      const auto nodes = group_nodes(g);
      switch (cm.kind) {
        case Comm::AllReduce: collective(net::CollectiveKind::AllReduceRing, nodes, cm.bytes, cm.fused, static_cast<uint64_t>(g)); break;
        case Comm::AllGather: collective(net::CollectiveKind::AllGather, nodes, cm.bytes, 1, static_cast<uint64_t>(g)); break;
        case Comm::AllToAll: {
          const int u = c_.strategy() == Strategy::UlyssesRing ? c_.ulysses : G_;
          for (int k = 0; k < G_ / u; ++k)  // each Ulysses group: u consecutive devices
            collective(net::CollectiveKind::AllToAll, std::vector<int>(nodes.begin() + k * u, nodes.begin() + (k + 1) * u), cm.bytes, 1,
                       static_cast<uint64_t>(g * 64 + k));
          break;
        }
        case Comm::RingP2P: {
          // Rings of the devices with the same Ulysses rank, one per rank.
          const int u = c_.strategy() == Strategy::UlyssesRing ? c_.ulysses : 1, r = G_ / u;
          if (r < 2) break;
          for (int j = 0; j < u; ++j)
            for (int i = 0; i < r; ++i) {
              ++pending_;
              ++comm_pending_;
              ++flows_;
              fab.start(nodes[static_cast<size_t>(i * u + j)], nodes[static_cast<size_t>(((i + 1) % r) * u + j)], cm.bytes, this,
                        make_tag(kPhaseFlow, g, 0, 0, 0), static_cast<uint64_t>(g * 4096 + i * 64 + j));
            }
          break;
        }
        case Comm::CfgExchange:
          if (g == 1) break;
          for (int i = 0; i < G_; ++i)
            for (int dir = 0; dir < 2; ++dir) {
              ++pending_;
              ++comm_pending_;
              ++flows_;
              fab.start(nodes_[static_cast<size_t>(dir * G_ + i)], nodes_[static_cast<size_t>((1 - dir) * G_ + i)], cm.bytes, this,
                        make_tag(kPhaseFlow, 0, 0, 0, 0), static_cast<uint64_t>(i * 2 + dir));
            }
          break;
      }
    }
    add_bytes(before, cm.strategy);
  }

  void item_done() {
    if (--pending_ > 0) return;
    if (++phase_ < phases_.size()) {
      start_phase();
      return;
    }
    // The step is over: collectives are released at the boundary event, outside their callbacks.
    world_.engine().schedule_at(world_.engine().now(), Priority::Compute, this, kStepBoundary);
  }

  void step_boundary() {
    live_.clear();
    const int64_t now = world_.engine().now().count_ns();
    for (int r : batch_)
      if (req_[static_cast<size_t>(r)].scheduled == c_.steps) image_done(r, now);
    begin_step();
  }

  // ---- PipeFusion ----
  struct PStep {
    std::vector<int> reqs;
    int B = 0, M = 1;
    bool continues = false;          // some image has another step after this one
    std::vector<char> in;            // (group, stage, patch): input activations arrived
    std::vector<char> computed;      // (group, patch): the last stage computed it
    std::vector<char> cfg_in;        // (group, patch): the other branch's prediction arrived
    std::vector<char> sampled;       // (group, patch): the latent patch is updated
    std::vector<char> latent_in;     // (group, patch): its latent is back at stage 0
    std::vector<int> latent_back;    // per group: patches whose latent is back at stage 0
    int sampled_count = 0;
  };
  struct StageState {
    long k = 0;      // the step and patch it runs next
    int m = 0;
    bool busy = false;
    int64_t start_ns = 0;
  };

  // Stage 0 starts a new step: the batch is composed now.
  bool open_step() {
    const int64_t now = world_.engine().now().count_ns();
    std::vector<int> prev = psteps_.empty() ? std::vector<int>{} : psteps_.back().reqs;
    std::vector<int> batch = compose(prev, now);
    if (batch.empty()) return false;
    PStep st;
    st.reqs = batch;
    st.B = static_cast<int>(batch.size()) * c_.branch_factor();
    st.M = warm(batch) ? 1 : c_.patches;
    for (int r : batch) ++req_[static_cast<size_t>(r)].scheduled;
    for (int r : batch) st.continues = st.continues || req_[static_cast<size_t>(r)].scheduled < c_.steps;
    const size_t gm = static_cast<size_t>(c_.cfg_degree * st.M);
    st.in.assign(gm * static_cast<size_t>(c_.pipefusion), 0);
    st.computed.assign(gm, 0);
    st.cfg_in.assign(gm, 0);
    st.sampled.assign(gm, 0);
    st.latent_in.assign(gm, 0);
    st.latent_back.assign(static_cast<size_t>(c_.cfg_degree), 0);
    psteps_.push_back(std::move(st));
    ++batch_steps_;
    batch_images_ += static_cast<long>(batch.size());
    formula_sum_ += formula_bytes_per_device(c_, psteps_.back().B);
    return true;
  }

  // Whether stage 0 of group g may start patch m of step k: the step's images that came from
  // step k-1 need that patch's latent back (all of step k-1 when the patch counts differ).
  bool latent_ready(int g, long k, int m) const {
    if (k == 0) return true;
    const PStep& prev = psteps_[static_cast<size_t>(k - 1)];
    if (!prev.continues) return true;
    bool carried = false;
    for (int r : psteps_[static_cast<size_t>(k)].reqs)
      carried = carried || std::find(prev.reqs.begin(), prev.reqs.end(), r) != prev.reqs.end();
    if (!carried) return true;
    if (prev.M == psteps_[static_cast<size_t>(k)].M) return prev.latent_in[static_cast<size_t>(g * prev.M + m)] != 0;
    return prev.latent_back[static_cast<size_t>(g)] == prev.M;
  }

  void try_stage(int g, int s) {
    StageState& ss = stages_[static_cast<size_t>(g * c_.pipefusion + s)];
    if (ss.busy) return;
    if (ss.k >= static_cast<long>(psteps_.size())) {
      // Only group 0's stage 0 opens steps; group 1 follows the same records.
      if (s != 0 || g != 0 || !open_step()) return;
      for (int h = 1; h < c_.cfg_degree; ++h) try_stage(h, 0);
    }
    PStep& st = psteps_[static_cast<size_t>(ss.k)];
    if (s == 0) {
      if (!latent_ready(g, ss.k, ss.m)) return;
    } else if (!st.in[static_cast<size_t>((g * c_.pipefusion + s) * st.M + ss.m)]) {
      return;
    }
    ss.busy = true;
    const int64_t now = world_.engine().now().count_ns();
    ss.start_ns = now;
    const int64_t dur = stage_ns(s, st.B, st.M);
    busy_ns_[static_cast<size_t>(g * G_ + s)] += dur;
    busy_profile_.add(now, now + dur, 1.0 / static_cast<double>(busy_ns_.size()));
    if (traced_ < 4000 && world_.trace().enabled()) {
      world_.trace().complete(pid_, g * G_ + s, fmt::format("t{} p{}", ss.k, ss.m), "compute", now, dur);
      ++traced_;
    }
    world_.engine().schedule_at(SimTime::ns(now + dur), Priority::Compute, this, kStageDone, static_cast<uint32_t>(g * c_.pipefusion + s));
  }

  void stage_done(int gs) {
    const int N = c_.pipefusion, g = gs / N, s = gs % N;
    StageState& ss = stages_[static_cast<size_t>(gs)];
    const long k = ss.k;
    const int m = ss.m;
    PStep& st = psteps_[static_cast<size_t>(k)];
    ss.busy = false;
    if (++ss.m >= st.M) ss.m = 0, ++ss.k;
    auto& fab = world_.fabric();
    const double before = fab.stats().bytes_started;
    if (s + 1 < N) {
      // The patch's activations to the next stage.
      const double bytes = static_cast<double>(st.B) * static_cast<double>(p_) / st.M * c_.dit.hidden * kBytes;
      ++flows_;
      fab.start(nodes_[static_cast<size_t>(g * G_ + s)], nodes_[static_cast<size_t>(g * G_ + s + 1)], bytes, this,
                make_tag(kActivation, g, s + 1, k, m), static_cast<uint64_t>(gs));
      if (g == 0 && (s == 0 || s == 1)) stage1_io_bytes_ += bytes;  // stage 1 receives from 0 and sends to 2
      add_bytes(before, true);
    } else {
      st.computed[static_cast<size_t>(g * st.M + m)] = 1;
      if (c_.cfg_degree == 2) {
        // The sampler needs both branches' predictions of the patch.
        const double bytes = static_cast<double>(st.B) * static_cast<double>(p_) / st.M * latent_out_channels(c_.dit) * kBytes;
        ++flows_;
        fab.start(nodes_[static_cast<size_t>(g * G_ + s)], nodes_[static_cast<size_t>((1 - g) * G_ + s)], bytes, this,
                  make_tag(kCfgPatch, 1 - g, s, k, m), static_cast<uint64_t>(gs));
        add_bytes(before, false);
      }
      try_sample(g, k, m);
    }
    try_stage(g, s);
  }

  void try_sample(int g, long k, int m) {
    PStep& st = psteps_[static_cast<size_t>(k)];
    const size_t i = static_cast<size_t>(g * st.M + m);
    if (!st.computed[i] || st.sampled[i] || (c_.cfg_degree == 2 && !st.cfg_in[i])) return;
    st.sampled[i] = 1;
    const int N = c_.pipefusion;
    if (st.continues) {
      // The updated latent patch goes back round to the first stage for the next step.
      auto& fab = world_.fabric();
      const double before = fab.stats().bytes_started;
      const double bytes = static_cast<double>(st.B) * static_cast<double>(p_) / st.M * latent_out_channels(c_.dit) * kBytes;
      ++flows_;
      fab.start(nodes_[static_cast<size_t>(g * G_ + N - 1)], nodes_[static_cast<size_t>(g * G_)], bytes, this, make_tag(kLatent, g, 0, k, m),
                static_cast<uint64_t>(g));
      add_bytes(before, false);
    }
    if (++st.sampled_count == st.M * c_.cfg_degree) {
      const int64_t now = world_.engine().now().count_ns();
      for (int r : st.reqs)
        if (req_[static_cast<size_t>(r)].scheduled == c_.steps && req_[static_cast<size_t>(r)].finish_ns < 0) {
          // Its last step: done once every later step that does not hold it is irrelevant.
          bool later = false;
          for (size_t j = static_cast<size_t>(k) + 1; j < psteps_.size(); ++j)
            later = later || std::find(psteps_[j].reqs.begin(), psteps_[j].reqs.end(), r) != psteps_[j].reqs.end();
          if (!later) image_done(r, now);
        }
    }
  }

  DiffusionConfig c_;
  World& world_;
  CostModel cost_;
  int G_ = 1;
  long p_ = 0;
  std::vector<int> nodes_;  // topology nodes: group-major, then (ring position, Ulysses rank) or stage
  std::vector<int64_t> busy_ns_;
  BusyProfile busy_profile_;  // the devices' mean busy time over the run (peak power)
  std::vector<int> devices_;
  std::vector<Request> req_;
  size_t next_arrival_ = 0;
  std::deque<int> waiting_;
  // synchronous strategies
  std::vector<int> batch_;
  bool running_ = false;
  std::vector<Phase> phases_;
  size_t phase_ = 0;
  int pending_ = 0;
  int comm_pending_ = 0;       // the phase's transfers still in flight
  bool compute_running_ = false;
  double work_left_ = 0;       // the phase's compute left, in ns at full rate
  double rate_ = 1;            // its rate now: 1, or 1 / overlap_stretch() beside a transfer
  int64_t rate_since_ = 0, compute_start_ = 0;
  uint32_t timer_gen_ = 0;
  int64_t step_start_ns_ = 0;
  std::vector<std::unique_ptr<net::Collective>> live_;
  std::map<int, std::pair<int64_t, int64_t>> gcache_;
  // PipeFusion
  std::vector<PStep> psteps_;
  std::vector<StageState> stages_;
  std::map<std::tuple<int, int, int>, int64_t> scache_;
  double stage1_io_bytes_ = 0;
  // accounting
  long batch_steps_ = 0, batch_images_ = 0;
  double fabric_bytes_ = 0, strategy_bytes_ = 0, formula_sum_ = 0;  // formula_sum_: the formula at each step's batch
  uint64_t flows_ = 0;
  int pid_ = 0;
  long traced_ = 0;
  bool done_ = false;
  DiffusionResults res_;
};

}  // namespace

SLUICE_REGISTER(workload, diffusion_workload) {
  // Keys bound to DiffusionConfig's fields; logic reads the others: name, model (a catalog
  // reference), trace (turns the world's trace on), cost_tables (resolved to a directory),
  // place (the devices), and parallel.patches' 0 (as many as stages).
  using C = DiffusionConfig;
  Schema s;
  Binding<C> keys(s);
  s.add("name", ParamType::String, "the workload's name (metrics under workloads.<name>)");
  s.ref("model", {"models/dit"}, dit_schema(), "the diffusion transformer: a models/dit name (dit-xl-2, pixart-sigma-xl, flux1-dev) or an inline shape");
  keys.integer("resolution", &C::resolution, "image side in pixels: (resolution / 8 / patch)^2 patch tokens on the 8x-downsampled latent")
      .def("1024")
      .range(8, 65536);
  keys.integer("steps", &C::steps, "denoising steps per image").def("28").range(1, 10000);
  keys.flag("cfg", &C::cfg, "classifier-free guidance: a conditional and an unconditional pass per step (twice the batch unless parallel.cfg is 2)")
      .def("false");
  auto par = std::make_shared<Schema>();
  Binding<C> par_keys(*par);
  par_keys.integer("cfg", &C::cfg_degree, "CFG parallel: 2 runs the two guidance branches on two device groups (needs cfg: true)").def("1").range(1, 2);
  par_keys.integer("tensor", &C::tensor, "tensor parallel degree (Megatron: heads and MLP split, two all-reduces per block)").def("1").range(1, 64);
  par_keys.integer("ulysses", &C::ulysses, "Ulysses sequence parallel degree (four all-to-alls per block; with ring: the inner degree)")
      .def("1")
      .range(1, 64);
  par_keys.integer("ring", &C::ring, "Ring sequence parallel degree (K/V blocks round a ring beside attention; with ulysses: the outer degree)")
      .def("1")
      .range(1, 64);
  par_keys.integer("distrifusion", &C::distrifusion, "DistriFusion degree (patches per device, async all-gather of one-step-stale K/V)")
      .def("1")
      .range(1, 64);
  par_keys.integer("pipefusion", &C::pipefusion, "PipeFusion pipeline stages (blocks split into stages, patches pipelined through them)")
      .def("1")
      .range(1, 512);
  par_keys.integer("patches", &C::patches, "PipeFusion: patch micro-batches per step (M; 0: as many as stages)").def("0").range(0, 4096);
  par_keys.integer("warmup_steps", &C::warmup_steps, "PipeFusion and DistriFusion: synchronous warm-up steps with fresh K/V before the stale ones")
      .def("1")
      .range(0, 10000);
  s.section("parallel", par, "how each image's steps split over devices: degrees multiply to the device count");
  keys.integer("requests", &C::requests, "image requests").def("1").range(1, 1e7);
  keys.quantity("arrival_rate", UnitKind::Rate, &C::rate_per_s, "Poisson arrivals of requests (0/s: every request at time 0)").def("0/s").nonneg();
  keys.integer("max_batch", &C::max_batch, "images per step: waiting requests join at step boundaries up to this").def("1").range(1, 4096);
  std::vector<std::pair<std::string, Implementation>> impls;
  for (Implementation i : {Implementation::PytorchLean, Implementation::PytorchNaive, Implementation::Fused}) impls.emplace_back(implementation_name(i), i);
  keys.choice<Implementation>("implementation", impls, &C::implementation,
                              "which kernels a step launches (fused: torch.compile-like fusion of the elementwise work)")
      .def("pytorch-lean");
  s.add("trace", ParamType::Bool, "write trace.json: a track per device (per stage for PipeFusion) with its steps, the first few thousand").def("false");
  s.add("cost_tables", ParamType::String, kCostTablesDoc).def("auto");
  s.section("place", placement_schema(reg), "the devices it runs on: cfg x tensor x ulysses x ring x distrifusion x pipefusion of them (group-major; Ulysses ranks fastest)");
  reg.add("workload", "diffusion",
          "diffusion-transformer image generation: denoising steps from the cost model, tensor/Ulysses/Ring/DistriFusion/PipeFusion "
          "(and CFG parallel) with their transfers as flows, requests batched per step",
          std::move(s), WorkloadKindFactory([&reg, keys, par_keys](const Params& p, World& world, const WorkloadContext& ctx) -> std::unique_ptr<Workload> {
            DiffusionConfig c = keys.make(p);
            const Params& par = p.section("parallel");
            par_keys.fill(par, c);
            if (c.patches == 0) c.patches = c.pipefusion;
            const Params& mp = p.section("model");
            c.dit = dit_from_params(mp, p.value("model").text);
            c.hardware = world.hardware();
            const long side_div = 8L * c.dit.patch;
            if (c.resolution % side_div != 0)
              p.fail("resolution", fmt::format("{}'s latent is 1/8 of the image side in patches of {}: the side must divide into {} px", c.dit.name,
                                               c.dit.patch, side_div),
                     fmt::format("a multiple of {}, e.g. {} or {}", side_div, side_div * 32, side_div * 64));
            if (c.cfg_degree == 2 && !c.cfg) par.fail("cfg", "CFG parallel splits the two guidance branches, and cfg is off", "1, or cfg: true at the workload");
            int exclusive = 0;
            for (int d : {c.tensor, c.distrifusion, c.pipefusion}) exclusive += d > 1 ? 1 : 0;
            if (exclusive > 1 || (exclusive == 1 && (c.ulysses > 1 || c.ring > 1)))
              par.fail(c.tensor > 1 ? "tensor" : c.distrifusion > 1 ? "distrifusion" : "pipefusion",
                       "tensor, distrifusion and pipefusion each take the whole group, and are not combined with each other or with ulysses/ring here",
                       "one of tensor, distrifusion, pipefusion, or ulysses x ring; each may sit inside cfg: 2");
            const long P = c.patch_tokens();
            const int heads = c.dit.heads;
            if (heads % c.tensor != 0)
              par.fail("tensor", fmt::format("{} has {} heads; tensor parallelism splits them", c.dit.name, heads), "a divisor of the head count");
            if (heads % c.ulysses != 0)
              par.fail("ulysses", fmt::format("{} has {} heads; Ulysses splits them after its all-to-all", c.dit.name, heads), "a divisor of the head count");
            if (P % (c.ulysses * c.ring * c.distrifusion) != 0)
              par.fail(c.distrifusion > 1 ? "distrifusion" : c.ring > 1 ? "ring" : "ulysses",
                       fmt::format("{} patch tokens do not split evenly over {} devices", P, c.ulysses * c.ring * c.distrifusion),
                       fmt::format("a degree dividing {}", P));
            if (c.pipefusion > blocks(c.dit))
              par.fail("pipefusion", fmt::format("{} has {} blocks", c.dit.name, blocks(c.dit)), fmt::format("at most {} stages", blocks(c.dit)));
            if (c.pipefusion > 1 && P % c.patches != 0)
              par.fail("patches", fmt::format("{} patch tokens do not split into {} equal patches", P, c.patches), fmt::format("a divisor of {}", P));
            if (c.pipefusion > 1 && c.patches > 4095) par.fail("patches", "too many patches", "at most 4095");
            {
              const CostSource src = resolve_cost_source(p.str("cost_tables"), c.hardware, p, "cost_tables");
              c.tables_dir = src.tables_dir;
              c.tables_device = src.tables_device;
              c.cost_time_scale = band_time_scale(src, c.hardware);
              c.cost_source = src.describe(c.hardware);
            }
            const DiffusionMemory mem = diffusion_memory(c);
            if (mem.total() > c.hardware.hbm_bytes)
              p.fail("parallel", fmt::format("{} at {} px does not fit: each device needs {} (weights {}, activations {}, K/V buffers {} for {} "
                                             "images a step) but {} has {}",
                                             c.dit.name, c.resolution, format_bytes(mem.total()), format_bytes(mem.weights), format_bytes(mem.activations),
                                             format_bytes(mem.kv_buffers), c.max_batch * c.branch_factor(), c.hardware.name,
                                             format_bytes(c.hardware.hbm_bytes)),
                     "tensor or pipefusion parallelism (weights P/N), a smaller max_batch, or a lower resolution");
            const auto devices = place_devices(world, p.section("place"), c.devices(), ctx.name, reg);
            if (p.flag("trace")) world.trace().enable(true);
            return std::make_unique<DiffusionJob>(ctx.name, std::move(c), world, devices);
          }));
}

}  // namespace sluice::diffusion
