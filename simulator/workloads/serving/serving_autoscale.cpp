// Autoscaling a serving deployment: the pool runs between autoscaling.min_replicas and
// deployment.replicas. Every `interval` the policy compares its signal with its target:
//   queue:        requests waiting (not yet admitted) per serving replica;
//   concurrency:  requests in flight (waiting, running, swapped) per serving replica;
//   utilization:  the serving replicas' busy fraction over the last interval.
// It wants ceil(serving x signal / target) replicas, within [min, most]. Growing starts
// replicas that serve after provision + model_load (a replica being provisioned counts toward
// the pool, so the policy does not order it twice); shrinking drains the highest-numbered
// serving replicas (routers skip them, they finish what they hold) and turns each off once
// it is empty. After either, the policy waits `cooldown` before changing again. Every replica
// provisioning, serving or draining is paid: replica-seconds integrate their count.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

void ServingSim::scale_account(int64_t now) {
  if (now <= scale_last_ns_) return;
  scale_.replica_s += static_cast<double>(scale_paid_) * static_cast<double>(now - scale_last_ns_) / 1e9;
  scale_last_ns_ = now;
}

void ServingSim::scale_start() {
  if (pp_ != 1 || pool_split_ > 0 || faults_enabled_)
    throw std::runtime_error("autoscaling does not yet take pipeline-parallel or disaggregated deployments, or failures");
  const auto& a = cfg_.autoscaling;
  const int n = cfg_.replicas;
  scale_state_.assign(static_cast<size_t>(n), Scale::Off);
  scale_busy_mark_.assign(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    if (r < a.min_replicas) {
      scale_state_[static_cast<size_t>(r)] = Scale::Serving;
    } else {
      replicas_[static_cast<size_t>(r)]->set_health(false);  // off: nothing routed, nothing run
    }
  }
  scale_paid_ = a.min_replicas;
  scale_.most = scale_paid_;
  scale_last_ns_ = engine_.now().count_ns();
  scale_.timeline.emplace_back(scale_last_ns_, scale_paid_);
  engine_.schedule_in(SimTime::ns(a.interval_ns), Priority::Stats, this, kScale);
}

void ServingSim::scale_tick() {
  const auto& a = cfg_.autoscaling;
  const int64_t now = engine_.now().count_ns();
  const int64_t since = now - scale_changed_ns_;
  // Draining replicas that emptied are turned off.
  for (size_t r = 0; r < scale_state_.size(); ++r) {
    Replica& rep = *replicas_[r];
    if (scale_state_[r] == Scale::Draining && rep.outstanding() == 0 && !busy_[r]) {
      scale_account(now);
      scale_state_[r] = Scale::Off;
      rep.set_draining(false);
      rep.set_health(false);
      --scale_paid_;
      scale_.timeline.emplace_back(now, scale_paid_);
    }
  }
  int serving = 0, provisioning = 0;
  double waiting = 0, in_flight = 0, busy = 0;
  for (size_t r = 0; r < scale_state_.size(); ++r) {
    if (scale_state_[r] == Scale::Provisioning) ++provisioning;
    if (scale_state_[r] != Scale::Serving) {
      scale_busy_mark_[r] = rstats_[r].busy_ns;
      continue;
    }
    ++serving;
    waiting += static_cast<double>(replicas_[r]->waiting.size());
    in_flight += static_cast<double>(replicas_[r]->outstanding());
    busy += static_cast<double>(rstats_[r].busy_ns - scale_busy_mark_[r]);
    scale_busy_mark_[r] = rstats_[r].busy_ns;
  }
  if (serving == 0) return;
  using P = ServingConfig::Autoscaling::Policy;
  const double signal = a.policy == P::Queue         ? waiting / serving
                        : a.policy == P::Concurrency ? in_flight / serving
                                                     : busy / (static_cast<double>(a.interval_ns) * serving);
  const int most = cfg_.replicas;
  const int want = std::clamp(static_cast<int>(std::ceil(serving * signal / a.target - 1e-9)), a.min_replicas, most);
  const int pool = serving + provisioning;
  if (signal > a.target && pool < most) scale_.under_provisioned_ns += a.interval_ns;
  if (scale_changed_ns_ >= 0 && since < a.cooldown_ns) return;
  if (want > pool) {
    // Grow: draining replicas serve again first (they are paid for and loaded), then the
    // lowest-numbered replicas that are off start provisioning.
    int add = want - pool;
    scale_account(now);
    for (size_t r = 0; r < scale_state_.size() && add > 0; ++r) {
      if (scale_state_[r] != Scale::Draining) continue;
      scale_state_[r] = Scale::Serving;
      replicas_[r]->set_draining(false);
      --add;
    }
    for (size_t r = 0; r < scale_state_.size() && add > 0; ++r) {
      if (scale_state_[r] != Scale::Off) continue;
      scale_state_[r] = Scale::Provisioning;
      ++scale_paid_;
      --add;
      engine_.schedule_in(SimTime::ns(a.provision_ns + a.model_load_ns), Priority::Fault, this, kScaledUp, static_cast<uint32_t>(r));
    }
    ++scale_.scale_ups;
    scale_changed_ns_ = now;
    scale_.most = std::max<int64_t>(scale_.most, scale_paid_);
    scale_.timeline.emplace_back(now, scale_paid_);
  } else if (want < serving && provisioning == 0) {
    // Shrink: the highest-numbered serving replicas drain.
    int drop = serving - want;
    for (size_t r = scale_state_.size(); r-- > 0 && drop > 0;) {
      if (scale_state_[r] != Scale::Serving) continue;
      scale_state_[r] = Scale::Draining;
      replicas_[r]->set_draining(true);
      --drop;
    }
    ++scale_.scale_downs;
    scale_changed_ns_ = now;
  }
}

void ServingSim::scaled_up(int r) {
  const int64_t now = engine_.now().count_ns();
  if (scale_state_[static_cast<size_t>(r)] != Scale::Provisioning) return;
  scale_state_[static_cast<size_t>(r)] = Scale::Serving;
  Replica& rep = *replicas_[static_cast<size_t>(r)];
  rep.set_draining(false);
  rep.set_health(true);
  kv_last_ns_[static_cast<size_t>(r)] = now;
  scale_busy_mark_[static_cast<size_t>(r)] = rstats_[static_cast<size_t>(r)].busy_ns;
}

}  // namespace sluice::serving
