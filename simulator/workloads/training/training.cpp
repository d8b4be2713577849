#include "workloads/training/training.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/units.h"
#include "engine/run_control.h"
#include "hardware/cost_source.h"
#include "recorder/training_report.h"
#include "registry/registry.h"
#include "network/pod.h"
#include "world/placement.h"
#include "world/stall.h"

namespace sluice::training {

namespace {

CostOptions cost_options(const TrainingConfig& c) {
  CostOptions o;
  o.tensor_parallel = c.tp;
  o.pipeline_parallel = c.pp;
  o.tables_dir = c.tables_dir;
  o.tables_device = c.tables_device;
  o.comm_on_fabric = true;
  return o;
}

class TrainingJob final : public Workload, public EventHandler, public net::FlowSink {
 public:
  TrainingJob(std::string name, TrainingConfig cfg, World& world, std::vector<int> devices)
      : Workload(std::move(name)), c_(std::move(cfg)), world_(world), cost_(c_.hardware, c_.model, cost_options(c_)) {
    const int slots = c_.dp * c_.pp;
    map_devices(devices);
    const int m = c_.micro_batches;
    tokens_ = static_cast<double>(c_.micro_batch_size) * c_.sequence;
    measure_handoffs();
    measure_tp_ring();
    plan_slices();
    units_ = m * n_slices_;
    stages_.resize(static_cast<size_t>(slots));
    for (int d = 0; d < c_.dp; ++d)
      for (int s = 0; s < c_.pp; ++s) stages_[static_cast<size_t>(slot(d, s))].order = schedule_order(s);
    pending_.assign(static_cast<size_t>(slots * units_ * 2), 0);
    params_per_device_ = c_.model.parameters() / (c_.tp * c_.pp);
    dp_bytes_ = params_per_device_ * c_.model.dtype_bytes;
    optimizer_ns_ = std::max<int64_t>(1, std::llround(params_per_device_ * c_.optimizer_bytes_per_param /
                                                      c_.hardware.effective_bandwidth_Bps() * 1e9));
    pid_ = world.trace_pid();
    res_.devices = c_.tp * c_.pp * c_.dp;
    res_.peak_flops_per_device = c_.hardware.peak_bf16_flops;
    res_.tokens_per_iteration = tokens_ * m * c_.dp;
    res_.model_flops_per_iteration = res_.tokens_per_iteration * (6 * c_.model.parameters() +
                                                                  12.0 * c_.model.layers * c_.model.hidden * c_.sequence);
    const int K = c_.pp;
    res_.textbook_bubble = static_cast<double>(K - 1) / (units_ + K - 1);
    for (int s = 0; s < K; ++s) {
      int64_t f = 0, b = 0;
      for (int i = 0; i < n_slices_; ++i) f += fwd_ns(s, i), b += bwd_ns(s, i);
      res_.forward_ms = std::max(res_.forward_ms, f / 1e6);
      res_.backward_ms = std::max(res_.backward_ms, b / 1e6);
    }
    res_.optimizer_ms = optimizer_ns_ / 1e6;
    res_.memory = training_memory(c_);
    res_.dp_bytes_per_device = c_.dp > 1 ? dp_bytes_ : 0;
  }

  // Megatron's rank order: tensor parallel fastest, then data parallel, then pipeline stages.
  void map_devices(const std::vector<int>& devices) {
    devices_ = devices;
    nodes_.assign(static_cast<size_t>(c_.dp * c_.pp), {});
    for (int s = 0; s < c_.pp; ++s)
      for (int d = 0; d < c_.dp; ++d)
        for (int k = 0; k < c_.tp; ++k)
          nodes_[static_cast<size_t>(slot(d, s))].push_back(world_.device_node(devices[static_cast<size_t>((s * c_.dp + d) * c_.tp + k)]));
    if (c_.tp > 1 && c_.tp_algorithm == net::CollectiveKind::AllReduceNvls)
      for (const auto& group : nodes_) net::require_nvls(world_.topology(), group, "tp_algorithm");
  }

  void start(World& w) override {
    if (world_.trace().enabled()) {
      world_.trace().name_process(pid_, fmt::format("training {}", name()));
      for (int s = 0; s < c_.pp && s < 64; ++s) world_.trace().name_thread(pid_, s, fmt::format("stage {}", s));
    }
    faults_ = !w.faults().empty();
    res_.faults = faults_;
    mark_ns_ = w.engine().now().count_ns();
    start_ns_ = mark_ns_;
    start_iteration();
    if (faults_ && c_.collective_timeout_ns > 0) arm_watchdog();
  }
  bool holds_world() const override { return c_.iterations > 0 && !done_; }
  void finish(World& w) override {
    res_.flows = flows_;
    const int64_t now = w.engine().now().count_ns();
    // Nothing is left to happen and the job is not done: it stalled (a transfer whose group is
    // cut off, with no watchdog to fail it). That is an error, as it is for serving, not a run
    // that reports success with fewer iterations than asked.
    if (holds_world() && w.engine().pending() == 0)
      throw WorkloadStalled(fmt::format(
          "training job '{}' stalled at {}: {} of {} iterations done and nothing left that could finish it ({})", name(),
          w.engine().now().str(), res_.iteration_s.size(), c_.iterations,
          state_ == State::Recovering ? "it waits for failed devices that are never repaired: give the fault a repair"
                                      : "a transfer's group is cut off and collective_timeout is off: set it (e.g. 60s) to fail the job instead, "
                                        "or give the fault a repair"));
    if (!done_) {
      // The run ended with the job still going: the work since the last checkpoint is kept
      // (nothing failed it), an unfinished write or recovery counts as such.
      res_.wall_s = static_cast<double>(now - start_ns_) / 1e9;
      if (state_ == State::Recovering) res_.recovering_s += static_cast<double>(now - failed_at_ns_) / 1e9;
      else if (state_ == State::Checkpointing) {
        res_.useful_s += static_cast<double>(ckpt_start_ns_ - mark_ns_) / 1e9;
        res_.checkpoint_s += static_cast<double>(now - ckpt_start_ns_) / 1e9;
      } else res_.useful_s += static_cast<double>(now - mark_ns_) / 1e9;
    }
  }

