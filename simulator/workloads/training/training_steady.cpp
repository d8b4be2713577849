// The training job's steady-state fast-forward (see the comment above Counts in training_job.h).
#include "workloads/training/training_job.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "engine/rng.h"
#include "engine/run_control.h"

namespace sluice::training::detail {

auto TrainingJob::counts() const -> Counts {
  return Counts{world_.engine().events_processed(), side_events_, flows_, dp_ns_total_, a2a_ns_total_, cp_ns_total_, world_.fabric().ledger()};
}

auto TrainingJob::span(const Counts& from, const Counts& to, int64_t ns) -> Span {
  Span s;
  s.ns = ns;
  s.events = (to.events - from.events) - (to.side - from.side);  // the watchdog's are no work's
  s.flows = to.flows - from.flows;
  s.fabric = net::FlowLedger::between(from.fabric, to.fabric);
  return s;
}

void TrainingJob::observe_start() {
  start_alone_ = false;
  // Completions rounded to an absolute grid (a completion quantum): a shift by an iteration may
  // not repeat, and a checkpoint moves the phase too, so no skip; nothing to observe.
  if (!RunControl::get().fast_forward() || world_.fabric().quantum_ns() > 1) return;
  start_alone_ = world_.fabric().still();
  key_at_start_ok_ = false;
  if (!start_alone_) return;
  others_at_start_ = world_.engine().next_event_excluding(this);
  start_counts_ = counts();
  if (world_.fabric().empty()) {
    key_at_start_ = state_key();
    key_at_start_ok_ = true;
    start_tape();
  }
}

uint64_t TrainingJob::state_key() const {
  uint64_t h = digest_mix(world_.fabric().shape_digest(), devices_.size());
  for (int d : devices_) h = digest_mix(digest_mix(h, static_cast<uint64_t>(d)), std::bit_cast<uint64_t>(world_.device_slowdown(d)));
  return h;
}

bool TrainingJob::resume_steady() {
  if (!proven_ok_ || !RunControl::get().fast_forward() || world_.fabric().quantum_ns() > 1 || !world_.fabric().empty()) return false;
  Engine& e = world_.engine();
  const int64_t now = e.now().count_ns();
  const int64_t others = e.next_event_excluding(this);
  if (others <= now || state_key() != proven_key_) return false;
  last_ = proven_;
  steady_ = last_alone_ = true;
  clean_until_ = others;
  if (faults_ && c_.collective_timeout_ns > 0) watchdog_at_ = now + c_.collective_timeout_ns;  // as arm_watchdog sets it next
  if (try_skip()) {
    ++res_.resumed;
    return true;
  }
  steady_ = last_alone_ = false;
  return false;
}

void TrainingJob::observe_end(int64_t now, double bubble_term) {
  const bool alone = start_alone_ && others_at_start_ > now;
  start_alone_ = false;
  std::unique_ptr<IterationTape> tape = stop_tape();
  if (!alone) {
    last_alone_ = steady_ = false;
    return;
  }
  const Counts c = counts();
  Steady r;
  r.Span::operator=(span(start_counts_, c, now - iter_start_ns_));
  r.dp_ns = c.dp_ns - start_counts_.dp_ns;
  r.a2a_ns = c.a2a_ns - start_counts_.a2a_ns;
  r.cp_ns = c.cp_ns - start_counts_.cp_ns;
  r.bubble = bubble_term;
  r.busy = res_.stage_busy_fraction;
  steady_ = last_alone_ && r == last_;
  last_ = std::move(r);
  last_alone_ = true;
  if (steady_ && key_at_start_ok_ && (!proven_ok_ || proven_key_ != key_at_start_)) {
    proven_ = last_;
    proven_key_ = key_at_start_;
    proven_ok_ = true;
  }
  if (steady_ && key_at_start_ok_) keep_tape(std::move(tape), last_);
  clean_until_ = others_at_start_;  // nothing else has acted since this iteration started
}

void TrainingJob::next_iteration() {
  if (try_skip()) return;
  // After an iteration another handler's event cut into (a failure elsewhere, a repair), the
  // world may be as the proven iteration found it again: no two iterations to prove it anew.
  if (!steady_ && resume_steady()) return;
  start_iteration();
}

// Counts iterations at once when the last one is known to repeat (see above). False: run
// the next one.
bool TrainingJob::try_skip() {
  if (!steady_) return false;
  Engine& e = world_.engine();
  const int64_t now = e.now().count_ns();
  if (now >= clean_until_) {  // another handler may have acted since (during a checkpoint write)
    steady_ = last_alone_ = false;
    return false;
  }
  const int64_t T = last_.ns;
  if (T <= 0) return false;
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
  at_most((std::numeric_limits<int64_t>::max() - now) / T - 1);  // the skip's end stays representable
  at_most(int64_t{1} << 24);  // at most 16 M iterations a skip (each is recorded); a longer run takes several
  // The live watchdog fires every timeout; none may fall on the skip's end (the order of two
  // events at one instant would differ from the full simulation's).
  if (faults_ && c_.collective_timeout_ns > 0)
    while (n > 0 && now + n * T >= watchdog_at_ && (now + n * T - watchdog_at_) % c_.collective_timeout_ns == 0) --n;
  if (n <= 0) return false;
  skipping_ = n;
  schedule(kSkipDone, n * T);
  return true;
}

void TrainingJob::skip_done(Engine& e) {
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
    a2a_ns_total_ += r.a2a_ns;
    cp_ns_total_ += r.cp_ns;
    ++iterations_done_;
    ++measured_;
  }
  res_.fast_forwarded += n;
  res_.stage_busy_fraction = r.busy;
  // Each skipped iteration into the busy profile as iteration_end puts it (the same sums to the
  // bit as the simulated iterations').
  double mean_busy = 0;
  for (double f : r.busy) mean_busy += f;
  mean_busy /= c_.pp;
  busy_profile_.add_repeated(e.now().count_ns() - n * r.ns, r.ns, n, mean_busy);
  res_.bubble_fraction = bubble_sum_ / measured_;
  res_.dp_allreduce_ms = static_cast<double>(dp_ns_total_) / measured_ / 1e6;
  res_.alltoall_ms = static_cast<double>(a2a_ns_total_) / measured_ / 1e6;
  res_.cp_exposed_ms = static_cast<double>(cp_ns_total_) / measured_ / 1e6;
  const int64_t now = e.now().count_ns();
  iter_start_ns_ = now - r.ns;
  progress_ns_ = now;
  after_iteration(now);
}

