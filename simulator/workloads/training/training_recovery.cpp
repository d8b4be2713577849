// The training job under failures: a failure voids the iteration in flight and loses the work
// since the last checkpoint; the job restarts when its devices are healthy again (or on a
// re-formed TPU slice); a watchdog fails it for good when a transfer makes no progress.
#include "workloads/training/training_job.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "network/pod.h"

namespace sluice::training::detail {

bool TrainingJob::computes_on(const std::vector<int>& devices) const {
  for (int d : devices)
    if (active_[static_cast<size_t>(d)]) return true;
  return false;
}

void TrainingJob::before_devices_fail(World& w, const std::vector<int>& devices) {
  if (!done_ && state_ != State::Recovering && computes_on(devices)) fail_stop(w);
}

void TrainingJob::on_devices_changed(World& w, const std::vector<int>& devices, bool up) {
  if (done_) return;
  // A spare failing (or one coming back) does not stop the job: only a device it computes on.
  if (!up && !computes_on(devices)) return;  // (a failing device it computes on stopped it already: before_devices_fail)
  if (state_ != State::Recovering || restart_pending_ || decide_pending_) return;
  // Decided at the end of the instant, once every failure and repair at this time is known
  // (a rack or several hosts failing together re-form the slice once).
  decide_pending_ = true;
  w.engine().schedule_in(SimTime::zero(), Priority::Schedule, this, kRecover, 0, Generation(gen_));
}

// --- Failures -----------------------------------------------------------------------------
// The work since the last checkpoint (or restart) is kept: it counts as useful.
void TrainingJob::keep_work(int64_t now) {
  res_.useful_s += static_cast<double>(now - mark_ns_) / 1e9;
  mark_ns_ = now;
  kept_iterations_ = iterations_done_;
}

void TrainingJob::write_checkpoint() {
  const auto& storage = world_.storage_nodes();
  const double bytes = checkpoint_bytes_per_device(c_);
  const uint64_t tag = (static_cast<uint64_t>(gen_ & 0xFF) << 56) | (kCheckpointTarget << 32);
  ckpt_left_ = 0;
  progress_ns_ = world_.engine().now().count_ns();
  if (replay_checkpoint(progress_ns_)) return;
  size_t k = 0;
  for (const auto& slot : nodes_)
    for (int node : slot) {
      ++ckpt_left_;
      world_.fabric().start(node, storage[k % storage.size()], bytes, this, tag, k);
      ++k;
    }
  flows_ += k;
}

void TrainingJob::checkpoint_done(Engine& e) {
  const int64_t now = e.now().count_ns();
  if (c_.checkpoint_to_storage) {
    observe_checkpoint_end(e);
    res_.checkpoint_write_s += static_cast<double>(now - ckpt_start_ns_) / 1e9;
  }
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
void TrainingJob::fail_stop(World& w) {
  const int64_t now = w.engine().now().count_ns();
  stop_tape();  // a cut iteration proves nothing
  if (standing_in_) replay_partial(now);
  ++gen_;
  ++res_.failures;
  steady_ = last_alone_ = false;
  skipping_ = 0;
  ckpt_obs_ = ckpt_replaying_ = false;
  cause_ = w.fault_cause().empty() ? std::string("unnamed") : w.fault_cause();
  auto& by = res_.by_cause[cause_];
  ++by.interruptions;
  const double lost = static_cast<double>((state_ == State::Checkpointing ? ckpt_start_ns_ : now) - mark_ns_) / 1e9;
  res_.lost_s += lost;
  by.lost_s += lost;
  // An interrupted checkpoint write is lost with the iterations it would have saved.
  if (state_ == State::Checkpointing) res_.checkpoint_s += static_cast<double>(now - ckpt_start_ns_) / 1e9;
  iterations_done_ = kept_iterations_;
  res_.iteration_s.resize(std::min(res_.iteration_s.size(), static_cast<size_t>(kept_iterations_)));
  // The job's processes are killed and its communicators aborted: every transfer of it stops
  // where it is (its collectives start nothing more, their flows and its own are cut; their
  // bytes stay on the links' ledger as given: FlowSim::cancel).
  // Their flows are cut first, then the collectives buried (a burial may let go of spent ones,
  // so none may still be named by a flow by then).
  std::vector<std::unique_ptr<net::Collective>> cut;
  auto take = [&](std::unique_ptr<net::Collective>& c) {
    if (c) cut.push_back(std::move(c));
  };
  for (auto& st : stages_) {
    for (auto& c : st.tp_collectives) take(c);
    for (auto& c : st.cp_ring) take(c);
    st.tp_collectives.clear();
    st.cp_ring.clear();
  }
  for (auto& c : dp_live_) take(c);
  dp_live_.clear();
  for (auto& x : a2a_) {
    for (auto& c : x.live) take(c);
    x.live.clear();
    for (auto& [oi, round] : x.rounds)
      for (auto& c : round.collectives) take(c);
    x.rounds.clear();
  }
  std::vector<const net::FlowSink*> sinks{this};
  for (auto& c : cut) {
    c->cancel();
    sinks.push_back(c.get());
  }
  std::sort(sinks.begin(), sinks.end());
  w.fabric().cancel([&sinks](const net::FlowSink* s) { return std::binary_search(sinks.begin(), sinks.end(), s); });
  for (auto& c : cut) graveyard_.bury(std::move(c));
  for (auto& st : stages_) {
    st.busy = st.sending = false;
    st.outbox.clear();
  }
  state_ = State::Recovering;
  restart_pending_ = decide_pending_ = false;
  failed_at_ns_ = now;
}

bool TrainingJob::all_up() const {
  for (int d : devices_)
    if (!world_.device_up(d)) return false;
  return true;
}

// Where to train again: the same devices once healthy; on a TPU pod slice, a slice re-formed
// at once from healthy free cubes (OCS: the healthy cubes kept and a spare for each failed
// one; static: any healthy contiguous free block), else the same cubes after repair.
void TrainingJob::recover(World& w) {
  if (done_ || restart_pending_) return;
  if (!all_up() && c_.slice_cubes[0] > 0 && w.slices().is_pod()) reform(w);
  if (!all_up() && !c_.spares.empty()) swap_spares(w);
  if (!all_up()) return;  // waits for the repair (on_devices_changed)
  restart_pending_ = true;
  schedule(kRestart, c_.restart_ns);
}

void TrainingJob::swap_spares(World& w) {
  auto healthy = [&](const std::vector<int>& devs) {
    for (int d : devs)
      if (!w.device_up(d)) return false;
    return true;
  };
  std::vector<int> devs = devices_;
  for (size_t i = 0; i < devs.size(); ++i) {
    if (w.device_up(devs[i])) continue;
    const int g = w.group_of(devs[i]);
    // The failed server's devices in order (a spare is the same size: claimed so).
    std::vector<int> failed;
    for (int d = 0; d < w.device_count(); ++d)
      if (w.group_of(d) == g) failed.push_back(d);
    const int rack = g / w.rack_nodes();
    size_t pick = c_.spares.size();
    for (size_t k = 0; k < c_.spares.size(); ++k) {
      if (!healthy(c_.spares[k])) continue;
      if (pick == c_.spares.size()) pick = k;
      if (w.group_of(c_.spares[k].front()) / w.rack_nodes() == rack) {
        pick = k;
        break;
      }
    }
    if (pick == c_.spares.size()) continue;  // no healthy spare: this server waits for its repair
    const std::vector<int> spare = c_.spares[pick];
    for (int& d : devs) {
      if (w.group_of(d) != g) continue;
      const auto at = std::find(failed.begin(), failed.end(), d) - failed.begin();
      d = spare[static_cast<size_t>(at)];
    }
    c_.spares[pick] = failed;  // the failed server is a spare once repaired
    ++res_.spare_swaps;
  }
  map_devices(devs);
}

void TrainingJob::reform(World& w) {
  const auto g = w.slices().grid();
  const int cubes = g[0] * g[1] * g[2];
  std::vector<char> mine(static_cast<size_t>(cubes), 0), usable(static_cast<size_t>(cubes), 1);
  for (int d : devices_) mine[static_cast<size_t>(w.group_of(d))] = 1;
  for (int d = 0; d < w.device_count(); ++d) {
    const size_t c = static_cast<size_t>(w.group_of(d));
    if (!w.device_up(d) || (!w.holder(d).empty() && w.holder(d) != name())) usable[c] = 0;
  }
  std::vector<int> chosen;
  if (w.slices().has_ocs()) {
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
  w.slices().tear_down(devices_);
  w.release(devices_);
  const auto devs = w.slices().form(chosen, c_.slice_cubes, c_.slice_twisted, name());
  w.claim(devs, name());
  map_devices(devs);
  ++res_.reformed;
}

void TrainingJob::restart_done(Engine& e) {
  restart_pending_ = false;
  if (!all_up()) {  // failed again meanwhile: re-form or wait again
    recover(world_);
    return;
  }
  const int64_t now = e.now().count_ns();
  res_.recovering_s += static_cast<double>(now - failed_at_ns_) / 1e9;
  res_.by_cause[cause_].recovering_s += static_cast<double>(now - failed_at_ns_) / 1e9;
  res_.recover_s.push_back(static_cast<double>(now - failed_at_ns_) / 1e9);
  ++res_.restarts;
  if (world_.trace().enabled()) world_.trace().complete(pid_, 0, "recovery", "fault", failed_at_ns_, now - failed_at_ns_);
  state_ = State::Running;
  mark_ns_ = now;
  progress_ns_ = now;
  if (!resume_steady()) start_iteration();
  if (c_.collective_timeout_ns > 0) arm_watchdog();
}

void TrainingJob::arm_watchdog() {
  watchdog_at_ = world_.engine().now().count_ns() + c_.collective_timeout_ns;
  schedule(kWatchdog, c_.collective_timeout_ns);
}

// A transfer that makes no progress for the timeout (its group cut off by failed links)
// fails the job for good.
void TrainingJob::watchdog(Engine& e) {
  // A job that is done has nothing to watch (the world may go on for other workloads): the
  // watchdog stops, it must not fail a finished job or end the run a second time.
  if (done_) return;
  const int64_t now = e.now().count_ns();
  // During a skip the job progresses at least once an iteration, and an iteration is shorter
  // than the timeout (try_skip): the check would pass.
  // A checkpoint write to storage is watched too (its flows may stall on a failed link).
  const bool writing = state_ == State::Checkpointing && c_.checkpoint_to_storage;
  if ((state_ == State::Running || writing) && skipping_ == 0 && now - progress_ns_ >= c_.collective_timeout_ns) {
    ++gen_;
    res_.failed = true;
    res_.failure_reason = writing ? fmt::format("no progress for {:.3g} s: a checkpoint write is cut off from the storage servers",
                                                c_.collective_timeout_ns / 1e9)
                                  : fmt::format("no progress for {:.3g} s: a transfer's group is cut off from the fabric", c_.collective_timeout_ns / 1e9);
    res_.lost_s += static_cast<double>(now - mark_ns_) / 1e9;
    auto& by = res_.by_cause["collective_timeout"];
    ++by.interruptions;
    by.lost_s += static_cast<double>(now - mark_ns_) / 1e9;
    res_.wall_s = static_cast<double>(now - start_ns_) / 1e9;
    done_ = true;
    stop_tape();
    standing_in_ = false;  // (never while standing in: stand_in_partial needs the iteration shorter than the timeout)
    if (c_.iterations > 0) world_.workload_done();
    return;
  }
  // Re-armed at this generation's events only while running; a failure re-arms it on restart.
  arm_watchdog();
}

}  // namespace sluice::training::detail