  void on_devices_changed(World& w, const std::vector<int>& devices, bool up) override {
    (void)devices;
    if (done_) return;
    if (!up && state_ != State::Recovering) fail_stop(w);
    if (state_ != State::Recovering || restart_pending_ || decide_pending_) return;
    // Decided at the end of the instant, once every failure and repair at this time is known
    // (a rack or several hosts failing together re-form the slice once).
    decide_pending_ = true;
    w.engine().schedule_in(SimTime::zero(), Priority::Schedule, this, kRecover, 0, Generation(gen_));
  }
  void report(Recorder& rec, bool scoped) const override { report_training(res_, c_, rec, scoped ? name() : std::string()); }
  const TrainingResults& results() const { return res_; }

  void on_event(Engine& e, uint32_t kind, uint32_t arg) override {
    if (!(e.event_generation() == Generation(gen_))) {  // from before a failure: void
      e.discount_void_event();
      return;
    }
    switch (kind) {
      case kCompute: compute_done(static_cast<int>(arg)); break;
      case kIterationEnd: iteration_end(e); break;
      case kSkipDone: skip_done(e); break;
      case kCheckpointDone: checkpoint_done(e); break;
      case kRestart: restart_done(e); break;
      case kWatchdog:
        ++side_events_;
        watchdog(e);
        break;
      case kRecover:
        decide_pending_ = false;
        recover(world_);
        break;
    }
  }

  void on_flow_done(Engine&, uint64_t tag) override {
    if ((tag >> 56) != (gen_ & 0xFF)) return;  // a transfer of an iteration a failure cut short
    const int target = static_cast<int>((tag >> 32) & 0xFFFFFF), mb = static_cast<int>((tag >> 1) & 0x7FFFFFFF), grad = static_cast<int>(tag & 1);
    int& left = pending_[static_cast<size_t>((target * units_ + mb) * 2 + grad)];
    if (--left > 0) return;
    Stage& st = stages_[static_cast<size_t>(target)];
    (grad ? st.b_in : st.f_in)[static_cast<size_t>(mb)] = 1;
    send_arrived(grad ? target + 1 : target - 1);  // same replica: the next or previous stage's slot
    try_run(target);
  }

 private:
  enum : uint32_t { kCompute = 1, kIterationEnd = 2, kCheckpointDone = 3, kRestart = 4, kWatchdog = 5, kRecover = 6, kSkipDone = 7 };
  enum class State { Running, Checkpointing, Recovering };
  // Schedules an event of this generation `delay_ns` from now (a failure voids it).
  void schedule(uint32_t kind, int64_t delay_ns, uint32_t arg = 0) {
    world_.engine().schedule_in(SimTime::ns(delay_ns), Priority::Compute, this, kind, arg, Generation(gen_));
  }
  // A pass of one unit: a micro-batch, or with token slicing one slice of one micro-batch
  // (unit = micro-batch x slices + slice).
  struct Op {
    bool forward;
    int mb;  // the unit
  };
  struct Stage {
    std::vector<Op> order;
    size_t next = 0;
    bool busy = false;
    std::vector<char> f_in, b_in;
    // Its hand-offs go out on one communication stream, in order: one at a time, the rest wait.
    struct Send {
      int to, mb;
      bool grad;
    };
    std::deque<Send> outbox;
    bool sending = false;
    int64_t busy_ns = 0, op_start_ns = 0, last_end_ns = 0;
    std::unique_ptr<net::Collective> tp_collective;
  };

  int slot(int d, int s) const { return d * c_.pp + s; }
  int64_t fwd_ns(int s, int slice) const { return fwd_ns_[static_cast<size_t>(s * n_slices_ + slice)]; }
  int64_t bwd_ns(int s, int slice) const { return backward_of(fwd_ns(s, slice)); }
  // A pass's backward from its forward: twice it, three times recomputing.
  int64_t backward_of(int64_t forward_ns) const { return forward_ns * (c_.recompute ? 3 : 2); }
  // A stage's forward of a slice as the schedule runs it: the cost model's ns, at least 1.
  static int64_t pass_ns(double cost_ns) { return std::max<int64_t>(1, std::llround(cost_ns)); }
  double unit_tokens(int unit) const {
    return static_cast<double>(c_.micro_batch_size) * slice_len_[static_cast<size_t>(unit % n_slices_)];
  }

  // For each stage boundary of replica 0, what handing over activations costs when the
  // fabric carries nothing else: every tensor-parallel rank sends its share at once over its
  // route, so a link that k of them cross gives each 1/k of it. The slicing DP's estimate of a
  // slice's hand-off (the simulation itself times every send as flows).
  void measure_handoffs() {
    for (int s = 0; s + 1 < c_.pp; ++s) {
      const auto& a = nodes_[static_cast<size_t>(slot(0, s))];
      const auto& b = nodes_[static_cast<size_t>(slot(0, s + 1))];
      std::map<int, int> crossing;
      std::vector<std::vector<int>> routes;
      for (size_t k = 0; k < a.size(); ++k) {
        routes.push_back(world_.fabric().router().route(a[k], b[k], k));
        for (int l : routes.back()) ++crossing[l];
      }
      double ns_per_byte = 0, lat = 0;
      for (const auto& r : routes) {
        for (int l : r) ns_per_byte = std::max(ns_per_byte, crossing[l] * 1e9 / world_.topology().link(l).bandwidth_Bps);
        lat = std::max(lat, static_cast<double>(world_.fabric().router().latency_ns(r)));
      }
      handoff_ns_per_byte_ = std::max(handoff_ns_per_byte_, ns_per_byte);
      handoff_latency_ns_ = std::max(handoff_latency_ns_, lat);
    }
  }
  // The same for a stage's tensor-parallel ring (replica 0, stage 0; every stage's ring has the
  // same shape): the ring's slowest edge, and a step's route latency.
  void measure_tp_ring() {
    const auto& a = nodes_[static_cast<size_t>(slot(0, 0))];
    const size_t n = a.size();
    if (n < 2) return;
    for (size_t k = 0; k < n; ++k) {
      const auto r = world_.fabric().router().route(a[k], a[(k + 1) % n], k);
      for (int l : r) ring_ns_per_byte_ = std::max(ring_ns_per_byte_, 1e9 / world_.topology().link(l).bandwidth_Bps);
      ring_latency_ns_ = std::max(ring_latency_ns_, static_cast<double>(world_.fabric().router().latency_ns(r)));
    }
  }
  // A pass's tensor-parallel all-reduces on stage s over `tokens` tokens, as the fused ring
  // the simulation runs (2(n-1)/n of the bytes over the slowest edge, every step's latency).
  double tp_ns(double tokens, int s) const {
    const double n = c_.tp;
    if (c_.tp < 2) return 0;
    const int layers = cost_.stage_range(s).count;
    return 2 * (n - 1) / n * cost_.tp_allreduce_bytes(tokens, s) * ring_ns_per_byte_ + 2 * (n - 1) * 2 * layers * ring_latency_ns_;
  }
  // One direction of the slowest boundary for `tokens` tokens: each rank's share of the activations.
  double handoff_ns(double tokens) const {
    if (c_.pp == 1) return 0;
    return cost_.activation_bytes(tokens) / c_.tp * handoff_ns_per_byte_ + handoff_latency_ns_;
  }

