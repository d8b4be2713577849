// An iteration on tape: what a training job and the fabric had counted at the end of each
// instant of one simulated iteration, and every flow it started (route and bytes). The job
// tapes the iteration it proves steady (training_job.h, Counts); when a failure will cut a
// later iteration of that state short at offset tau, the job stands for that iteration up to
// the failure instead of simulating it: the counts of the instants before tau, added at once
// (training_tape.cpp, TrainingJob::stand_in_partial).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "network/flow.h"

namespace sluice::training::detail {

class IterationTape final : public EventTap, public net::FlowStartLog {
 public:
  // The counters taped, each a running total that only grows: the job's events (the
  // watchdog's left out), its flows, its DP, all-to-all and context-parallel time, and the
  // fabric's summed counters (FlowLedger::kSummed, in that order).
  static constexpr size_t kFabric = std::size(net::FlowLedger::kSummed);
  static constexpr size_t kScalars = 5 + kFabric;
  using Scalars = std::array<uint64_t, kScalars>;

  // Tapes from now (`start_ns`, within the event that starts the iteration), the counters read
  // by `read` at the end of each instant.
  IterationTape(int64_t start_ns, std::function<Scalars()> read);
  void before_event(int64_t t_ns) override;
  void on_start(std::span<const int> path, net::FixedSum bytes) override;
  // The iteration ended (now): the last instant is closed (as far as it went).
  void end();

  // What the tape had counted (since its start) by the end of its last instant before offset
  // `ns` from its start: the counters, and the bytes and per-link bytes its flows started by
  // then were given (links: the fabric's link count).
  struct Part {
    uint64_t events = 0, flows = 0;
    int64_t dp_ns = 0, a2a_ns = 0, cp_ns = 0;
    net::FlowLedger fabric;  // the fabric's counters, bytes and per-link bytes
  };
  Part before(int64_t ns, size_t links) const;
  // Everything it counted, as before() past its end.
  Part total(size_t links) const { return before(INT64_MAX, links); }
  // False when a flow's bytes do not fit the tape (over 2^46 bytes).
  bool ok() const { return ok_; }
  size_t memory_bytes() const;
  size_t instants() const { return instants_; }
  size_t flows() const { return flow_path_.size(); }

 private:
  void close_instant();
  int64_t start_ns_, cur_ns_, last_ns_;
  std::function<Scalars()> read_;
  Scalars base_{}, last_{};
  // Per closed instant: its offset from the previous one, a mask of the counters that grew and
  // their growth, each a LEB128 varint.
  std::vector<uint8_t> stream_;
  // Per flow started, in order: its route (an index into paths_) and its bytes (fixed point).
  std::vector<uint32_t> flow_path_;
  std::vector<int64_t> flow_bytes_;
  std::vector<std::vector<int>> paths_;
  std::unordered_map<std::string, uint32_t> path_ids_;
  size_t instants_ = 0;
  bool ok_ = true;
};

}  // namespace sluice::training::detail