bool TrainingJob::replay_checkpoint(int64_t now) {
  ckpt_obs_ = ckpt_replaying_ = false;
  net::FlowSim& fabric = world_.fabric();
  if (!RunControl::get().fast_forward() || fabric.quantum_ns() > 1 || !fabric.empty() || world_.trace().enabled()) return false;
  Engine& e = world_.engine();
  const uint64_t key = state_key();
  const int64_t others = e.next_event_excluding(this);
  const int64_t D = ckpt_rec_.ns, end = now + D;
  bool ok = ckpt_proven_ && key == ckpt_rec_key_ && D > 0 && end < others && end <= e.horizon_ns();
  // The watchdog: a write shorter than its timeout never trips it (the full write moves its
  // progress mark at every arrival, this one only at its end), and none of its instants may
  // fall on the write's end (two events at one instant would run in another order).
  if (ok && faults_ && c_.collective_timeout_ns > 0)
    ok = D < c_.collective_timeout_ns && !(end >= watchdog_at_ && (end - watchdog_at_) % c_.collective_timeout_ns == 0);
  if (ok) {
    ckpt_replaying_ = true;
    ++res_.checkpoints_replayed;
    schedule(kCheckpointDone, D);
    return true;
  }
  ckpt_obs_ = true;
  ckpt_obs_key_ = key;
  ckpt_obs_others_ = others;
  ckpt_obs_counts_ = counts();
  return false;
}

void TrainingJob::observe_checkpoint_end(Engine& e) {
  const int64_t now = e.now().count_ns();
  if (ckpt_replaying_) {
    ckpt_replaying_ = false;
    e.count_inline_events(ckpt_rec_.events - 1);  // this event stands for the write's last arrival
    world_.fabric().replay(ckpt_rec_.fabric, 1);
    flows_ += ckpt_rec_.flows;
    progress_ns_ = now;
    return;
  }
  if (!ckpt_obs_) return;
  ckpt_obs_ = false;
  if (ckpt_obs_others_ <= now) {  // another handler may have acted during it
    ckpt_rec_ok_ = ckpt_proven_ = false;
    return;
  }
  Span r = span(ckpt_obs_counts_, counts(), now - ckpt_start_ns_);
  ckpt_proven_ = ckpt_rec_ok_ && ckpt_rec_key_ == ckpt_obs_key_ && r == ckpt_rec_;
  ckpt_rec_ = std::move(r);
  ckpt_rec_key_ = ckpt_obs_key_;
  ckpt_rec_ok_ = true;
}

}  // namespace sluice::training::detail