  // The forward/backward phase of one iteration with these slices, as the schedule runs it on
  // an otherwise idle fabric: every stage takes its ops in schedule order, each once its input
  // has arrived (the previous stage's activations or the next stage's gradients; the last
  // stage's backward after its own forward), for its compute and then its tensor-parallel
  // all-reduces. Sends do not hold a stage, but a stage's sends leave one after another and a
  // stage receives one after another (its links carry them in turn: where hand-offs take longer
  // than compute, as over one 25 Gb/s NIC, they queue). Returns the last stage op's end.
  double schedule_ns(const std::vector<int>& lengths) {
    const int K = c_.pp, n = static_cast<int>(lengths.size()), U = c_.micro_batches * n, b = c_.micro_batch_size;
    std::vector<int64_t> fwd(static_cast<size_t>(K * n));
    std::vector<double> tp(static_cast<size_t>(K * n)), x(static_cast<size_t>(n));
    std::vector<double> tx_free(static_cast<size_t>(K), 0), rx_free(static_cast<size_t>(K), 0);
    // A hand-off of slice i from stage `from` to `to`, sent at t: when it has arrived.
    auto handoff = [&](int from, int to, int i, double t) {
      const double start = std::max({t, tx_free[static_cast<size_t>(from)], rx_free[static_cast<size_t>(to)]});
      const double wire = x[static_cast<size_t>(i)] - handoff_latency_ns_;
      tx_free[static_cast<size_t>(from)] = rx_free[static_cast<size_t>(to)] = start + wire;
      return start + x[static_cast<size_t>(i)];
    };
    std::vector<double> arriveF(static_cast<size_t>(K * U), -1), arriveB(static_cast<size_t>(K * U), -1);
    std::vector<double> st(static_cast<size_t>(K));
    for (int i = 0, c = 0; i < n; c += lengths[static_cast<size_t>(i)], ++i) {
      const int l = lengths[static_cast<size_t>(i)];
      const auto key = std::make_pair(l, c);
      auto it = stage_cache_.find(key);
      if (it == stage_cache_.end()) {
        cost_.slice_stage_ns(b, l, c, true, st);
        it = stage_cache_.emplace(key, st).first;
      }
      for (int s = 0; s < K; ++s) {
        fwd[static_cast<size_t>(s * n + i)] = pass_ns(it->second[static_cast<size_t>(s)]);
        tp[static_cast<size_t>(s * n + i)] = tp_ns(static_cast<double>(b) * l, s);
      }
      x[static_cast<size_t>(i)] = handoff_ns(static_cast<double>(b) * l);
    }
    std::vector<std::vector<Op>> order(static_cast<size_t>(K));
    for (int s = 0; s < K; ++s) order[static_cast<size_t>(s)] = schedule_order(s, U);
    std::vector<double> endF(static_cast<size_t>(K * U), -1), free_at(static_cast<size_t>(K), 0);
    std::vector<size_t> next(static_cast<size_t>(K), 0);
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < K; ++s)
        while (next[static_cast<size_t>(s)] < order[static_cast<size_t>(s)].size()) {
          const Op op = order[static_cast<size_t>(s)][next[static_cast<size_t>(s)]];
          const int i = op.mb % n;
          const size_t at = static_cast<size_t>(s * U + op.mb);
          double ready = 0;
          if (op.forward && s > 0) ready = arriveF[at];
          else if (!op.forward) ready = s == K - 1 ? endF[at] : arriveB[at];
          if (ready < 0) break;
          const int64_t f = fwd[static_cast<size_t>(s * n + i)];
          const double end = std::max(free_at[static_cast<size_t>(s)], ready) + static_cast<double>(op.forward ? f : backward_of(f)) +
                             tp[static_cast<size_t>(s * n + i)];
          if (op.forward) endF[at] = end;
          free_at[static_cast<size_t>(s)] = end;
          if (op.forward && s + 1 < K) arriveF[static_cast<size_t>((s + 1) * U + op.mb)] = handoff(s, s + 1, i, end);
          if (!op.forward && s > 0) arriveB[static_cast<size_t>((s - 1) * U + op.mb)] = handoff(s, s - 1, i, end);
          ++next[static_cast<size_t>(s)];
          moved = true;
        }
    }
    return *std::max_element(free_at.begin(), free_at.end());
  }
  static constexpr int kMaxUniformSlices = 64;  // uniform slicings judged beside the DP's candidates

