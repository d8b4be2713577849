#include "workloads/serving/serving_sim.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "config/units.h"
#include "engine/round.h"
#include "engine/run_control.h"
#include "engine/stall.h"
#include "workloads/serving/last_mile.h"

namespace sluice::serving {

using detail::deliver_decode_token;

namespace {
FrontEndOptions front_end_options(const ServingConfig& c) {
  FrontEndOptions o;
  o.max_context = c.model.max_context;
  o.max_in_flight = c.max_in_flight;
  o.trace_pid = c.trace_pid + 1;
  o.trace_max_requests = c.trace_max_requests;
  return o;
}
}  // namespace

ServingSim::ServingSim(ServingConfig cfg, Engine& engine, TraceWriter* trace, ServingFabric fabric)
    : fabric_(std::move(fabric)),
      cfg_(std::move(cfg)),
      engine_(engine),
      trace_(trace),
      cost_(cfg_.hardware, cfg_.model, [&] {
        CostOptions o = cost_options(cfg_);
        o.comm_on_fabric = fabric_.active();  // the fabric times every transfer; the cost model only computes
        return o;
      }()),
      front_(engine, *cfg_.workload, front_end_options(cfg_), trace),
      global_(engine, front_, *cfg_.router, replicas_, *this, cfg_.failover_timeout_ns) {
  front_.connect(&global_);
  auto probe = cfg_.make_scheduler();
  mem_ = plan_memory(cfg_, probe->max_tokens_per_iteration());
  pool_split_ = cfg_.prefill_replicas;
  if (const PoolSpec* pool = prefill_pool()) {
    if (pool_split_ <= 0) throw std::logic_error("internal: a prefill pool of its own without disaggregation");
    prefill_cost_ = std::make_unique<CostModel>(pool->hardware, cfg_.model, [&] {
      CostOptions o = cost_options(cfg_, pool);
      o.comm_on_fabric = fabric_.active();
      return o;
    }());
    prefill_mem_ = plan_memory(cfg_, pool->make_scheduler()->max_tokens_per_iteration(), pool);
  }
  pp_ = cfg_.pipeline_parallel;
  if (cfg_.kv_remote_cache_bytes > 0) {
    if (!fabric_.active() || static_cast<int>(fabric_.host_links.size()) != cfg_.replicas || pp_ != 1)
      throw std::logic_error("internal: a remote KV pool needs single-stage replicas with host links on the fabric");
    const double per_block = kv_bytes_per_token_per_gpu(cfg_) * kv_shards(cfg_) * cfg_.block_size;
    remote_ = std::make_unique<RemoteKvStore>(static_cast<int64_t>(cfg_.kv_remote_cache_bytes / per_block));
  }
  if (cfg_.speculative.on()) spec_ = std::make_unique<Speculator>(cfg_.speculative, cfg_.hardware, cfg_.model, cost_options(cfg_), cfg_.seed);
  const int engines = cfg_.replicas * pp_;
  for (int i = 0; i < engines; ++i) {
    // A prefill pool of its own devices and parallelism: its memory plan, its host links' speed.
    const bool own = own_prefill(i);
    const HardwareSpec& hw = own ? prefill_pool()->hardware : cfg_.hardware;
    const int shards = tp_of(i) * cfg_.pipeline_parallel;
    const MemoryPlan& mem = own ? prefill_mem_ : mem_;
    auto r = std::make_unique<Replica>(mem.blocks_per_engine, cfg_.block_size, cfg_.watermark, cfg_.prefix_reuse, cfg_.prefix_caching);
    r->reqs = &front_.requests();
    r->preemption = cfg_.preemption;
    // Over all the replica's GPUs.
    r->kv_bytes_per_token = kv_bytes_per_token_per_gpu(cfg_, own ? prefill_pool() : nullptr) * kv_shards(cfg_, own ? prefill_pool() : nullptr);
    r->lookahead = spec_ ? spec_->k() : 0;
    r->swap_Bps = hw.pcie_Bps * shards;
    r->swap_capacity_tokens = static_cast<int64_t>(cfg_.swap_space_bytes / r->kv_bytes_per_token);
    r->ssd_Bps = hw.ssd_read_Bps * shards;
    set_kv_tiers(r->kv, r->kv_bytes_per_token, i);
    if (runs_dp_attention(i)) {  // its devices schedule as ranks of their own (a token budget each)
      r->ranks = tp_of(i);
      r->rank_fn = [this, i](Request& q, bool deal) { return rank_on(i, q, deal); };
    }
    replicas_.push_back(std::move(r));
    schedulers_.push_back(own ? prefill_pool()->make_scheduler() : cfg_.make_scheduler());
  }
  batches_.resize(engines);
  detok_free_ns_.assign(engines, 0);
  kv_last_ns_.assign(engines, 0);
  wake_pending_ns_.assign(engines, -1);
  decide_pending_ns_.assign(engines, -1);
  kv_last_occ_.assign(engines, 0.0);
  busy_.assign(engines, false);
  busy_until_.assign(engines, 0);
  busy_len_.assign(engines, 0);
  rstats_.resize(engines);
  stage_free_ns_.assign(static_cast<size_t>(engines), 0);  // replicas × stages
  if (engines > std::numeric_limits<int>::max() / kMaxSlices)
    throw std::invalid_argument(fmt::format("{} engines: too many to tell their slices apart", engines));
  if (fabric_.active()) {
    // (A disaggregated deployment of single-device replicas is on the fabric for its KV copies alone.)
    if (static_cast<int>(fabric_.stage_nodes.size()) != cfg_.replicas && !(cfg_.prefill_replicas > 0 && fabric_.stage_nodes.empty()))
      throw std::logic_error("internal: serving fabric placement does not match the replica count");
    inflight_.resize(static_cast<size_t>(engines));
    stage_busy_.assign(static_cast<size_t>(engines), 0);
    stage_queue_.resize(static_cast<size_t>(engines));
  }
  epoch_.assign(static_cast<size_t>(engines), 0);
  if (pool_split_ > 0) {
    if (pp_ != 1 || pool_split_ >= cfg_.replicas)
      throw std::invalid_argument(fmt::format("internal: disaggregation of {} replicas with {} prefill replicas and pp {}", cfg_.replicas,
                                              pool_split_, pp_));
    if (!fabric_.active() || static_cast<int>(fabric_.replica_nodes.size()) != cfg_.replicas)
      throw std::invalid_argument("internal: a disaggregated deployment needs its replicas' places on the fabric (the KV copies are flows)");
    global_.set_prefill_pool(static_cast<size_t>(pool_split_));
  }
  global_.set_priority_order(cfg_.priority_scheduling);
  if (cfg_.shed_late) {
    std::vector<int64_t> ttft;
    for (const auto& c : cfg_.workload->classes()) ttft.push_back(c.ttft_ns);
    global_.set_shed_late(std::move(ttft));
  }
  handoff_wait_.resize(static_cast<size_t>(engines));
  dp_next_.assign(static_cast<size_t>(engines), 0);
  down_since_ns_.assign(static_cast<size_t>(cfg_.replicas), -1);
  if (trace_ && trace_->enabled()) {
    trace_->name_process(cfg_.trace_pid, "replicas");
    for (int i = 0; i < engines && i < 64; ++i)
      trace_->name_thread(cfg_.trace_pid, i, pp_ == 1 ? fmt::format("replica {}", i) : fmt::format("replica {} engine {}", i / pp_, i % pp_));
    trace_->name_process(cfg_.trace_pid + 1, "requests");
  }
}

void ServingSim::run(const std::function<void(double)>& progress) {
  start(progress);
  engine_.run(cfg_.max_sim_time_ns > 0 ? SimTime::ns(cfg_.max_sim_time_ns) : SimTime::max());
  finish();
}

void ServingSim::start(const std::function<void(double)>& progress, std::function<void()> on_done) {
  // Steady decode runs inline only where an iteration is one compute step (no pipeline
  // stages, no transfers of its own on the fabric), and unless the run turned it off (read
  // here, when the run starts: a scenario is built before the CLI applies its options).
  fast_forward_ = RunControl::get().fast_forward() && pp_ == 1 &&
                  (!fabric_.active() || (cfg_.tensor_parallel == 1 && (!prefill_pool() || prefill_pool()->tensor_parallel == 1)));
  front_.start(progress, std::move(on_done));
  if (cfg_.autoscaling.policy != ServingConfig::Autoscaling::Policy::None) scale_start();
  if (cfg_.sample_interval_ns > 0) engine_.schedule_at(engine_.now(), Priority::Stats, this, kSample);
}

void ServingSim::finish() {
  check_conservation();
  const RequestCounts& n = front_.counts();
  truncated_ = n.completed < n.announced && engine_.pending() > 0;
  if (n.completed < n.announced && !truncated_ && global_.parked() > 0)
    throw WorkloadStalled(fmt::format("{} requests wait at {} for a healthy replica that never returns (no repair, and no "
                                         "failover timeout to fail them)", global_.parked(), engine_.now().str()));
  if (n.completed < n.announced && !truncated_) {
    int64_t waiting = 0, running = 0;
    for (const auto& r : replicas_) { waiting += static_cast<int64_t>(r->waiting.size() + r->swapped.size()); running += static_cast<int64_t>(r->running.size()); }
    throw WorkloadStalled(fmt::format("the simulation stalled at {}: {} of {} requests completed, {} waiting and {} running "
                                         "can make no progress (please report this scenario)",
                                         engine_.now().str(), n.completed, n.announced, waiting, running));
  }
  if (truncated_) {
    // Cut at the horizon: the run simulated up to it, and an iteration still running there
    // counts busy (and its batch) only up to it, not to the end it was launched with.
    const int64_t cut = engine_.now().count_ns();
    for (size_t i = 0; i < rstats_.size(); ++i)
      if (busy_[i] && busy_until_[i] > cut) {
        const int64_t over = busy_until_[i] - cut;
        rstats_[i].busy_ns -= over;
        if (busy_len_[i] > 0) rstats_[i].cut_fraction += static_cast<double>(over) / static_cast<double>(busy_len_[i]);
        rstats_[i].batch_time_integral -= static_cast<double>(batches_[i].entries.size()) * static_cast<double>(over);
      }
    last_activity_ns_ = cut;
  }
  for (int i = 0; i < static_cast<int>(replicas_.size()); ++i) account_kv(i, activity_end());
  if (!scale_state_.empty()) scale_account(activity_end());
}

void ServingSim::on_event(Engine& e, uint32_t kind, uint32_t arg) {
  const Generation gen = e.event_generation();
  if ((kind == kIterationEnd && !(gen == epoch(static_cast<int>(arg)))) ||
      (kind == kStageCompute && !(gen == epoch(static_cast<int>(arg / kMaxSlices)))))
    return;  // an iteration a failure voided
  switch (kind) {
    case kIterationEnd:
      on_iteration_end(static_cast<int>(arg));
      break;
    case kWake:
      wake_pending_ns_[arg] = -1;
      try_start(static_cast<int>(arg));
      break;
    case kDecide:
      decide_pending_ns_[arg] = -1;
      decide_inline(static_cast<int>(arg));
      break;
    case kStageCompute:
      stage_compute_done(static_cast<int>(arg / kMaxSlices), static_cast<int>(arg % kMaxSlices));
      break;
    case kScale:
      scale_tick();
      if (!front_.all_ended() && e.pending() > 0)
        e.schedule_in(SimTime::ns(cfg_.autoscaling.interval_ns), Priority::Stats, this, kScale);
      break;
    case kScaledUp:
      scaled_up(static_cast<int>(arg));
      break;
    case kReplicaUp:
      if (gen == epoch(static_cast<int>(arg) * pp_)) replica_up(static_cast<int>(arg), e.now().count_ns());
      break;
    case kSample:
      sample();
      // Sampling alone must not keep a finished (or stuck) simulation alive.
      if (!front_.all_ended() && e.pending() > 0) e.schedule_in(SimTime::ns(cfg_.sample_interval_ns), Priority::Stats, this, kSample);
      break;
  }
}

void ServingSim::request_schedule(int ri) {
  const int64_t now = engine_.now().count_ns();
  if (busy_[ri] || decide_pending_ns_[ri] == now) return;
  decide_pending_ns_[ri] = now;
  engine_.schedule_at(SimTime::ns(now), Priority::Schedule, this, kDecide, static_cast<uint32_t>(ri));
}

void ServingSim::account_kv(int r, int64_t now_ns) {
  auto& st = rstats_[r];
  st.kv_time_integral += kv_last_occ_[r] * static_cast<double>(now_ns - kv_last_ns_[r]);
  const auto& kv = replicas_[r]->kv;
  const double occ = static_cast<double>(kv.used_blocks() + kv.cached_blocks()) / static_cast<double>(kv.total_blocks());
  kv_last_occ_[r] = occ;
  kv_last_ns_[r] = now_ns;
  st.kv_max = std::max(st.kv_max, occ);
}

void ServingSim::try_start(int ri) {
  if (busy_[ri] || !replicas_[ri]->healthy) return;
  Replica& r = *replicas_[ri];
  Batch& b = batches_[ri];
  b.clear();
  const int64_t now = engine_.now().count_ns();
  b.start_ns = now;
  schedulers_[ri]->schedule(r, b, now);
  account_kv(ri, now);
  if (b.empty()) {
    const int64_t wake = schedulers_[ri]->wake_at(r, now);
    if (wake >= 0 && wake_pending_ns_[ri] != wake) {
      wake_pending_ns_[ri] = wake;
      engine_.schedule_at(SimTime::ns(std::max(wake, now)), Priority::Schedule, this, kWake, static_cast<uint32_t>(ri));
    }
    return;
  }
  if (const int64_t fetched = r.kv.take_fetched(); fetched > 0) {
    // Prefixes fetched back from the host tier: copied over the host link before the
    // iteration computes (a flow per device on a fabric with host links, like a swap-in);
    // one for a request not admitted now is charged to the next batch.
    const double bytes = static_cast<double>(fetched) * cfg_.block_size * r.kv_bytes_per_token;
    b.extra_ns += bytes / r.swap_Bps * 1e9;
    b.swap_bytes += bytes;
    if (const int64_t from_ssd = r.kv.take_fetched_ssd(); from_ssd > 0) {
      // Read from the drives into host memory first (then the copy above): in series.
      const double read_ns = static_cast<double>(from_ssd) * cfg_.block_size * r.kv_bytes_per_token / r.ssd_Bps * 1e9;
      b.extra_ns += read_ns;
      b.storage_ns += read_ns;
    }
  }
  if (const int64_t offloaded = r.kv.take_offloaded(); offloaded > 0 && fabric_.active() && !fabric_.host_links.empty()) {
    // KV copied from HBM to the host's memory (the host tier, or the remote pool with this
    // replica as home): in the background, as flows on the host links that nothing waits for.
    const auto& hl = fabric_.host_links[static_cast<size_t>(ri / pp_)];
    const double bytes = static_cast<double>(offloaded) * cfg_.block_size * r.kv_bytes_per_token / static_cast<double>(hl.size());
    for (size_t k = 0; k < hl.size(); ++k)
      fabric_.flows->start(hl[k].first, hl[k].second, bytes, this, kOffloadFlow, static_cast<uint64_t>(ri) * 131 + 0x0FF + k);
  }
  if (auto& remote = r.kv.fetched_remote(); !remote.empty()) {
    // Prefixes fetched from the remote pool: copied over the fabric from their home's host
    // memory before the iteration computes (flows, like a swap-in; see the fabric path).
    for (const auto& [home, blocks] : remote) remote_fetch_.emplace_back(home, static_cast<double>(blocks) * cfg_.block_size * r.kv_bytes_per_token);
    remote.clear();
  }
  work_.clear();
  ranks_.clear();
  if (runs_dp_attention(ri)) {  // data-parallel attention: each sequence's device, where its KV cache is
    // On a prefill engine a prompt's device is dealt as its scheduler first considers it (SGLang's
    // DP controller deals requests to its ranks in turn), or here as it joins a batch for a
    // scheduler without budgets (orca, static); a chunked prompt keeps it.
    const bool prefill = ri < pool_split_;
    for (const auto& en : b.entries) {
      if (en.req == kPaddingSlot) {
        ranks_.push_back(-1);
        continue;
      }
      Request& q = front_.requests()[en.req];
      ranks_.push_back(prefill ? rank_on(ri, q, /*deal=*/true) : q.dp_rank);
    }
  }
  int generating = 0;
  for (const auto& en : b.entries) {
    if (en.req == kPaddingSlot) {  // static batching's padding: a decode row of a finished member
      work_.push_back(SeqWork{en.new_tokens, en.context, true});
      continue;
    }
    // A prefill chunk that stops short of the prompt's end samples no token (no LM-head row).
    // The scheduler's mech::add noted that, and the request's first scheduling, as it added
    // the entry: this loop reads no request (their cache lines are cold at 64 replicas).
    work_.push_back(SeqWork{en.new_tokens, en.context, en.samples});
    if (en.samples) ++generating;
  }
  if (cfg_.kv_layerwise && ri < pool_split_)  // prompts this prefill completes: their KV leaves layer by layer during it
    for (const auto& en : b.entries)
      if (en.req != kPaddingSlot) {
        const Request& q = front_.requests()[en.req];
        if (q.computed + en.new_tokens >= q.length()) begin_layerwise(ri, en.req, static_cast<int32_t>(q.computed + en.new_tokens));
      }
  const double draft_ns = spec_ ? speculate(b) : 0.0;  // the drafter runs first, on the same devices
  const bool swap_flows = fabric_.active() && b.swap_bytes > 0 && !fabric_.host_links.empty() &&
                          !fabric_.host_links[static_cast<size_t>(ri / pp_)].empty();
  // The passes of the iteration: one of every token, or a long prompt's prefill as slices.
  const std::vector<int> slices = work_.size() == 1 && b.swap_bytes == 0 && b.extra_ns == 0
                                      ? prefill_slices(work_[0].new_tokens, work_[0].context)
                                      : std::vector<int>{};
  const int passes = slices.empty() ? 1 : static_cast<int>(slices.size());
  pass_ns_.resize(static_cast<size_t>(passes * pp_));
  double compute_ns = 0;
  // Two-batch overlap: the sequences as two micro-batches (alternately), each computed apart
  // (so each reads the weights), their communication under the other's compute (start_compute).
  bool overlap = cfg_.moe.two_batch_overlap && cfg_.model.moe() && fabric_.active() && pp_ == 1 && slices.empty() &&
                 work_.size() >= 2;
  // (Under data-parallel attention each device splits its own sequences, and a step where no
  // device holds two runs whole: its second half would be empty.)
  if (overlap) overlap = two_batch_halves(work_, ranks_, tp_of(ri), halves_, half_ranks_, half_parity_);
  if (overlap) {
    compute_ns = stage_times(ri, halves_[0], half_ranks_[0]);
    compute_ns += stage_times(ri, halves_[1], half_ranks_[1]);
    stage_ns_[0] = pass_ns_[0] = compute_ns;
  } else if (slices.empty()) {
    compute_ns = stage_times(ri, work_, ranks_);  // each stage's own layers, into stage_ns_
    for (int s = 0; s < pp_; ++s) pass_ns_[static_cast<size_t>(s)] = stage_ns_[static_cast<size_t>(s)];
  } else {
    int c = work_[0].context;
    for (int k = 0; k < passes; ++k) {  // slice k: its tokens after the prompt's earlier slices; only the last samples
      const SeqWork w{slices[static_cast<size_t>(k)], c, k + 1 == passes && work_[0].produces_token};
      compute_ns += stage_times(ri, std::span<const SeqWork>(&w, 1));
      for (int s = 0; s < pp_; ++s) pass_ns_[static_cast<size_t>(k * pp_ + s)] = stage_ns_[static_cast<size_t>(s)];
      c += slices[static_cast<size_t>(k)];
    }
    rstats_[ri].sliced_prefills += 1;
    rstats_[ri].prefill_slices += passes;
  }
  if (draft_ns > 0) {  // speculation runs on single-stage replicas: the drafter before the one stage
    stage_ns_[0] += draft_ns;
    pass_ns_[0] += draft_ns;
    compute_ns += draft_ns;
  }
  auto pass_stage_ns = [&](int k, int s) {
    return std::max<int64_t>(1, round_ns(pass_ns_[static_cast<size_t>(k * pp_ + s)]));
  };
  int64_t dur_ns = 0, occupied_ns = 0;
  if (fabric_.active() && (tp_of(ri) > 1 || pp_ > 1 || swap_flows || !remote_fetch_.empty())) {
    // Transfers are flows: the iteration's length is known only when its last stage is done.
    busy_[ri] = true;
    rstats_[ri].started(b.prefill_entries, b.decode_entries, b.entries.size());
    InFlight& f = inflight_[static_cast<size_t>(ri)];
    int64_t tokens = 0;
    for (const SeqWork& w : work_) tokens += w.new_tokens + w.drafts;  // (a verification carries its drafts through every layer)
    f.passes.resize(static_cast<size_t>(passes));
    f.stage_ns.resize(static_cast<size_t>(passes * pp_));
    // Under data-parallel attention the all-to-alls go by the busiest device (Pass::a2a_tokens):
    // each device dispatches its own sequences' tokens, and the step waits for the one with the
    // most, as its compute does (dp_whole_ns). A prefill's prompts are dealt as their scheduler
    // first considers them; a decode step's sequences as their KV arrives, and they finish
    // unevenly, so one device may hold several more than another.
    double a2a_tokens = static_cast<double>(tokens);
    if (runs_dp_attention(ri) && ranks_.size() == work_.size()) {
      const int dp = tp_of(ri);
      per_rank_tokens_.assign(static_cast<size_t>(dp), 0);
      for (size_t i = 0; i < work_.size(); ++i)
        if (ranks_[i] >= 0) per_rank_tokens_[static_cast<size_t>(ranks_[i] % dp)] += work_[i].new_tokens + work_[i].drafts;
      a2a_tokens = static_cast<double>(*std::max_element(per_rank_tokens_.begin(), per_rank_tokens_.end())) * dp;
    }
    for (int k = 0; k < passes; ++k) {
      f.passes[static_cast<size_t>(k)].tokens = slices.empty() ? static_cast<double>(tokens) : slices[static_cast<size_t>(k)];
      f.passes[static_cast<size_t>(k)].a2a_tokens = slices.empty() ? a2a_tokens : slices[static_cast<size_t>(k)];
      for (int s = 0; s < pp_; ++s) f.stage_ns[static_cast<size_t>(k * pp_ + s)] = pass_stage_ns(k, s);
    }
    f.done_on_stage.assign(static_cast<size_t>(pp_), 0);
    f.parked.assign(static_cast<size_t>(pp_), {});
    // KV swapped over PCIe is a flow from each of the replica's devices to its host (or back):
    // the copy's time comes from the fabric, not from a fixed bandwidth.
    f.extra_ns = round_ns(swap_flows ? b.storage_ns : b.extra_ns);  // the host-link copies are flows
    f.swaps_pending = 0;
    if (swap_flows) {
      const auto& hl = fabric_.host_links[static_cast<size_t>(ri / pp_)];
      f.swaps_pending = static_cast<int>(hl.size());
      for (size_t k = 0; k < hl.size(); ++k)
        fabric_.flows->start(hl[k].first, hl[k].second, b.swap_bytes / static_cast<double>(hl.size()), this, swap_tag(ri),
                             static_cast<uint64_t>(ri) * 131 + k);
    }
    for (const auto& [home, bytes] : remote_fetch_) {
      // From the host memory of the replica that let the prefix go to this replica's devices,
      // cut as a KV copy between pools is (piece k between the devices that hold its heads).
      const auto& src = fabric_.host_links[static_cast<size_t>(home)];
      const auto& dst = fabric_.host_links[static_cast<size_t>(ri)];
      const size_t n = std::lcm(src.size(), dst.size());
      f.swaps_pending += static_cast<int>(n);
      for (size_t k = 0; k < n; ++k)
        fabric_.flows->start(src[k * src.size() / n].second, dst[k * dst.size() / n].first, bytes / static_cast<double>(n), this,
                             swap_tag(ri), static_cast<uint64_t>(ri) * 131 + 0x7E7 + static_cast<uint64_t>(remote_fetches_) * 17 + k);
      ++remote_fetches_;
    }
    remote_fetch_.clear();
    f.d2h_ns = round_ns(cfg_.last_mile.d2h_ns(generating));
    f.overlap = overlap;
    overlapped_ += overlap;
    f.started_ns = now;
    begin_stage(ri, 0, 0);
    return;
  }
  if (pp_ == 1) {
    dur_ns = std::max<int64_t>(1, round_ns(stage_ns_[0] + b.extra_ns + cfg_.last_mile.d2h_ns(generating)));
    occupied_ns = dur_ns;
  } else {
    // The batch flows through the replica's stages in order, each stage taking one batch at
    // a time (a flow shop): other engines' batches fill the stages behind it. Slices of a
    // sliced prefill follow one another the same way (a stage is free for slice k once it
    // has finished slice k - 1).
    const int64_t extra = round_ns(b.extra_ns);
    const size_t base = static_cast<size_t>(ri / pp_ * pp_);
    int64_t t = now;
    for (int k = 0; k < passes; ++k) {
      t = now;
      for (int s = 0; s < pp_; ++s) {
        int64_t& free_at = stage_free_ns_[base + static_cast<size_t>(s)];
        const int64_t d = pass_stage_ns(k, s) + (s == 0 && k == 0 ? extra : 0);
        t = std::max(t, free_at) + d;
        free_at = t;
        if (s == 0) occupied_ns += d;  // the first stage's busy time: the replica's utilization
      }
    }
    dur_ns = t - now + round_ns(cfg_.last_mile.d2h_ns(generating));
  }
  launch_iteration(ri, dur_ns, occupied_ns, compute_ns);
}

// An iteration of batches_[ri] starts now, with its end an event: its counters, its trace
// (while iterations are traced), its IterationEnd.
void ServingSim::launch_iteration(int ri, int64_t dur_ns, int64_t occupied_ns, double compute_ns) {
  const int64_t now = engine_.now().count_ns();
  const Batch& b = batches_[static_cast<size_t>(ri)];
  busy_[ri] = true;
  busy_until_[static_cast<size_t>(ri)] = now + occupied_ns;
  busy_len_[static_cast<size_t>(ri)] = occupied_ns;
  rstats_[ri].started(b.prefill_entries, b.decode_entries, b.entries.size());
  rstats_[ri].busy(now, occupied_ns, b.entries.size());
  if (trace_ && trace_->enabled() && trace_iterations_ < cfg_.trace_max_iterations && ri < 64) {
    ++trace_iterations_;
    int64_t tokens = 0;
    for (const SeqWork& w : work_) tokens += w.new_tokens + w.drafts;  // (a verification carries its drafts through every layer)
    const char* what = b.prefill_entries && b.decode_entries ? "mixed" : b.prefill_entries ? "prefill" : "decode";
    trace_->complete(cfg_.trace_pid, ri, what, "iteration", now, dur_ns,
                     {{"batch", static_cast<double>(b.entries.size())}, {"tokens", static_cast<double>(tokens)},
                      {"prefill_seqs", static_cast<double>(b.prefill_entries)}, {"decode_seqs", static_cast<double>(b.decode_entries)},
                      {"compute_us", compute_ns / 1e3}, {"extra_us", b.extra_ns / 1e3}});
    trace_->counter(cfg_.trace_pid, fmt::format("replica {} KV occupancy", ri), now, "occupancy", kv_last_occ_[ri]);
    trace_->counter(cfg_.trace_pid, fmt::format("replica {} batch", ri), now, "sequences", static_cast<double>(b.entries.size()));
  }
  engine_.schedule_at(SimTime::ns(now + dur_ns), Priority::Compute, this, kIterationEnd, static_cast<uint32_t>(ri), epoch(ri));
  last_activity_ns_ = std::max(last_activity_ns_, now + dur_ns);
}

double ServingSim::stage_times(int ri, std::span<const SeqWork> work, std::span<const int32_t> ranks) {
  stage_ns_.resize(static_cast<size_t>(pp_));
  double sum = 0;
  for (int s = 0; s < pp_; ++s) {
    // pp = 1: the whole model (iteration_ns); else the stage's own layers, the embedding on
    // the first, the LM head on the last.
    // (Data-parallel attention: the sequences on the devices that hold them, ranks beside work.)
    const bool ranked = !ranks.empty() && work.size() == ranks.size();
    const double t = pp_ == 1 ? (ranked ? cost_of(ri).iteration_ns(work, ranks) : cost_of(ri).iteration_ns(work)) : cost_.stage_ns(work, s);
    if (!std::isfinite(t) || t < 0)
      throw std::runtime_error(fmt::format("the cost model returned {} ns for stage {} of an iteration of {} sequences", t, s, work.size()));
    stage_ns_[static_cast<size_t>(s)] = t;
    sum += t;
  }
  return sum;
}

void ServingSim::on_iteration_end(int ri) {
  end_iteration(ri);
  const int64_t now = engine_.now().count_ns();
  if (!busy_[ri] && decide_pending_ns_[ri] != now && engine_.nothing_due_by(now)) {
    // Nothing else happens at this instant (finishing requests may have queued arrivals for
    // now; then it waits for them): decide the next iteration at once, as the Decide event
    // would have the moment it was popped. Counted as that event.
    engine_.count_inline_event();
    decide_inline(ri);
    return;
  }
  request_schedule(ri);
}

namespace {
// Speculative decoding: an entry verifies drafts when it is a decode step of a sequence that
// already has a token (the drafter proposes after it; `generated` is its count as the step
// starts). Anything else (a prompt's chunk, the step that makes the first token) the drafter
// runs too, to hold the sequence's state. speculate() and end_iteration both ask this.
inline bool verifies_drafts(const BatchEntry& en, int32_t generated) { return en.new_tokens == 1 && en.samples && generated >= 1; }

}  // namespace

void ServingSim::end_iteration(int ri) {
  const int64_t now = engine_.now().count_ns();  // sampled ids are on the host now
  Replica& r = *replicas_[ri];
  Batch& b = batches_[ri];
  busy_[ri] = false;
  auto& st = rstats_[ri];
  const int64_t detok = cfg_.last_mile.detokenize_ns, stream = cfg_.last_mile.stream_ns;
  int64_t t = std::max(now, detok_free_ns_[ri]);
  ended_.clear();
  // The batch's requests were last touched when the iteration started, and every other
  // replica's iterations have run since: ask for all their lines at once rather than
  // missing the cache on each in turn. (A lone replica's requests are still in the cache.)
  if (replicas_.size() > 1)
    for (const auto& en : b.entries)
      if (en.req != kPaddingSlot) __builtin_prefetch(&front_.requests()[en.req], 1);
  LogHistogram::Runs gaps(gaps_);
  int64_t tokens = 0;
  const bool speculating = spec_ != nullptr;
  if (b.steady_decode) {
    // The batch decide_inline formed: every member is a running sequence past its first
    // token decoding one more (the general loop below, less its tests that cannot fail).
    for (const auto& en : b.entries) {
      Request& q = front_.requests()[en.req];
      const int64_t delivered = deliver_decode_token(q, t, detok, stream, gaps);
      if (q.finished()) {
        ended_.push_back(en.req);
        finish(q, delivered);
      }
    }
    tokens = static_cast<int64_t>(b.entries.size());
  } else {
    for (const auto& en : b.entries) {
      if (en.req == kPaddingSlot) continue;
      Request& q = front_.requests()[en.req];
      if (q.state == ReqState::Done) continue;
      tokens += en.new_tokens;
      q.computed += en.new_tokens;
      if (q.computed < q.length()) continue;  // a prefill chunk that did not reach the end
      if (ri < pool_split_) {  // a prefill engine's work on it is done: its KV cache goes to the decode pool
        q.state = ReqState::Handoff;
        handing_off_.push_back(en.req);
        continue;
      }
      ++q.generated;
      // The last mile: detokenized in order on the replica's host thread, then streamed.
      t += detok;
      int64_t delivered = t + stream;
      if (q.first_token_ns < 0) {
        q.first_token_ns = delivered;
        if (q.prefix_id >= 0 && pool_split_ == 0) r.kv.publish_prefix(q);  // (disaggregated: the prefill engine keeps it)  // its prompt's shared prefix, for the requests after it
      } else {
        const int64_t gap = delivered - q.last_token_ns;
        gaps.add(gap);
        q.max_gap_ns = std::max(q.max_gap_ns, gap);
      }
      q.last_token_ns = delivered;
      if (speculating && verifies_drafts(en, q.generated - 1)) [[unlikely]] {  // (generated counts this step's token)
        spec_context_sum_ += en.context;
        delivered = accept_drafts(q, t, detok, stream, gaps);
        tokens += spec_->k();  // the drafts verified: through the model with the step's own token
      }
      if (q.finished()) {
        ended_.push_back(en.req);
        finish(q, delivered);
      }
    }
  }
  gaps.flush();
  st.processed(engine_.now().count_ns(), tokens);
  detok_free_ns_[ri] = t;
  // Drop finished sequences from the running list (only those that ended here are Done), and
  // those a prefill engine hands to the decode pool.
  if (!ended_.empty() || !handing_off_.empty()) {
    r.running.erase(std::remove_if(r.running.begin(), r.running.end(),
                                   [&](uint32_t id) {
                                     const ReqState s = front_.requests()[id].state;
                                     return s == ReqState::Done || s == ReqState::Handoff;
                                   }),
                    r.running.end());
    r.routed -= ended_.size() + handing_off_.size();
  }
  for (uint32_t slot : ended_) front_.release(slot);  // now that nothing names them
  if (pool_split_ > 0) {
    if (!handing_off_.empty()) {
      std::vector<uint32_t> going;
      going.swap(handing_off_);
      for (uint32_t id : going) start_handoff(ri, id);
    } else if (!handoff_wait_[static_cast<size_t>(ri)].empty()) {
      pump_handoffs(ri);  // requests ended here: their blocks may hold a waiting handoff
    }
  }
}

double ServingSim::speculate(Batch& b) {
  spec_contexts_.clear();
  spec_prefill_.clear();
  for (size_t i = 0; i < b.entries.size(); ++i) {
    BatchEntry& en = b.entries[i];
    if (en.req == kPaddingSlot) continue;
    const Request& q = front_.requests()[en.req];
    if (verifies_drafts(en, q.generated)) {
      work_[i].drafts = static_cast<int16_t>(spec_->k());
      spec_contexts_.push_back(en.context);
    } else {
      spec_prefill_.push_back(work_[i]);
    }
  }
  const double t = spec_->draft_ns(spec_contexts_, spec_prefill_);
  spec_->draft_ns_total += t;
  return t;
}

int64_t ServingSim::accept_drafts(Request& q, int64_t& t, int64_t detok, int64_t stream, LogHistogram::Runs& gaps) {
  const int a = spec_->draw(q.serial, q.generated);
  ++spec_->steps;
  spec_->proposed += spec_->k();
  spec_->accepted += a;
  int64_t delivered = q.last_token_ns;
  const int n = std::min(a, q.output_tokens - q.generated);
  for (int j = 0; j < n; ++j) delivered = deliver_decode_token(q, t, detok, stream, gaps);
  spec_->tokens += 1 + n;
  return delivered;
}

void ServingSim::finish(Request& q, int64_t delivered_ns) {
  replicas_[static_cast<size_t>(q.replica)]->kv.retain(q, q.computed);
  last_activity_ns_ = std::max(last_activity_ns_, delivered_ns);
  front_.answered(q, delivered_ns);
}

void ServingSim::sample() {
  TimeSample s{engine_.now().count_ns(), 0, 0, 0, 0, 0};
  const int engines = static_cast<int>(replicas_.size());
  for (int i = 0; i < engines; ++i) {
    const auto& r = *replicas_[i];
    s.running += static_cast<int64_t>(r.running.size());
    s.waiting += static_cast<int64_t>(r.waiting.size());
    s.swapped += static_cast<int64_t>(r.swapped.size());
    s.kv_occupancy += static_cast<double>(r.kv.used_blocks() + r.kv.cached_blocks()) / static_cast<double>(r.kv.total_blocks());
    s.busy_fraction += busy_[i] ? 1 : 0;
  }
  s.kv_occupancy /= engines;
  s.busy_fraction /= engines;
  samples_.push_back(s);
  // Bounded memory whatever the interval (1ns) or the run's length: past 100k samples keep
  // every other one and sample half as often (the study warns that it did).
  if (samples_.size() >= 100'000) {
    size_t k = 0;
    for (size_t i = 0; i < samples_.size(); i += 2) samples_[k++] = samples_[i];
    samples_.resize(k);
    cfg_.sample_interval_ns *= 2;
  }
}

}  // namespace sluice::serving
