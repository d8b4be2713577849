#include "workloads/training/training_job.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/units.h"
#include "hardware/cost_source.h"
#include "recorder/training_report.h"
#include "registry/registry.h"
#include "world/placement.h"
#include "engine/stall.h"

namespace sluice::training {

namespace detail {

CostOptions cost_options(const TrainingConfig& c) {
  CostOptions o;
  o.tensor_parallel = c.tp;
  o.pipeline_parallel = c.pp * c.virtual_stages;  // the cost model's stages are the virtual ones
  o.tables_dir = c.tables_dir;
  o.tables_device = c.tables_device;
  o.time_scale = c.cost_time_scale;
  o.comm_on_fabric = true;
  o.sequence_parallel = true;
  o.moe.data_parallel_ep = c.ep;
  o.moe.routing = c.routing;
  o.moe.zipf_s = c.zipf_s;
  o.moe.rows_per_expert = c.rows_per_expert;
  o.mtp_layers = c.mtp_layers;
  o.first_stage_layers = c.first_stage_layers;
  o.last_stage_layers = c.last_stage_layers;
  return o;
}

TrainingJob::TrainingJob(std::string name, TrainingConfig cfg, World& world, std::vector<int> devices)
    : Workload(std::move(name)), c_(std::move(cfg)), world_(world), cost_(c_.hardware, c_.model, cost_options(c_)) {
  const int slots = c_.dp * c_.pp;
  map_devices(devices);
  const int m = c_.micro_batches;
  tokens_ = static_cast<double>(c_.micro_batch_size) * c_.sequence;
  measure_handoffs();
  measure_tp_ring();
  if (cp()) plan_cp();
  else plan_slices();
  units_ = m * n_slices_;
  stages_.resize(static_cast<size_t>(slots));
  for (int d = 0; d < c_.dp; ++d)
    for (int s = 0; s < c_.pp; ++s) stages_[static_cast<size_t>(slot(d, s))].order = schedule_order(s);
  pending_.assign(static_cast<size_t>(slots * rank_units() * 2), 0);
  // Expert parallelism: 1/ep of the routed experts on each device, their gradients reduced over
  // the dp x cp / ep ranks that hold the same ones.
  params_per_device_ = params_per_device(c_);
  dp_bytes_ = params_per_device_ * c_.model.dtype_bytes;
  expert_dp_bytes_ = expert_params_per_device(c_) * c_.model.dtype_bytes;
  for (int s = 0; s < c_.pp; ++s) {
    const RankParameters p = rank_parameters(c_, s);
    stage_dense_bytes_.push_back(p.dense * c_.model.dtype_bytes);
    stage_expert_bytes_.push_back(p.experts * c_.model.dtype_bytes);
  }
  a2a_.resize(static_cast<size_t>(c_.dp / ep_slots() * c_.pp));
  // Adam's step streams the optimizer state of the parameters a device updates (its shard under ZeRO).
  // (A kernel's time like the cost model's: at an end of the error band, scaled as they are.)
  optimizer_ns_ = std::max<int64_t>(1, std::llround((c_.zero >= 1 ? sharded_params_per_device(c_) : params_per_device_) * c_.optimizer_bytes_per_param /
                                                    c_.hardware.effective_bandwidth_Bps() * 1e9 * c_.cost_time_scale));
  pid_ = world.trace_pid();
  res_.devices = job_devices(c_);
  res_.peak_flops_per_device = c_.hardware.peak_flops(c_.precision);
  res_.tokens_per_iteration = tokens_ * m * c_.dp;
  res_.model_flops_per_iteration = res_.tokens_per_iteration * model_flops_per_token(c_);
  const int K = c_.pp, v = c_.virtual_stages;
  // Interleaving cuts the pipeline's fill and drain v-fold: (K-1)/v of a micro-batch's time.
  res_.textbook_bubble = static_cast<double>(K - 1) / (v * units_ + K - 1);
  for (int s = 0; s < K; ++s) {
    int64_t f = 0, b = 0;
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < n_slices_; ++i) f += fwd_ns(c * K + s, i), b += bwd_ns(c * K + s, i);
    res_.forward_ms = std::max(res_.forward_ms, f / 1e6);
    int64_t a = 0;  // context parallelism: the attention in it, what the rings hide under
    for (int c = 0; c < v && cp(); ++c) a += cp_attn_ns_[static_cast<size_t>(c * K + s)];
    res_.cp_attention_ms = std::max(res_.cp_attention_ms, a / 1e6);
    res_.backward_ms = std::max(res_.backward_ms, b / 1e6);
  }
  res_.loss_ms = loss_ns_ / 1e6;
  res_.optimizer_ms = optimizer_ns_ / 1e6;
  res_.memory = training_memory(c_);
  res_.dp_bytes_per_device = c_.dp * c_.cp > 1 ? dp_bytes_ : 0;
  res_.expert_dp_bytes_per_device = c_.ep > 1 && expert_replicas() > 1 ? expert_dp_bytes_ : 0;
  res_.embedding_grads_bytes_per_device = embedding_grad_bytes();
  // The all-to-alls' bytes per device and iteration: each unit's forward and backward on every
  // chunk of the busiest pipeline rank.
  for (int s = 0; s < K && c_.ep > 1; ++s) {
    double bytes = 0;
    for (int c = 0; c < v; ++c)
      for (int u = 0; u < units_; ++u) bytes += exchanges_per_unit() * cost_.moe_alltoall_bytes(unit_tokens(u) / c_.cp, c * K + s);
    res_.alltoall_bytes_per_device = std::max(res_.alltoall_bytes_per_device, bytes);
  }
  // Context parallelism: the keys and values one device sends around the ring per iteration on
  // the busiest pipeline rank: (cp - 1) / cp of each op's gathered bytes, a backward's twice (three
  // times recomputing).
  for (int s = 0; s < K && cp(); ++s) {
    double bytes = 0;
    for (int c = 0; c < v; ++c) bytes += units_ * (1 + exchanges_per_unit()) * cp_kv_bytes(c * K + s) * (c_.cp - 1) / c_.cp;
    res_.cp_ring_bytes_per_device = std::max(res_.cp_ring_bytes_per_device, bytes);
  }
}

// A computation on `devs` takes the slowest one's factor (a straggler holds up its group).
int64_t TrainingJob::slowed(int64_t ns, size_t first, size_t n) const {
  double f = 1.0;
  for (size_t i = first; i < first + n; ++i) f = std::max(f, world_.device_slowdown(devices_[i]));
  return f == 1.0 ? ns : static_cast<int64_t>(std::llround(static_cast<double>(ns) * f));
}

// Megatron's rank order: tensor parallel fastest, then data parallel, then pipeline stages.
void TrainingJob::map_devices(const std::vector<int>& devices) {
  devices_ = devices;
  active_.assign(static_cast<size_t>(world_.device_count()), 0);
  for (int d : devices_) active_[static_cast<size_t>(d)] = 1;
  nodes_.assign(static_cast<size_t>(c_.dp * c_.pp), {});
  // A slot's nodes: its context-parallel ranks in order, each's tensor-parallel ranks in order.
  const int n = slot_devices();
  for (int s = 0; s < c_.pp; ++s)
    for (int d = 0; d < c_.dp; ++d)
      for (int k = 0; k < n; ++k)
        nodes_[static_cast<size_t>(slot(d, s))].push_back(world_.device_node(devices[static_cast<size_t>((s * c_.dp + d) * n + k)]));
  if (c_.tp > 1 && c_.tp_algorithm == net::CollectiveKind::AllReduceNvls)
    for (const auto& slot_nodes : nodes_)
      for (int c = 0; c < c_.cp; ++c)  // each context-parallel rank's tensor-parallel group
        net::require_nvls(world_.topology(), std::vector<int>(slot_nodes.begin() + c * c_.tp, slot_nodes.begin() + (c + 1) * c_.tp),
                          "tp_algorithm");
}

std::vector<int> TrainingJob::dp_group(int s, int k) const {
  std::vector<int> group;
  for (int d = 0; d < c_.dp; ++d)
    for (int c = 0; c < c_.cp; ++c) group.push_back(nodes_[static_cast<size_t>(slot(d, s))][static_cast<size_t>(c * c_.tp + k)]);
  return group;
}

std::vector<int> TrainingJob::expert_dp_group(int j, int s, int k) const {
  // The ranks u = d cp + c with u mod ep = j (expert_replicas() of them), in rank order.
  std::vector<int> group;
  for (int d = 0; d < c_.dp; ++d)
    for (int c = 0; c < c_.cp; ++c)
      if ((d * c_.cp + c) % c_.ep == j) group.push_back(nodes_[static_cast<size_t>(slot(d, s))][static_cast<size_t>(c * c_.tp + k)]);
  return group;
}

void TrainingJob::start(World& w) {
  if (world_.trace().enabled()) {
    world_.trace().name_process(pid_, fmt::format("training {}", name()));
    for (int s = 0; s < c_.pp && s < 64; ++s) world_.trace().name_thread(pid_, s, fmt::format("stage {}", s));
    for (int s = 0; c_.alltoall_overlap && s < c_.pp && s < 64; ++s)
      world_.trace().name_thread(pid_, 64 + s, fmt::format("stage {} all-to-alls", s));
  }
  faults_ = w.can_fail();
  res_.faults = faults_;
  res_.checkpoint_storage = faults_ && c_.checkpoint_to_storage;
  res_.spare_servers = faults_ ? c_.spare_servers : 0;
  if (res_.checkpoint_storage) res_.checkpoint_bytes = checkpoint_bytes_per_device(c_) * job_devices(c_);
  mark_ns_ = w.engine().now().count_ns();
  start_ns_ = mark_ns_;
  start_iteration();
  // The first iteration is never taken as having run alone: workloads listed after this one
  // and the fault processes start after it, so their first events were not pending yet.
  start_alone_ = false;
  if (faults_ && c_.collective_timeout_ns > 0) arm_watchdog();
}

void TrainingJob::finish(World& w) {
  stop_tape();
  if (standing_in_) throw std::logic_error("internal: a training job stood for an iteration up to a failure that did not come");
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
    if (state_ == State::Recovering) {
      res_.recovering_s += static_cast<double>(now - failed_at_ns_) / 1e9;
      res_.by_cause[cause_].recovering_s += static_cast<double>(now - failed_at_ns_) / 1e9;
    }
    else if (state_ == State::Checkpointing) {
      res_.useful_s += static_cast<double>(ckpt_start_ns_ - mark_ns_) / 1e9;
      res_.checkpoint_s += static_cast<double>(now - ckpt_start_ns_) / 1e9;
    } else res_.useful_s += static_cast<double>(now - mark_ns_) / 1e9;
  }
  // What its devices did, for the world's energy ledger (world/energy.h): busy over the kept
  // iterations and the work lost to failures for its stages' mean compute fraction, compute-bound
  // for its FLOPs (Megatron's count) at the sustained GEMM ceiling; idle while recovering or
  // writing a checkpoint. The devices it computes on now are charged; its hot spares (held,
  // never computing) stay idle.
  {
    double kept_s = 0;
    for (double x : res_.iteration_s) kept_s += x;
    double frac = 0;
    for (double f : res_.stage_busy_fraction) frac += f;
    frac = res_.stage_busy_fraction.empty() ? 1.0 : frac / static_cast<double>(res_.stage_busy_fraction.size());
    const HardwareSpec& hw = c_.hardware;
    const double ceiling = hw.effective_flops(c_.model.weights) * hw.sustained_clock;
    const double n = static_cast<double>(res_.iteration_s.size());
    DeviceActivity a;
    a.busy_s = (kept_s + res_.lost_s) * frac;
    if (ceiling > 0 && res_.devices > 0 && kept_s > 0)
      a.compute_s = res_.model_flops_per_iteration * n / res_.devices / ceiling * (kept_s + res_.lost_s) / kept_s;
    a.profile = std::make_shared<BusyProfile>(busy_profile_);
    for (int d : devices_) w.add_activity(d, a);
  }
}