  // The slices of a micro-batch's sequences (policy none: the whole sequence as one) and each
  // stage's forward time of each: slice i of l tokens after c costs f(l, c) on every stage
  // (cost model: the stage's own layers, attention over the c cached tokens, the LM head over
  // every token on the last stage; for the formula also its tensor-parallel all-reduces), its
  // backward 2f (3f recomputing). The policies choose
  // lengths by TeraPipe's formula over the m micro-batches, T = m sum a + (K-1) max t, with
  // f, b the slowest stage's and x the slice's hand-off: t = f + b + 2x (one slice's way down
  // and back up the pipeline) and a = max(f, x) + max(b, x) (a stage sends while it computes
  // the next slice, so per slice it is held by the slower of the two); x = 0 on one stage.
  void plan_slices() {
    const SlicingConfig& sc = c_.slicing;
    const int K = c_.pp, b = c_.micro_batch_size, S = c_.sequence;
    const double back = c_.recompute ? 3 : 2;
    std::vector<double> st(static_cast<size_t>(K));
    int last_l = -1, last_c = -1;  // the DP asks for t and a of the same slice in turn
    std::pair<double, double> last{0, 0};
    auto parts = [&](int l, int c) {
      if (l == last_l && c == last_c) return last;
      cost_.slice_stage_ns(b, l, c, true, st);
      double f = 0;  // the slowest stage: compute and its tensor-parallel all-reduces
      for (int s = 0; s < K; ++s) f = std::max(f, st[static_cast<size_t>(s)] + tp_ns(static_cast<double>(b) * l, s));
      last = {f, handoff_ns(static_cast<double>(b) * l)};
      last_l = l, last_c = c;
      return last;
    };
    auto t = [&](int l, int c) {
      const auto [f, x] = parts(l, c);
      return f * (1 + back) + 2 * x;
    };
    TeraPipeOptions o;
    o.granularity = sc.granularity;
    o.candidate_gap = sc.candidate_gap;
    o.micro_batches = c_.micro_batches;
    o.sum_cost = [&](int l, int c) {
      const auto [f, x] = parts(l, c);
      return std::max(f, x) + std::max(back * f, x);
    };
    std::vector<int> lengths{S};
    if (sc.policy == SlicingPolicy::Uniform) lengths = uniform_slices(S, sc.slices, sc.granularity);
    if (sc.policy == SlicingPolicy::TeraPipe) {
      // The DP's candidates (its best slicing under each t_max it evaluates) and every uniform
      // slicing, judged by the schedule the simulator runs; the formula only proposes.
      std::vector<std::vector<int>> cands;
      o.on_candidate = [&](const std::vector<int>& l) { cands.push_back(l); };
      const SlicePlan p = terapipe_slices(S, K, t, o);
      o.on_candidate = nullptr;
      res_.dp_candidates = p.candidates;
      res_.dp_evaluated = p.evaluated;
      lengths = p.lengths;
      double best = schedule_ns(lengths);
      for (const auto& l : cands)
        if (const double x = schedule_ns(l); x < best) best = x, lengths = l;
      const int granules = (S + sc.granularity - 1) / sc.granularity;
      double best_uniform = std::numeric_limits<double>::infinity();
      for (int k = 1; k <= std::min(granules, kMaxUniformSlices); ++k) {
        const auto l = uniform_slices(S, k, sc.granularity);
        const double x = schedule_ns(l);
        if (x < best_uniform) best_uniform = x, res_.best_uniform_slices = k;
        if (x < best) best = x, lengths = l;
      }
      res_.slice_schedule_ms = best / 1e6;
      res_.best_uniform_schedule_ms = best_uniform / 1e6;
    }
    const SlicePlan chosen = evaluate_slices(lengths, K, t, o), whole = evaluate_slices({S}, K, t, o);
    res_.slice_tokens = lengths;
    res_.slice_model_ms = chosen.latency_ns / 1e6;
    res_.unsliced_model_ms = whole.latency_ns / 1e6;
    res_.slice_bubble_model = chosen.latency_ns > 0 ? (K - 1) * chosen.max_ns / chosen.latency_ns : 0;
    n_slices_ = static_cast<int>(lengths.size());
    slice_len_ = lengths;
    fwd_ns_.assign(static_cast<size_t>(K * n_slices_), 0);
    int c = 0;
    for (int i = 0; i < n_slices_; ++i) {
      cost_.slice_stage_ns(b, lengths[static_cast<size_t>(i)], c, true, st);
      for (int s = 0; s < K; ++s) fwd_ns_[static_cast<size_t>(s * n_slices_ + i)] = pass_ns(st[static_cast<size_t>(s)]);
      c += lengths[static_cast<size_t>(i)];
    }
  }

  // The order in which stage s runs its forward (F) and backward (B) passes. Token slicing
  // runs under GPipe over units: slices of a micro-batch in order, backwards in reverse unit
  // order, so a slice's backward follows the later slices' on its stage (they hand it the
  // gradient of its keys and values) and the next stage's backward of the same slice.
  std::vector<Op> schedule_order(int s) const { return schedule_order(s, units_); }
  std::vector<Op> schedule_order(int s, int m) const {
    const int K = c_.pp;
    std::vector<Op> out;
    if (c_.schedule == Schedule::GPipe) {
      for (int i = 0; i < m; ++i) out.push_back({true, i});
      for (int i = m - 1; i >= 0; --i) out.push_back({false, i});
      return out;
    }
    const int warm = std::min(K - s - 1, m);
    int f = 0, b = 0;
    for (; f < warm; ++f) out.push_back({true, f});
    while (f < m) {
      out.push_back({true, f++});
      out.push_back({false, b++});
    }
    while (b < m) out.push_back({false, b++});
    return out;
  }

  void start_iteration() {
    const int64_t now = world_.engine().now().count_ns();
    iter_start_ns_ = now;
    progress_ns_ = now;
    stages_reduced_ = 0;
    stage_bwd_done_.assign(static_cast<size_t>(c_.pp), 0);
    stage_dp_left_.assign(static_cast<size_t>(c_.pp), 0);
    last_backward_ns_ = 0;
    for (int d = 0; d < c_.dp; ++d)
      for (int s = 0; s < c_.pp; ++s) {
        Stage& st = stages_[static_cast<size_t>(slot(d, s))];
        st.next = 0;
        st.busy_ns = 0;
        st.f_in.assign(static_cast<size_t>(units_), s == 0 ? 1 : 0);
        st.b_in.assign(static_cast<size_t>(units_), 0);
        st.outbox.clear();
        st.sending = false;
      }
    observe_start(now);
    for (int i = 0; i < c_.dp * c_.pp; ++i) try_run(i);
  }

