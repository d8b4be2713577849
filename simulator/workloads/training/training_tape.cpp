// Partial iterations stood for from tape (see training_tape.h and ARCHITECTURE.md, training
// fast-forward). A failure that cuts an iteration short at offset tau used to cost the
// simulation of the iteration up to tau (at 16,384 GPUs about a second, half an iteration's
// million flows, for every one of a 54-day run's 432 interruptions). The iteration is a
// function of the world's state at its start (the proof the fast-forward rests on), and a
// failure stops every transfer of the job at once (FlowSim::cancel), so what the simulated
// part leaves behind is only what it counted: the events, the flows and the fabric's ledger
// of its instants before tau. The proven iteration's tape holds those.
#include "workloads/training/training_tape.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "engine/run_control.h"
#include "workloads/training/training_job.h"

namespace sluice::training::detail {

namespace {

void put_varint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

uint64_t get_varint(const std::vector<uint8_t>& in, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t b = in[at++];
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

}  // namespace

IterationTape::IterationTape(int64_t start_ns, std::function<Scalars()> read)
    : start_ns_(start_ns), cur_ns_(start_ns), last_ns_(start_ns), read_(std::move(read)) {
  base_ = last_ = read_();
}

void IterationTape::close_instant() {
  const Scalars now = read_();
  uint64_t mask = 0;
  for (size_t i = 0; i < kScalars; ++i)
    if (now[i] != last_[i]) mask |= uint64_t{1} << i;
  put_varint(stream_, static_cast<uint64_t>(cur_ns_ - last_ns_));
  put_varint(stream_, mask);
  for (size_t i = 0; i < kScalars; ++i)
    if (mask >> i & 1) put_varint(stream_, now[i] - last_[i]);
  last_ = now;
  last_ns_ = cur_ns_;
  ++instants_;
}

void IterationTape::before_event(int64_t t_ns) {
  if (t_ns == cur_ns_) return;
  close_instant();
  cur_ns_ = t_ns;
}

void IterationTape::on_start(std::span<const int> path, net::FixedSum bytes) {
  if (bytes < 0 || bytes > std::numeric_limits<int64_t>::max()) ok_ = false;
  std::string key(reinterpret_cast<const char*>(path.data()), path.size() * sizeof(int));
  const auto [it, fresh] = path_ids_.try_emplace(std::move(key), static_cast<uint32_t>(paths_.size()));
  if (fresh) paths_.emplace_back(path.begin(), path.end());
  flow_path_.push_back(it->second);
  flow_bytes_.push_back(static_cast<int64_t>(bytes));
}

void IterationTape::end() { close_instant(); }

IterationTape::Part IterationTape::before(int64_t ns, size_t links) const {
  Scalars c{};
  size_t at = 0;
  int64_t t = start_ns_;
  while (at < stream_.size()) {
    size_t next = at;
    t += static_cast<int64_t>(get_varint(stream_, next));
    if (t - start_ns_ >= ns) break;
    const uint64_t mask = get_varint(stream_, next);
    for (size_t i = 0; i < kScalars; ++i)
      if (mask >> i & 1) c[i] += get_varint(stream_, next);
    at = next;
  }
  Part p{c[0], c[1], static_cast<int64_t>(c[2]), static_cast<int64_t>(c[3]), static_cast<int64_t>(c[4]), {}};
  for (size_t i = 0; i < kFabric; ++i) p.fabric.counts[i] = c[5 + i];
  p.fabric.link_bytes.assign(links, 0);
  const size_t flows = std::min<size_t>(c[5], flow_path_.size());  // FlowStats::started: one per flow (part) begun
  for (size_t f = 0; f < flows; ++f) {
    const net::FixedSum b = flow_bytes_[f];
    p.fabric.bytes += b;
    for (int l : paths_[flow_path_[f]])
      if (static_cast<size_t>(l) < links) p.fabric.link_bytes[static_cast<size_t>(l)] += b;
  }
  return p;
}

size_t IterationTape::memory_bytes() const {
  size_t n = stream_.capacity() + flow_path_.capacity() * sizeof(uint32_t) + flow_bytes_.capacity() * sizeof(int64_t);
  for (const auto& p : paths_) n += p.capacity() * sizeof(int) * 2 + 64;
  return n;
}

// --- The job's side -----------------------------------------------------------------------

IterationTape::Scalars TrainingJob::tape_counts() const {
  IterationTape::Scalars s{};
  s[0] = world_.engine().events_processed() - side_events_;
  s[1] = flows_;
  s[2] = static_cast<uint64_t>(dp_ns_total_);
  s[3] = static_cast<uint64_t>(a2a_ns_total_);
  s[4] = static_cast<uint64_t>(cp_ns_total_);
  const net::FlowStats& st = world_.fabric().stats();
  for (size_t i = 0; i < IterationTape::kFabric; ++i) s[5 + i] = st.*net::FlowLedger::kSummed[i];
  return s;
}

// Called where observe_start found the iteration starting alone on an empty fabric in state
// key_at_start_: tapes it when a failure may later cut one like it short (a world with faults)
// and no tape of this state is kept yet.
void TrainingJob::start_tape() {
  if (!faults_ || (tape_ && tape_key_ == key_at_start_)) return;
  Engine& e = world_.engine();
  net::FlowSim& fabric = world_.fabric();
  if (e.tap() || fabric.start_log()) return;  // another job tapes
  taping_ = std::make_unique<IterationTape>(e.now().count_ns(), [this] { return tape_counts(); });
  taping_key_ = key_at_start_;
  e.set_tap(taping_.get());
  fabric.set_start_log(taping_.get());
}

std::unique_ptr<IterationTape> TrainingJob::stop_tape() {
  if (!taping_) return nullptr;
  if (world_.engine().tap() == taping_.get()) world_.engine().set_tap(nullptr);
  if (world_.fabric().start_log() == taping_.get()) world_.fabric().set_start_log(nullptr);
  return std::move(taping_);
}

// The iteration just observed (r) is the proven one: its tape is kept when it counted exactly
// what the iteration did (every counter, the bytes and each link's bytes).
void TrainingJob::keep_tape(std::unique_ptr<IterationTape> t, const Steady& r) {
  if (!t || !t->ok() || !proven_ok_ || proven_key_ != taping_key_ || !(r == proven_)) return;
  t->end();
  const IterationTape::Part all = t->total(r.fabric.link_bytes.size());
  const bool same = all.events == r.events && all.flows == r.flows && all.dp_ns == r.dp_ns && all.a2a_ns == r.a2a_ns && all.cp_ns == r.cp_ns &&
                    all.fabric == r.fabric;
  if (!same) return;
  res_.tape_instants = static_cast<int64_t>(t->instants());
  res_.tape_flows = static_cast<int64_t>(t->flows());
  res_.tape_mib = static_cast<double>(t->memory_bytes()) / (1 << 20);
  tape_ = std::move(t);
  tape_key_ = taping_key_;
}

// At an iteration's start: when the next thing that happens in the world besides this job is a
// failure of one of its devices before the iteration would end, and the world is as the taped
// iteration found it, nothing is simulated: the job stands for the iteration up to that failure
// (replay_partial counts it there). The other conditions are the fast-forward's.
bool TrainingJob::stand_in_partial() {
  if (!tape_ || !proven_ok_ || tape_key_ != proven_key_ || !RunControl::get().fast_forward()) return false;
  if (world_.trace().enabled() && iterations_done_ < 2) return false;  // the first two iterations' ops are traced
  // The watchdog fires as in the full simulation only if no interval it checks can pass without
  // progress: the iteration (and so the stand-in up to the failure) shorter than its timeout, as
  // try_skip needs too (the stand-in moves no progress mark).
  if (faults_ && c_.collective_timeout_ns > 0 && proven_.ns >= c_.collective_timeout_ns) return false;
  net::FlowSim& fabric = world_.fabric();
  if (fabric.quantum_ns() > 1 || !fabric.empty()) return false;
  Engine& e = world_.engine();
  const int64_t now = e.now().count_ns();
  const auto next = e.next_other_event(this);
  if (!next || next->priority != Priority::Fault || next->time_ns <= now || next->time_ns - now >= proven_.ns || next->time_ns > e.horizon_ns())
    return false;
  const auto* process = dynamic_cast<const FaultProcess*>(next->target);
  const auto comp = process ? process->failing(next->kind, next->arg) : std::nullopt;
  if (!comp) return false;
  std::vector<int> mine;
  for (int d : world_.devices_failing(comp->first, comp->second))
    if (world_.holder(d) == name()) mine.push_back(d);
  if (!computes_on(mine) || state_key() != proven_key_) return false;
  standing_in_ = true;
  stand_in_start_ = now;
  iter_start_ns_ = now;
  progress_ns_ = now;
  schedule(kPartialGuard, next->time_ns - now + 1);  // void once the failure came (fail_stop)
  return true;
}

void TrainingJob::replay_partial(int64_t now) {
  standing_in_ = false;
  net::FlowSim& fabric = world_.fabric();
  const IterationTape::Part p = tape_->before(now - stand_in_start_, fabric.ledger_links());
  world_.engine().count_inline_events(p.events);
  flows_ += p.flows;
  dp_ns_total_ += p.dp_ns;
  a2a_ns_total_ += p.a2a_ns;
  cp_ns_total_ += p.cp_ns;
  fabric.replay(p.fabric, 1);
  ++res_.partials_replayed;
}

}  // namespace sluice::training::detail