WorkUnits TrainingJob::work_done() const {
  const double n = static_cast<double>(res_.iteration_s.size());
  return {{"iteration", n}, {"token", n * res_.tokens_per_iteration}};
}

void TrainingJob::report(Recorder& rec, bool scoped) const { report_training(res_, training_setup(c_), rec, scoped ? name() : std::string()); }

void TrainingJob::on_event(Engine& e, uint32_t kind, uint32_t arg) {
  if (!(e.event_generation() == Generation(gen_))) {  // from before a failure: void
    e.discount_void_event();
    return;
  }
  switch (kind) {
    case kCompute: compute_done(static_cast<int>(arg)); break;
    case kCpRing: cp_start(static_cast<int>(arg)); break;
    case kCpTail: cp_part_done(static_cast<int>(arg), true); break;
    case kIterationEnd: iteration_end(e); break;
    case kOptimizerDone: optimizer_done(); break;
    case kSkipDone: skip_done(e); break;
    case kCheckpointDone: checkpoint_done(e); break;
    case kRestart: restart_done(e); break;
    case kPartialGuard:
      if (standing_in_) throw std::logic_error("internal: a training job stood for an iteration up to a failure that did not come");
      break;
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

void TrainingJob::on_flow_done(Engine&, uint64_t tag) {
  if ((tag >> 56) != (gen_ & 0xFF)) return;  // a transfer of an iteration a failure cut short
  if (((tag >> 32) & 0xFFFFFF) == kCheckpointTarget) {
    progress_ns_ = world_.engine().now().count_ns();
    if (--ckpt_left_ == 0) checkpoint_done(world_.engine());
    return;
  }
  const int target = static_cast<int>((tag >> 32) & 0xFFFFFF), mb = static_cast<int>((tag >> 1) & 0x7FFFFFFF), grad = static_cast<int>(tag & 1);
  int& left = pending_[static_cast<size_t>((target * rank_units() + mb) * 2 + grad)];
  if (--left > 0) return;
  Stage& st = stages_[static_cast<size_t>(target)];
  (grad ? st.b_in : st.f_in)[static_cast<size_t>(mb)] = 1;
  send_arrived(neighbour(target, grad ? 1 : -1));  // same replica: the next or previous rank's slot (it sent this)
  try_run(target);
}

void TrainingJob::start_iteration() {
  if (stand_in_partial()) return;
  const int64_t now = world_.engine().now().count_ns();
  iter_start_ns_ = now;
  progress_ns_ = now;
  stages_reduced_ = ends_reduced_ = embedding_left_ = 0;
  stage_bwd_done_.assign(static_cast<size_t>(c_.pp), 0);
  stage_dp_left_.assign(static_cast<size_t>(c_.pp), 0);
  last_backward_ns_ = 0;
  for (auto& x : a2a_) x.rounds.clear(), x.iteration_ns = 0, x.flying = 0;
  for (int d = 0; d < c_.dp; ++d)
    for (int s = 0; s < c_.pp; ++s) {
      Stage& st = stages_[static_cast<size_t>(slot(d, s))];
      st.next = 0;
      st.done = 0;
      st.released = -1;
      st.xfer_start_ns = st.xfer_end_ns = -1;
      st.busy_ns = 0;
      // The first virtual stage's inputs (chunk 0 on rank 0) are the data: there from the start.
      st.f_in.assign(static_cast<size_t>(rank_units()), 0);
      if (s == 0) std::fill(st.f_in.begin(), st.f_in.begin() + units_, 1);
      st.b_in.assign(static_cast<size_t>(rank_units()), 0);
      st.outbox.clear();
      st.sending = false;
      st.cp_exposed_ns = 0;
      st.seg_wait = false;
    }
  observe_start();
  if (zero3()) z3_begin_iteration();
  for (int i = 0; i < c_.dp * c_.pp; ++i) try_run(i);
}

void TrainingJob::try_run(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  if (st.busy) {
    if (st.seg_wait) z3_resume(sl);  // ZeRO-3: its op waits for a layer's gather
    return;
  }
  if (st.next >= st.order.size()) return;
  const Op op = st.order[st.next];
  if (!(op.forward ? st.f_in : st.b_in)[static_cast<size_t>(op.mb)]) return;
  if (zero3() && !z3_ready(sl, z3_unit(sl % c_.pp, st.next))) return;  // its first layer's parameters are still being gathered
  const int64_t now = world_.engine().now().count_ns();
  if (st.released >= 0) st.busy_ns += now - st.last_end_ns;  // waiting beside its released op's all-to-alls
  st.busy = true;
  st.running = st.next;
  ++st.next;
  const int s = virtual_stage(sl, op.mb);
  st.op_start_ns = now;
  const int slice = op.mb % n_slices_;
  const int64_t dur = op.forward ? fwd_ns(s, slice) : bwd_ns(s, slice);
  if (cp()) {
    const int64_t attention = op.forward ? cp_attn_ns_[static_cast<size_t>(s)] : backward_of(cp_attn_ns_[static_cast<size_t>(s)]);
    if (zero3()) {  // in layers, each after its gather: a layer's share of the compute and of the ring (z3_layer)
      st.seg_attention_ns = attention;
      z3_begin_op(sl, dur);
      return;
    }
    cp_begin(sl, dur, attention);
    return;
  }
  const int64_t ns = slowed(dur, slot_first_device(sl), static_cast<size_t>(c_.tp));
  if (zero3()) {  // in layers, each after its gather
    z3_begin_op(sl, ns);
    return;
  }
  if (c_.alltoall_overlap) {  // counted as it runs: slower while a released op's all-to-alls fly
    st.work_left_ns = static_cast<double>(ns);
    st.work_at_ns = now;
  }
  schedule(kCompute, ns, static_cast<uint32_t>(sl));
}

bool TrainingJob::finish_compute(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const int64_t now = world_.engine().now().count_ns();
  const double stretch = c_.hardware.overlap_stretch();
  // The part of [work_at, now] the released op's all-to-alls were on the fabric.
  int64_t beside = 0;
  if (st.xfer_start_ns >= 0) {
    const int64_t lo = std::max(st.work_at_ns, st.xfer_start_ns), hi = st.xfer_end_ns < 0 ? now : std::min(now, st.xfer_end_ns);
    beside = std::max<int64_t>(0, hi - lo);
  }
  st.work_left_ns -= static_cast<double>(now - st.work_at_ns - beside) + static_cast<double>(beside) / stretch;
  st.work_at_ns = now;
  if (st.work_left_ns < 0.5) return true;
  const bool flying = st.xfer_start_ns >= 0 && st.xfer_end_ns < 0;
  schedule(kCompute, std::max<int64_t>(1, static_cast<int64_t>(std::ceil(st.work_left_ns * (flying ? stretch : 1.0) - 1e-6))),
           static_cast<uint32_t>(sl));
  return false;
}

void TrainingJob::compute_done(int sl) {
  if (c_.alltoall_overlap && !finish_compute(sl)) return;
  if (cp()) {
    cp_part_done(sl, false);  // (under ZeRO-3 its layer ends there, once the ring's part has too)
    return;
  }
  if (zero3() && z3_layer_done(sl)) return;  // the op's next layer started, or waits for its gather
  tp_allreduces(sl);
}

void TrainingJob::tp_allreduces(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  if (c_.tp > 1) {
    // The op's tensor-parallel collectives (tp_pass) as one fused ring per context-parallel
    // rank, over its share of the tokens.
    const Op op = st.order[st.next - 1];
    const int s = virtual_stage(sl, op.mb);
    const double tokens = unit_tokens(op.mb) / c_.cp;
    const TpPass pass = tp_pass(s, op.forward);
    const double bytes = pass.bytes(cost_, tokens, s);
    const auto& nodes = nodes_[static_cast<size_t>(sl)];
    st.tp_collectives.clear();
    st.tp_left = c_.cp;
    for (int c = 0; c < c_.cp; ++c) {
      net::CollectiveOptions o;
      o.fused_ring_steps = true;
      o.fused_count = pass.count;
      o.salt = static_cast<uint64_t>(sl) + static_cast<uint64_t>(c) * 0x9E3779B1u;
      std::vector<int> group(nodes.begin() + c * c_.tp, nodes.begin() + (c + 1) * c_.tp);
      st.tp_collectives.push_back(
          std::make_unique<net::Collective>(world_.fabric(), c_.tp_algorithm, std::move(group), bytes, o));
      flows_ += static_cast<uint64_t>(c_.tp);
    }
    for (auto& coll : st.tp_collectives)
      coll->start([this, sl, g = gen_](Engine&) {
        if (g == gen_ && --stages_[static_cast<size_t>(sl)].tp_left == 0) comm_done(sl);
      });
    return;
  }
  comm_done(sl);
}

void TrainingJob::comm_done(int sl) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const size_t oi = st.running;
  if (c_.ep > 1 && cost_.moe_alltoall_count(virtual_stage(sl, st.order[oi].mb)) > 0) {
    if (release_to_exchange(sl, oi)) {
      const int64_t now = world_.engine().now().count_ns();
      st.busy = false;
      st.busy_ns += now - st.op_start_ns - st.op_wait_ns;
      st.last_end_ns = now;
      st.released = static_cast<int>(oi);
      st.released_start_ns = st.op_start_ns;
      st.released_compute_end_ns = now;
      st.xfer_start_ns = st.xfer_end_ns = -1;
      alltoall_arrive(sl, oi);
      try_run(sl);
      return;
    }
    alltoall_arrive(sl, oi);
    return;
  }
  op_done(sl, oi);
}

bool TrainingJob::release_to_exchange(int sl, size_t oi) const {
  const Stage& st = stages_[static_cast<size_t>(sl)];
  if (!c_.alltoall_overlap || st.released >= 0 || oi + 1 >= st.order.size()) return false;
  // A forward beside a backward; the next one may still wait for its input (a gradient on its
  // way: it starts under these all-to-alls when it comes; the last stage's backward of this
  // same forward: it waits for them, as without overlap).
  return st.order[oi + 1].forward != st.order[oi].forward;
}

void TrainingJob::alltoall_arrive(int sl, size_t oi) {
  const int gs = ep_group_slot(sl);
  Exchange& x = a2a_[static_cast<size_t>(gs)];
  Exchange::Round& r = x.rounds[oi];
  const int G = ep_slots();
  if (++r.arrived < G) return;
  const Stage& st = stages_[static_cast<size_t>(sl)];
  const int unit = st.order[oi].mb, vs = virtual_stage(sl, unit), s = sl % c_.pp, first = sl / c_.pp / G * G;
  const int64_t now = world_.engine().now().count_ns();
  if (x.flying++ == 0) x.flying_since_ns = now;
  for (int j = 0; c_.alltoall_overlap && j < G; ++j) {  // members that went on computing beside it
    Stage& m = stages_[static_cast<size_t>(slot(first + j, s))];
    if (m.released == static_cast<int>(oi)) m.xfer_start_ns = now;
  }
  x.live.clear();  // ended rounds' collectives (their callbacks are done)
  // The groups among these slots' ranks (G cp of them per tensor-parallel rank, ep a group).
  const int groups = G * c_.cp / c_.ep;
  r.left = c_.tp * groups;
  // A backward under full recomputation runs the forward's dispatch and combine again first.
  const int times = c_.recompute && !st.order[oi].forward ? 2 : 1;
  const double bytes = times * cost_.moe_alltoall_bytes(unit_tokens(unit) / c_.cp, vs);  // a rank's s / cp tokens
  for (int k = 0; k < c_.tp; ++k)
    for (int grp = 0; grp < groups; ++grp) {
      std::vector<int> group;
      for (int u = grp * c_.ep; u < (grp + 1) * c_.ep; ++u)
        group.push_back(nodes_[static_cast<size_t>(slot(first + u / c_.cp, s))][static_cast<size_t>(u % c_.cp * c_.tp + k)]);
      net::CollectiveOptions o;
      o.fused_count = times * cost_.moe_alltoall_count(vs);  // dispatch and combine of every MoE layer: a route latency each
      o.a2a_weights = cost_.moe_alltoall_weights();  // hot experts' replicas receive more
      o.a2a_dispatch_fraction = cost_.moe_dispatch_fraction();  // (1/2 in bf16; about 0.34 with precision: fp8)
      o.salt = static_cast<uint64_t>(sl) * 131 + static_cast<uint64_t>(k) + static_cast<uint64_t>(grp) * 0x9E3779B1u;
      r.collectives.push_back(std::make_unique<net::Collective>(world_.fabric(), net::CollectiveKind::AllToAll, group, bytes, o));
      r.collectives.back()->start([this, gs, oi, first, s, G, g = gen_](Engine& e) {
        if (g != gen_) return;
        Exchange& done = a2a_[static_cast<size_t>(gs)];
        auto it = done.rounds.find(oi);
        if (--it->second.left > 0) return;
        const int64_t end = e.now().count_ns();
        if (--done.flying == 0) done.iteration_ns += end - done.flying_since_ns;
        // The round is over: its collectives wait in `live` (this callback runs inside one of them).
        for (auto& c : it->second.collectives) {
          flows_ += c->flows_started();
          done.live.push_back(std::move(c));
        }
        done.rounds.erase(it);
        for (int j = 0; j < G; ++j) op_done(slot(first + j, s), oi);
      });
    }
}

// A stage's hand-offs leave in the order its ops finish, one at a time (a pipeline engine
// posts them on one NCCL stream, whose send kernels run in turn); each waits for the one
// before it to arrive.
void TrainingJob::send(int from, int to, int mb, bool grad) {
  Stage& st = stages_[static_cast<size_t>(from)];
  if (st.sending) {
    st.outbox.push_back({to, mb, grad});
    return;
  }
  st.sending = true;
  start_send(from, to, mb, grad);
}

void TrainingJob::send_arrived(int from) {
  Stage& st = stages_[static_cast<size_t>(from)];
  st.sending = false;
  if (st.outbox.empty()) return;
  const Stage::Send next = st.outbox.front();
  st.outbox.pop_front();
  st.sending = true;
  start_send(from, next.to, next.mb, next.grad);
}

void TrainingJob::start_send(int from, int to, int mb, bool grad) {
  const auto& a = nodes_[static_cast<size_t>(from)];
  const auto& b = nodes_[static_cast<size_t>(to)];
  pending_[static_cast<size_t>((to * rank_units() + mb) * 2 + (grad ? 1 : 0))] = static_cast<int>(a.size());
  const double bytes = cost_.activation_bytes(unit_tokens(mb)) / static_cast<double>(a.size());
  const uint64_t tag = (static_cast<uint64_t>(to) << 32) | (static_cast<uint64_t>(mb) << 1) | (grad ? 1u : 0u);
  const uint64_t gtag = tag | (static_cast<uint64_t>(gen_ & 0xFF) << 56);
  // (Its route's salt is the pair's and the direction's, not the micro-batch's: NCCL sends
  // between two ranks over the same connection every time, so ECMP hashes them onto one path.)
  const uint64_t salt = ((static_cast<uint64_t>(to) << 32) | (grad ? 1u : 0u)) * 31;
  for (size_t k = 0; k < a.size(); ++k) world_.fabric().start(a[k], b[k], bytes, this, gtag, salt + k);
  flows_ += a.size();
}

void TrainingJob::op_done(int sl, size_t oi) {
  Stage& st = stages_[static_cast<size_t>(sl)];
  const int64_t now = world_.engine().now().count_ns();
  const Op op = st.order[oi];
  const int d = sl / c_.pp, s = sl % c_.pp;
  progress_ns_ = now;
  int64_t op_start_ns = st.op_start_ns;
  const bool released = st.released == static_cast<int>(oi);
  if (released) {  // its all-to-alls ran while the stage went on
    st.released = -1;
    st.xfer_end_ns = now;
    op_start_ns = st.released_start_ns;
    if (!st.busy) {  // and the stage waited for them at the end
      st.busy_ns += now - st.last_end_ns;
      st.last_end_ns = now;
    }
  } else {
    st.busy = false;
    st.busy_ns += now - st.op_start_ns - st.op_wait_ns;  // (ZeRO-3: less its waits for gathers)
    st.last_end_ns = now;
  }
  ++st.done;
  if (d == 0 && iterations_done_ < 2 && world_.trace().enabled()) {
    const std::string name = c_.virtual_stages > 1 ? fmt::format("{}{}c{}", op.forward ? "F" : "B", op.mb % units_, op.mb / units_)
                             : n_slices_ == 1      ? fmt::format("{}{}", op.forward ? "F" : "B", op.mb)
                                                   : fmt::format("{}{}.{}", op.forward ? "F" : "B", op.mb / n_slices_, op.mb % n_slices_);
    // A released op: its compute on the stage's track, its all-to-alls on the stage's own
    // all-to-all track (they overlap the next op's compute).
    const int64_t end = released ? st.released_compute_end_ns : now;
    world_.trace().complete(pid_, s, name, op.forward ? "forward" : "backward", op_start_ns, end - op_start_ns);
    if (released && s < 64) world_.trace().complete(pid_, 64 + s, name + " all-to-alls", "all-to-all", end, now - end);
  }
  // Hand-offs follow the virtual stages: j -> j + 1 forward (chunk j / K on rank j mod K; the
  // last rank's chunk hands to the first rank's next one), j -> j - 1 backward.
  const int j = virtual_stage(sl, op.mb), last = c_.pp * c_.virtual_stages - 1, unit = op.mb % units_;
  if (op.forward) {
    if (j < last) send(sl, slot(d, (j + 1) % c_.pp), (j + 1) / c_.pp * units_ + unit, false);
    else st.b_in[static_cast<size_t>(op.mb)] = 1;  // the last stage's loss: its backward may start
  } else if (j > 0) {
    send(sl, slot(d, (j - 1) % c_.pp), (j - 1) / c_.pp * units_ + unit, true);
  }
  if (st.done == st.order.size()) stage_backward_done(s);  // its last op (a backward, or a released op's exchange after it)
  try_run(sl);
}

// A data-parallel collective of the job (gradients, ZeRO's gathers) on the fabric, kept in
// dp_live_ (a failure moves it to the graveyard); `done` runs at its end unless a failure has
// begun a new generation since, with the job's progress stamped for the watchdog.
void TrainingJob::start_dp_collective(net::CollectiveKind kind, std::vector<int> group, double bytes, uint64_t salt, bool fused,
                                      std::function<void(Engine&)> done) {
  net::CollectiveOptions o;
  o.salt = salt;
  o.fused_ring_steps = fused;
  auto coll = std::make_unique<net::Collective>(world_.fabric(), kind, std::move(group), bytes, o);
  net::Collective* raw = coll.get();
  dp_live_.push_back(std::move(coll));
  raw->start([this, done = std::move(done), g = gen_](Engine& e) {
    if (g != gen_) return;
    progress_ns_ = e.now().count_ns();
    done(e);
  });
}

// Every replica finished stage s's backward: its gradients are all-reduced across the data
// parallel replicas (under ZeRO reduce-scattered: each replica keeps the sum of its shard), one
// collective per tensor-parallel rank, while other stages still work.
void TrainingJob::stage_backward_done(int s) {
  last_backward_ns_ = std::max(last_backward_ns_, world_.engine().now().count_ns());
  if (++stage_bwd_done_[static_cast<size_t>(s)] < c_.dp) return;
  if (zero3()) {  // every backward op's gradients were reduce-scattered as it ended
    if (z3_rs_left_[static_cast<size_t>(s)] == 0) stage_reduced(s);
    return;
  }
  if (c_.dp * c_.cp == 1) {
    stage_reduced(s);
    return;
  }
  // Under expert parallelism the expert gradients (1/ep of the experts per device) are reduced
  // over the replicas that hold the same experts (the j-th of every EP group), the rest over all.
  const bool expert_groups = c_.ep > 1 && expert_replicas() > 1;
  stage_dp_left_[static_cast<size_t>(s)] = c_.tp * (1 + (expert_groups ? c_.ep : 0));
  const net::CollectiveKind kind = c_.zero >= 1 ? net::CollectiveKind::ReduceScatter : c_.dp_algorithm;
  const bool fused = kind == net::CollectiveKind::AllReduceRing || kind == net::CollectiveKind::AllReduceAuto ||
                     kind == net::CollectiveKind::ReduceScatter;
  auto reduce = [&](std::vector<int> group, double bytes, uint64_t salt) {
    start_dp_collective(kind, std::move(group), bytes, salt, fused, [this, s](Engine&) {
      if (--stage_dp_left_[static_cast<size_t>(s)] == 0) stage_reduced(s);
    });
  };
  for (int k = 0; k < c_.tp; ++k) {
    std::vector<int> group = dp_group(s, k);
    // Without expert groups (ep = dp x cp) the experts' gradients need no reduction: each is on one rank.
    reduce(std::move(group), stage_dense_bytes_[static_cast<size_t>(s)], static_cast<uint64_t>(s * 1009 + k));
    for (int j = 0; expert_groups && j < c_.ep; ++j)
      reduce(expert_dp_group(j, s, k), stage_expert_bytes_[static_cast<size_t>(s)], static_cast<uint64_t>(s * 1009 + k) * 67 + static_cast<uint64_t>(j) + 3);
  }
}

void TrainingJob::stage_reduced(int s) {
  // The embedding group's all-reduce counts as one more rank to wait for.
  if (embedding_group() && s >= 0 && (s == 0 || s == c_.pp - 1) && ++ends_reduced_ == 2) embedding_allreduce();
  if (++stages_reduced_ < c_.pp + (embedding_group() ? 1 : 0)) return;
  const int64_t now = world_.engine().now().count_ns();
  dp_ns_total_ += now - last_backward_ns_;
  for (auto& c : dp_live_) flows_ += c->flows_started();
  // ZeRO 1-2 all-gather the updated parameters after the step; ZeRO-3 gathers them per op.
  schedule(c_.zero >= 1 && c_.zero < 3 && c_.dp * c_.cp > 1 ? kOptimizerDone : kIterationEnd, slowed(optimizer_ns_, 0, devices_.size()));
}

void TrainingJob::embedding_allreduce() {
  const double bytes = embedding_grad_bytes();
  embedding_left_ = c_.dp * c_.cp * c_.tp;
  for (int d = 0, g = 0; d < c_.dp; ++d)
    for (int i = 0; i < c_.cp * c_.tp; ++i, ++g) {
      std::vector<int> pair{nodes_[static_cast<size_t>(slot(d, 0))][static_cast<size_t>(i)],
                            nodes_[static_cast<size_t>(slot(d, c_.pp - 1))][static_cast<size_t>(i)]};
      start_dp_collective(net::CollectiveKind::AllReduceRing, std::move(pair), bytes, static_cast<uint64_t>(g) * 131 + 11, true, [this](Engine&) {
        if (--embedding_left_ == 0) stage_reduced(-1);
      });
    }
}

// ZeRO: every replica updated its shard of the parameters; each stage's tensor-parallel rank
// all-gathers them before the next iteration's forward, over the ranks that sharded them: the
// dense ones over the data-parallel replicas, a device's experts over its expert-data-parallel
// group (none when ep = dp x cp: each expert's one holder updated it whole).
void TrainingJob::optimizer_done() {
  dp_live_.clear();
  const bool expert_groups = c_.ep > 1 && expert_replicas() > 1;
  gather_left_ = c_.pp * c_.tp * (1 + (expert_groups ? c_.ep : 0));
  auto gather = [&](std::vector<int> group, double bytes, uint64_t salt) {
    start_dp_collective(net::CollectiveKind::AllGather, std::move(group), bytes, salt, true, [this](Engine& e) {
      if (--gather_left_ > 0) return;
      for (auto& c : dp_live_) flows_ += c->flows_started();
      iteration_end(e);
    });
  };
  for (int s = 0; s < c_.pp; ++s)
    for (int k = 0; k < c_.tp; ++k) {
      gather(dp_group(s, k), stage_dense_bytes_[static_cast<size_t>(s)], static_cast<uint64_t>(s * 1009 + k) + 7);
      for (int j = 0; expert_groups && j < c_.ep; ++j)
        gather(expert_dp_group(j, s, k), stage_expert_bytes_[static_cast<size_t>(s)],
               (static_cast<uint64_t>(s * 1009 + k) * 67 + static_cast<uint64_t>(j) + 3) * 7 + 5);
    }
}

void TrainingJob::iteration_end(Engine& e) {
  // Under ZeRO this runs inside the last all-gather's callback: a collective may be destroyed
  // from its own callback (Collective::start_phase).
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
  double mean_busy = 0;
  for (double f : res_.stage_busy_fraction) mean_busy += f;
  busy_profile_.add(iter_start_ns_, now, mean_busy / c_.pp);
  bubble_sum_ += bubble / c_.pp;
  // The all-to-alls: the busiest EP group and pipeline rank (groups whose pairs cross a thin
  // spine take longer, and every step waits for them); the rings: replica 0's busiest rank.
  int64_t a2a = 0, ring = 0;
  for (size_t x = 0; x < a2a_.size() && c_.ep > 1; ++x) a2a = std::max(a2a, a2a_[x].iteration_ns);
  for (int s = 0; s < c_.pp && cp(); ++s) ring = std::max(ring, stages_[static_cast<size_t>(slot(0, s))].cp_exposed_ns);
  a2a_ns_total_ += a2a;
  cp_ns_total_ += ring;
  ++iterations_done_;
  ++measured_;
  res_.bubble_fraction = bubble_sum_ / measured_;
  res_.dp_allreduce_ms = static_cast<double>(dp_ns_total_) / measured_ / 1e6;
  res_.alltoall_ms = static_cast<double>(a2a_ns_total_) / measured_ / 1e6;
  res_.cp_exposed_ms = static_cast<double>(cp_ns_total_) / measured_ / 1e6;
  progress_ns_ = now;
  observe_end(now, bubble / c_.pp);
  after_iteration(now);
}

// What follows an iteration's end: done, a checkpoint, or the next iteration.
void TrainingJob::after_iteration(int64_t now) {
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
    if (c_.checkpoint_to_storage) write_checkpoint();
    else schedule(kCheckpointDone, c_.checkpoint_write_ns);
    return;
  }
  next_iteration();
}

}  // namespace detail

using detail::TrainingJob;

std::unique_ptr<Workload> make_training_job(const std::string& name, TrainingConfig cfg, World& world, std::vector<int> devices) {
  return std::make_unique<TrainingJob>(name, std::move(cfg), world, std::move(devices));
}

const TrainingResults& training_results(const Workload& job) {
  const auto* t = dynamic_cast<const TrainingJob*>(&job);
  if (!t) throw std::invalid_argument(fmt::format("workload '{}' is not a training job", job.name()));
  return t->results();
}

}  // namespace sluice::training