  void try_run(int sl) {
    Stage& st = stages_[static_cast<size_t>(sl)];
    if (st.busy || st.next >= st.order.size()) return;
    const Op op = st.order[st.next];
    if (!(op.forward ? st.f_in : st.b_in)[static_cast<size_t>(op.mb)]) return;
    st.busy = true;
    ++st.next;
    const int s = sl % c_.pp;
    const int64_t now = world_.engine().now().count_ns();
    st.op_start_ns = now;
    const int slice = op.mb % n_slices_;
    const int64_t dur = op.forward ? fwd_ns(s, slice) : bwd_ns(s, slice);
    (void)now;
    schedule(kCompute, dur, static_cast<uint32_t>(sl));
  }

  void compute_done(int sl) {
    Stage& st = stages_[static_cast<size_t>(sl)];
    if (c_.tp > 1) {
      // The op's tensor-parallel all-reduces (two per layer, forward or backward) as one fused ring.
      net::CollectiveOptions o;
      o.fused_ring_steps = true;
      const int s = sl % c_.pp;
      o.fused_count = 2 * cost_.stage_range(s).count;
      o.salt = static_cast<uint64_t>(sl);
      const double tokens = unit_tokens(st.order[st.next - 1].mb);
      st.tp_collective = std::make_unique<net::Collective>(world_.fabric(), c_.tp_algorithm, nodes_[static_cast<size_t>(sl)],
                                                           cost_.tp_allreduce_bytes(tokens, s), o);
      flows_ += static_cast<uint64_t>(c_.tp);
      st.tp_collective->start([this, sl, g = gen_](Engine&) {
        if (g == gen_) op_done(sl);
      });
      return;
    }
    op_done(sl);
  }

  // A stage's hand-offs leave in the order its ops finish, one at a time (a pipeline engine
  // posts them on one NCCL stream, whose send kernels run in turn); each waits for the one
  // before it to arrive.
  void send(int from, int to, int mb, bool grad) {
    Stage& st = stages_[static_cast<size_t>(from)];
    if (st.sending) {
      st.outbox.push_back({to, mb, grad});
      return;
    }
    st.sending = true;
    start_send(from, to, mb, grad);
  }
  void send_arrived(int from) {
    Stage& st = stages_[static_cast<size_t>(from)];
    st.sending = false;
    if (st.outbox.empty()) return;
    const Stage::Send next = st.outbox.front();
    st.outbox.pop_front();
    st.sending = true;
    start_send(from, next.to, next.mb, next.grad);
  }
  void start_send(int from, int to, int mb, bool grad) {
    const auto& a = nodes_[static_cast<size_t>(from)];
    const auto& b = nodes_[static_cast<size_t>(to)];
    pending_[static_cast<size_t>((to * units_ + mb) * 2 + (grad ? 1 : 0))] = static_cast<int>(a.size());
    const double bytes = cost_.activation_bytes(unit_tokens(mb)) / static_cast<double>(a.size());
    const uint64_t tag = (static_cast<uint64_t>(to) << 32) | (static_cast<uint64_t>(mb) << 1) | (grad ? 1u : 0u);
    const uint64_t gtag = tag | (static_cast<uint64_t>(gen_ & 0xFF) << 56);
    for (size_t k = 0; k < a.size(); ++k) world_.fabric().start(a[k], b[k], bytes, this, gtag, tag * 31 + k);
    flows_ += a.size();
  }

  void op_done(int sl) {
    Stage& st = stages_[static_cast<size_t>(sl)];
    const int64_t now = world_.engine().now().count_ns();
    const Op op = st.order[st.next - 1];
    const int d = sl / c_.pp, s = sl % c_.pp;
    progress_ns_ = now;
    st.busy = false;
    st.busy_ns += now - st.op_start_ns;
    st.last_end_ns = now;
    if (d == 0 && iterations_done_ < 2 && world_.trace().enabled())
      world_.trace().complete(pid_, s,
                              n_slices_ == 1 ? fmt::format("{}{}", op.forward ? "F" : "B", op.mb)
                                             : fmt::format("{}{}.{}", op.forward ? "F" : "B", op.mb / n_slices_, op.mb % n_slices_),
                              op.forward ? "forward" : "backward", st.op_start_ns, now - st.op_start_ns);
    if (op.forward) {
      if (s + 1 < c_.pp) send(sl, slot(d, s + 1), op.mb, false);
      else st.b_in[static_cast<size_t>(op.mb)] = 1;  // the last stage's loss: its backward may start
    } else if (s > 0) {
      send(sl, slot(d, s - 1), op.mb, true);
    }
    if (!op.forward && st.next == st.order.size()) stage_backward_done(s);
    try_run(sl);
  }

  // Every replica finished stage s's backward: its gradients are all-reduced across the data
  // parallel replicas, one collective per tensor-parallel rank, while other stages still work.
  void stage_backward_done(int s) {
    last_backward_ns_ = std::max(last_backward_ns_, world_.engine().now().count_ns());
    if (++stage_bwd_done_[static_cast<size_t>(s)] < c_.dp) return;
    if (c_.dp == 1) {
      stage_reduced();
      return;
    }
    stage_dp_left_[static_cast<size_t>(s)] = c_.tp;
    for (int k = 0; k < c_.tp; ++k) {
      std::vector<int> group;
      for (int d = 0; d < c_.dp; ++d) group.push_back(nodes_[static_cast<size_t>(slot(d, s))][static_cast<size_t>(k)]);
      net::CollectiveOptions o;
      o.salt = static_cast<uint64_t>(s * 1009 + k);
      o.fused_ring_steps = c_.dp_algorithm == net::CollectiveKind::AllReduceRing || c_.dp_algorithm == net::CollectiveKind::AllReduceAuto;
      auto coll = std::make_unique<net::Collective>(world_.fabric(), c_.dp_algorithm, group, dp_bytes_, o);
      net::Collective* raw = coll.get();
      dp_live_.push_back(std::move(coll));
      raw->start([this, s, g = gen_](Engine&) {
        if (g != gen_) return;
        progress_ns_ = world_.engine().now().count_ns();
        if (--stage_dp_left_[static_cast<size_t>(s)] == 0) stage_reduced();
      });
    }
  }

  void stage_reduced() {
    if (++stages_reduced_ < c_.pp) return;
    const int64_t now = world_.engine().now().count_ns();
    dp_ns_total_ += now - last_backward_ns_;
    for (auto& c : dp_live_) flows_ += c->flows_started();
    (void)now;
    schedule(kIterationEnd, optimizer_ns_);
  }

  void iteration_end(Engine& e) {
    dp_live_.clear();
    const int64_t now = e.now().count_ns();
    const double it_s = static_cast<double>(now - iter_start_ns_) / 1e9;
    res_.iteration_s.push_back(it_s);
    // Bubble over the forward/backward phase: every stage against the span until the first stage's last backward.
    const int64_t span = stages_[0].last_end_ns - iter_start_ns_;
    double bubble = 0;
    res_.stage_busy_fraction.assign(static_cast<size_t>(c_.pp), 0);
    for (int s = 0; s < c_.pp; ++s) {
      const Stage& st = stages_[static_cast<size_t>(slot(0, s))];
      bubble += 1 - static_cast<double>(st.busy_ns) / static_cast<double>(span);
      res_.stage_busy_fraction[static_cast<size_t>(s)] = static_cast<double>(st.busy_ns) / static_cast<double>(now - iter_start_ns_);
    }
    bubble_sum_ += bubble / c_.pp;
    ++iterations_done_;
    ++measured_;
    res_.bubble_fraction = bubble_sum_ / measured_;
    res_.dp_allreduce_ms = static_cast<double>(dp_ns_total_) / measured_ / 1e6;
    progress_ns_ = now;
    observe_end(now, bubble / c_.pp);
    after_iteration(now);
  }

  // What follows an iteration's end: done, a checkpoint, or the next iteration.
  void after_iteration(int64_t now) {
    if (c_.iterations > 0 && iterations_done_ >= c_.iterations) {
      keep_work(now);
      done_ = true;
      res_.wall_s = static_cast<double>(now - start_ns_) / 1e9;
      world_.workload_done();
      return;
    }
    if (faults_ && c_.checkpoint_interval_ns > 0 && now - mark_ns_ >= c_.checkpoint_interval_ns) {
      state_ = State::Checkpointing;
      ckpt_start_ns_ = now;
      schedule(kCheckpointDone, c_.checkpoint_write_ns);
      return;
    }
    next_iteration();
  }

  // --- Steady-state fast-forward ------------------------------------------------------------
  // An iteration that starts with nothing moving on the fabric (flows a failure left stalled
  // on dead links may sit there at rate 0), and during which no other handler
  // receives an event (none was pending before its end, and only handlers that run can add
  // one), ran alone: what it did depends on the world's state at its start, which it leaves
  // as it found it (its flows done, its collectives over), and not on the time it started
  // (the engine and fabric work in differences of time; a completion quantum is checked).
  // The next iteration, started the same way, repeats it exactly. Two such iterations in a
  // row that counted the same (time, events, flows, the fabric's exact ledger, bubble, busy
  // time) are the evidence that nothing hidden in the job's state differs; from then on, until
  // the next event another handler receives, a checkpoint is due, the job is done or the
  // run's horizon, the iterations are counted at once (skip_done) instead of simulated. Exact:
  // --no-fast-forward simulates every one and gives the same outputs (tests/test_training_ff.cpp).
  struct Counts {
    uint64_t events = 0, side = 0, flows = 0;
    int64_t dp_ns = 0;
    net::FlowLedger fabric;
  };
  struct Steady {
    int64_t ns = 0;
    uint64_t events = 0, flows = 0;
    int64_t dp_ns = 0;
    double bubble = 0;  // this iteration's term of bubble_sum_
    std::vector<double> busy;
    net::FlowLedger fabric;
    bool operator==(const Steady&) const = default;
  };
  Counts counts() const {
    return Counts{world_.engine().events_processed(), side_events_, flows_, dp_ns_total_, world_.fabric().ledger()};
  }
  void observe_start(int64_t now) {
    start_alone_ = false;
    if (!RunControl::get().fast_forward()) return;
    (void)now;
    start_alone_ = world_.fabric().still();
    if (!start_alone_) return;
    others_at_start_ = world_.engine().next_event_excluding(this);
    start_counts_ = counts();
  }
  void observe_end(int64_t now, double bubble_term) {
    const bool alone = start_alone_ && others_at_start_ > now;
    start_alone_ = false;
    if (!alone) {
      last_alone_ = steady_ = false;
      return;
    }
    const Counts c = counts();
    Steady r;
    r.ns = now - iter_start_ns_;
    r.events = (c.events - start_counts_.events) - (c.side - start_counts_.side);
    r.flows = c.flows - start_counts_.flows;
    r.dp_ns = c.dp_ns - start_counts_.dp_ns;
    r.bubble = bubble_term;
    r.busy = res_.stage_busy_fraction;
    r.fabric = net::FlowLedger::between(start_counts_.fabric, c.fabric);
    steady_ = last_alone_ && r == last_;
    last_ = std::move(r);
    last_alone_ = true;
    clean_until_ = others_at_start_;  // nothing else has acted since this iteration started
  }
  void next_iteration() {
    if (!try_skip()) start_iteration();
  }
  // Counts iterations at once when the last one is known to repeat (see above). False: run
  // the next one.
  bool try_skip() {
    if (!steady_) return false;
    Engine& e = world_.engine();
    const int64_t now = e.now().count_ns();
    if (now >= clean_until_) {  // another handler may have acted since (during a checkpoint write)
      steady_ = last_alone_ = false;
      return false;
    }
    const int64_t T = last_.ns;
    if (T <= 0) return false;
    const int64_t q = world_.fabric().quantum_ns();
    if (q > 1 && T % q != 0) return false;
    if (faults_ && c_.collective_timeout_ns > 0 && T >= c_.collective_timeout_ns) return false;
    if (world_.trace().enabled() && iterations_done_ < 2) return false;
    const int64_t others = e.next_event_excluding(this);
    int64_t n = std::numeric_limits<int64_t>::max();
    auto at_most = [&](int64_t k) { n = std::min(n, k); };
    if (others != std::numeric_limits<int64_t>::max()) at_most((others - now - 1) / T);  // every skipped end before it
    if (e.horizon_ns() != std::numeric_limits<int64_t>::max()) at_most((e.horizon_ns() - now) / T);
    if (c_.iterations > 0) at_most(c_.iterations - iterations_done_);
    if (faults_ && c_.checkpoint_interval_ns > 0) {
      // Only the last skipped end may reach the checkpoint interval.
      const int64_t need = c_.checkpoint_interval_ns - (now - mark_ns_);
      at_most(need <= 0 ? 1 : (need + T - 1) / T);
    }
    at_most(int64_t{1} << 40);
    // The live watchdog fires every timeout; none may fall on the skip's end (the order of two
    // events at one instant would differ from the full simulation's).
    if (faults_ && c_.collective_timeout_ns > 0)
      while (n > 0 && now + n * T >= watchdog_at_ && (now + n * T - watchdog_at_) % c_.collective_timeout_ns == 0) --n;
    if (n <= 0) return false;
    skipping_ = n;
    schedule(kSkipDone, n * T);
    return true;
  }
  void skip_done(Engine& e) {
    const int64_t n = skipping_;
    skipping_ = 0;
    const Steady& r = last_;
    e.count_inline_events(static_cast<uint64_t>(n) * r.events - 1);  // this event stands for the last iteration's end
    world_.fabric().replay(r.fabric, static_cast<uint64_t>(n));
    flows_ += static_cast<uint64_t>(n) * r.flows;
    for (int64_t i = 0; i < n; ++i) {
      res_.iteration_s.push_back(static_cast<double>(r.ns) / 1e9);
      bubble_sum_ += r.bubble;
      dp_ns_total_ += r.dp_ns;
      ++iterations_done_;
      ++measured_;
    }
    res_.fast_forwarded += n;
    res_.stage_busy_fraction = r.busy;
    res_.bubble_fraction = bubble_sum_ / measured_;
    res_.dp_allreduce_ms = static_cast<double>(dp_ns_total_) / measured_ / 1e6;
    const int64_t now = e.now().count_ns();
    iter_start_ns_ = now - r.ns;
    progress_ns_ = now;
    after_iteration(now);
  }

  // --- Failures -----------------------------------------------------------------------------
  // The work since the last checkpoint (or restart) is kept: it counts as useful.
  void keep_work(int64_t now) {
    res_.useful_s += static_cast<double>(now - mark_ns_) / 1e9;
    mark_ns_ = now;
    kept_iterations_ = iterations_done_;
  }
  void checkpoint_done(Engine& e) {
    const int64_t now = e.now().count_ns();
    // The iterations before the write are safe; the write itself is overhead.
    res_.useful_s += static_cast<double>(ckpt_start_ns_ - mark_ns_) / 1e9;
    res_.checkpoint_s += static_cast<double>(now - ckpt_start_ns_) / 1e9;
    mark_ns_ = now;
    kept_iterations_ = iterations_done_;
    ++res_.checkpoints;
    state_ = State::Running;
    next_iteration();
  }
  // A device of the job failed: everything in flight is void, the work since the last
  // checkpoint is lost, and the iterations after it will be done again.
  void fail_stop(World& w) {
    const int64_t now = w.engine().now().count_ns();
    ++gen_;
    ++res_.failures;
    steady_ = last_alone_ = false;
    skipping_ = 0;
    if (state_ == State::Checkpointing) {
      // The interrupted write is lost with the iterations it would have saved.
      res_.lost_s += static_cast<double>(ckpt_start_ns_ - mark_ns_) / 1e9;
      res_.checkpoint_s += static_cast<double>(now - ckpt_start_ns_) / 1e9;
    } else {
      res_.lost_s += static_cast<double>(now - mark_ns_) / 1e9;
    }
    iterations_done_ = kept_iterations_;
    res_.iteration_s.resize(std::min(res_.iteration_s.size(), static_cast<size_t>(kept_iterations_)));
    for (auto& st : stages_)
      if (st.tp_collective) graveyard_.push_back(std::move(st.tp_collective));
    for (auto& c : dp_live_) graveyard_.push_back(std::move(c));
    dp_live_.clear();
    for (auto& st : stages_) {
      st.busy = st.sending = false;
      st.outbox.clear();
    }
    state_ = State::Recovering;
    restart_pending_ = decide_pending_ = false;
    failed_at_ns_ = now;
  }
  bool all_up() const {
    for (int d : devices_)
      if (!world_.device_up(d)) return false;
    return true;
  }
  // Where to train again: the same devices once healthy; on a TPU pod slice, a slice re-formed
  // at once from healthy free cubes (OCS: the healthy cubes kept and a spare for each failed
  // one; static: any healthy contiguous free block), else the same cubes after repair.
  void recover(World& w) {
    if (done_ || restart_pending_) return;
    if (!all_up() && c_.slice_cubes[0] > 0 && w.is_pod()) reform(w);
    if (!all_up()) return;  // waits for the repair (on_devices_changed)
    restart_pending_ = true;
    schedule(kRestart, c_.restart_ns);
  }
  void reform(World& w) {
    const auto g = w.pod_grid();
    const int cubes = g[0] * g[1] * g[2];
    std::vector<char> mine(static_cast<size_t>(cubes), 0), usable(static_cast<size_t>(cubes), 1);
    for (int d : devices_) mine[static_cast<size_t>(w.group_of(d))] = 1;
    for (int d = 0; d < w.device_count(); ++d) {
      const size_t c = static_cast<size_t>(w.group_of(d));
      if (!w.device_up(d) || (!w.holder(d).empty() && w.holder(d) != name())) usable[c] = 0;
    }
    std::vector<int> chosen;
    if (w.pod_has_ocs()) {
      std::vector<int> order;  // the job's cubes in its slice order
      for (int d : devices_) {
        const int c = w.group_of(d);
        if (std::find(order.begin(), order.end(), c) == order.end()) order.push_back(c);
      }
      std::vector<int> spares;
      for (int c = 0; c < cubes; ++c)
        if (usable[static_cast<size_t>(c)] && !mine[static_cast<size_t>(c)]) spares.push_back(c);
      size_t next = 0;
      for (int c : order) {
        if (usable[static_cast<size_t>(c)]) chosen.push_back(c);
        else if (next < spares.size()) chosen.push_back(spares[next++]);
        else return;  // too few healthy cubes: wait for a repair
      }
    } else {
      uint64_t free = 0;
      for (int c = 0; c < cubes; ++c)
        if (usable[static_cast<size_t>(c)]) free |= uint64_t{1} << c;
      const net::PodAllocator alloc(g, false, net::PlacementPolicy::FirstFit);
      const auto mask = alloc.place(net::CubeShape{c_.slice_cubes[0], c_.slice_cubes[1], c_.slice_cubes[2]}, free);
      if (!mask) return;
      for (uint64_t r = *mask; r; r &= r - 1) chosen.push_back(std::countr_zero(r));
    }
    w.tear_down_slice(devices_);
    w.release(devices_);
    const auto devs = w.form_slice(chosen, c_.slice_cubes, c_.slice_twisted, name());
    w.claim(devs, name());
    map_devices(devs);
    ++res_.reformed;
  }
  void restart_done(Engine& e) {
    restart_pending_ = false;
    if (!all_up()) {  // failed again meanwhile: re-form or wait again
      recover(world_);
      return;
    }
    const int64_t now = e.now().count_ns();
    res_.recovering_s += static_cast<double>(now - failed_at_ns_) / 1e9;
    res_.recover_s.push_back(static_cast<double>(now - failed_at_ns_) / 1e9);
    ++res_.restarts;
    if (world_.trace().enabled()) world_.trace().complete(pid_, 0, "recovery", "fault", failed_at_ns_, now - failed_at_ns_);
    state_ = State::Running;
    mark_ns_ = now;
    progress_ns_ = now;
    start_iteration();
    if (c_.collective_timeout_ns > 0) arm_watchdog();
  }
  void arm_watchdog() {
    watchdog_at_ = world_.engine().now().count_ns() + c_.collective_timeout_ns;
    schedule(kWatchdog, c_.collective_timeout_ns);
  }
  // A transfer that makes no progress for the timeout (its group cut off by failed links)
  // fails the job for good.
  void watchdog(Engine& e) {
    const int64_t now = e.now().count_ns();
    // During a skip the job progresses at least once an iteration, and an iteration is shorter
    // than the timeout (try_skip): the check would pass.
    if (state_ == State::Running && skipping_ == 0 && now - progress_ns_ >= c_.collective_timeout_ns) {
      ++gen_;
      res_.failed = true;
      res_.failure_reason = fmt::format("no progress for {:.3g} s: a transfer's group is cut off from the fabric", c_.collective_timeout_ns / 1e9);
      res_.lost_s += static_cast<double>(now - mark_ns_) / 1e9;
      res_.wall_s = static_cast<double>(now - start_ns_) / 1e9;
      done_ = true;
      if (c_.iterations > 0) world_.workload_done();
      return;
    }
    // Re-armed at this generation's events only while running; a failure re-arms it on restart.
    arm_watchdog();
  }

  TrainingConfig c_;
  World& world_;
  CostModel cost_;
  std::vector<std::vector<int>> nodes_;  // per (replica, stage): topology nodes of its tp ranks
  std::vector<Stage> stages_;
  std::vector<int> pending_;             // flows left per (stage slot, micro-batch, direction)
  std::vector<int64_t> fwd_ns_;           // per (stage, slice): stage x slices + slice
  std::map<std::pair<int, int>, std::vector<double>> stage_cache_;  // slice_stage_ns by (tokens, prefix), for schedule_ns
  std::vector<int> slice_len_;            // tokens per slice (one slice: the sequence)
  int n_slices_ = 1, units_ = 1;          // slices per micro-batch; passes per stage and direction
  double handoff_ns_per_byte_ = 0, handoff_latency_ns_ = 0, ring_ns_per_byte_ = 0, ring_latency_ns_ = 0;
  std::vector<int> stage_bwd_done_, stage_dp_left_;
  std::vector<std::unique_ptr<net::Collective>> dp_live_;
  double tokens_ = 0, params_per_device_ = 0, dp_bytes_ = 0;
  int64_t optimizer_ns_ = 0, iter_start_ns_ = 0, last_backward_ns_ = 0, dp_ns_total_ = 0;
  int stages_reduced_ = 0, iterations_done_ = 0, pid_ = 0;
  double bubble_sum_ = 0;
  bool done_ = false;
  uint64_t flows_ = 0;
  TrainingResults res_;
  // Failures.
  std::vector<int> devices_;
  std::vector<std::unique_ptr<net::Collective>> graveyard_;  // collectives a failure voided, whose flows may still land
  uint32_t gen_ = 0;
  State state_ = State::Running;
  bool faults_ = false, restart_pending_ = false, decide_pending_ = false;
  int kept_iterations_ = 0, measured_ = 0;
  int64_t start_ns_ = 0, mark_ns_ = 0, ckpt_start_ns_ = 0, failed_at_ns_ = 0, progress_ns_ = 0, watchdog_at_ = 0;
  // Steady-state fast-forward (see try_skip).
  uint64_t side_events_ = 0;     // events of this job that are no iteration's work: the watchdog's
  bool start_alone_ = false;     // the iteration in progress started with nothing on the fabric
  bool last_alone_ = false;      // the last iteration ran alone (last_ holds what it counted)
  bool steady_ = false;          // ... and repeated the one before it exactly
  int64_t others_at_start_ = 0;  // the first event another handler had pending when it started
  int64_t clean_until_ = 0;      // no other handler acts before this time (from the last lone iteration)
  int64_t skipping_ = 0;         // iterations a pending kSkipDone stands for
  Counts start_counts_;
  Steady last_;
};

}  // namespace

std::unique_ptr<Workload> make_training_job(const std::string& name, TrainingConfig cfg, World& world, std::vector<int> devices) {
  return std::make_unique<TrainingJob>(name, std::move(cfg), world, std::move(devices));
}

const TrainingResults& training_results(const Workload& job) {
  const auto* t = dynamic_cast<const TrainingJob*>(&job);
  if (!t) throw std::invalid_argument(fmt::format("workload '{}' is not a training job", job.name()));
  return t->results();
}

}  // namespace sluice::training
