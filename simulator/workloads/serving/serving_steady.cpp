// The steady-decode fast-forward of a replica engine: while nothing but its own decode steps
// can happen, iterations are run inline (decide_inline) and, between sequence ends, on counts
// alone (decode_lazily), with the event path's figures to the byte (ARCHITECTURE.md).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/round.h"
#include "workloads/serving/last_mile.h"
#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

using detail::deliver_decode_token;

bool ServingSim::steady_now(int ri) const {
  const Replica& r = *replicas_[static_cast<size_t>(ri)];
  // (Speculative steps vary their tokens by draws: they go the event path.)
  return fast_forward_ && !spec_ && !busy_[ri] && r.healthy && !r.running.empty() &&
         !(trace_ && trace_->enabled() && trace_iterations_ < cfg_.trace_max_iterations && ri < 64) &&
         schedulers_[static_cast<size_t>(ri)]->steady_decode(r);
}

// The next iteration of an idle replica, decided at now (its Decide event already counted).
// While the replica is in steady decode (nothing waiting or swapped, every running sequence
// past its prompt) and nothing else is due before an iteration ends, the iteration is run
// here to its end: the batch the scheduler would form (each running sequence grows its KV by
// a token, in order, and decodes one), its time from the cost model, its counters, and its
// tokens, with the clock advanced to its end and its IterationEnd and the next Decide counted
// as the events they stand for. Every figure is the one the event path gives (the same
// operations in the same order); anything else (an arrival due, a sequence that cannot grow,
// a traced iteration, pipeline stages or transfers on the fabric) goes the event path.
void ServingSim::decide_inline(int ri) {
  Replica& r = *replicas_[static_cast<size_t>(ri)];
  auto& st = rstats_[static_cast<size_t>(ri)];
  const int64_t detok = cfg_.last_mile.detokenize_ns, stream = cfg_.last_mile.stream_ns;
  // A stretch gives the engine back after this many iterations (as events, the same results),
  // so the run's budgets and interrupt are checked as often as without it (Engine::run checks
  // every 4096 events; each iteration here counts two).
  constexpr int kMaxStretch = 1024;
  // Asked again only after a sequence ended: until then steady_decode's answer holds (its
  // contract), and so does the rest of steady_now (no event has run in between).
  bool steady = false;
  for (int stretch = 0;; ++stretch) {
    if (!steady && !steady_now(ri)) {
      try_start(ri);
      return;
    }
    steady = true;
    const int64_t now = engine_.now().count_ns();
    const size_t n = r.running.size();
    work_.resize(n);
    bool ends = false;
    for (size_t i = 0; i < n; ++i) {
      Request& q = front_.requests()[r.running[i]];
      // Growing is what the scheduler does first, in this order; a sequence that cannot grow
      // (a preemption) is left to it: the growths already done are no-ops when it repeats them.
      if (q.in_prefill() || q.first_token_ns < 0 || !r.kv.grow_to(q, q.computed + 1)) {
        try_start(ri);
        return;
      }
      // (Its fields, not a whole SeqWork: drafts stays 0, as nothing speculative comes here, and
      // its store is saved on this, the hottest loop.)
      work_[i].new_tokens = 1;
      work_[i].context = q.computed;
      work_[i].produces_token = true;
      ends |= q.generated + 1 >= q.output_tokens;
    }
    if (r.kv.offload_pending()) {  // the growth evicted into host memory: a copy to start now, as try_start does
      try_start(ri);
      return;
    }
    account_kv(ri, now);
    const double compute_ns = cost_of(ri).decode_ns(work_);  // iteration_ns: pp = 1 is stage_times' one stage
    if (!std::isfinite(compute_ns) || compute_ns < 0)
      throw std::runtime_error(fmt::format("the cost model returned {} ns for an iteration of {} sequences", compute_ns, n));
    const double extra_ns = 0;  // as an empty batch's: no swap traffic in steady decode
    const int64_t dur_ns = std::max<int64_t>(1, round_ns(compute_ns + extra_ns + cfg_.last_mile.d2h_ns(static_cast<int>(n))));
    const int64_t end = now + dur_ns;
    auto fill_batch = [&]() __attribute__((always_inline)) {  // (inlined: gcc stopped doing so as the function grew)
      // The batch as the scheduler forms it (mech::add of each running sequence), from work_:
      // the requests themselves are not read again.
      Batch& b = batches_[static_cast<size_t>(ri)];
      b.clear();
      b.start_ns = now;
      b.entries.resize(n);
      for (size_t i = 0; i < n; ++i) b.entries[i] = BatchEntry{r.running[i], 1, work_[i].context, true};
      b.decode_entries = static_cast<int>(n);
      b.steady_decode = true;
    };
    if (stretch >= kMaxStretch || !engine_.can_advance_to(end)) {
      // Something is due before it ends (or the stretch is long): the iteration starts as
      // try_start starts it, and its end is an event.
      fill_batch();
      launch_iteration(ri, dur_ns, dur_ns, compute_ns);
      return;
    }
    st.started(0, static_cast<int>(n), n);  // a decode iteration of every running sequence
    st.busy(now, dur_ns, n);
    last_activity_ns_ = std::max(last_activity_ns_, end);
    ++fast_forwarded_;
    engine_.advance_to(end);
    engine_.count_inline_event();  // its IterationEnd
    if (ends) {
      // A sequence ends: the batch ended the usual way.
      fill_batch();
      end_iteration(ri);
      if (busy_[ri] || decide_pending_ns_[ri] == end || !engine_.nothing_due_by(end)) {
        request_schedule(ri);
        return;
      }
      steady = false;
    } else {
      // Every sequence decoded a token and none ends (end_iteration's path for each).
      // Its tokens went out from the iteration's end (the host thread was free by then): each
      // sequence's next gap is then the next iteration's length, which decode_lazily needs.
      const bool from_end = detok_free_ns_[ri] <= end;
      int64_t t = std::max(end, detok_free_ns_[ri]);
      LogHistogram::Runs gaps(gaps_);  // mostly one value: the iteration's length
      // What decode_lazily needs to know of each sequence, gathered while its request is at
      // hand: the token slots left in its last block, and the iterations until one ends.
      const int bs = r.kv.block_size();
      lazy_room_.assign(static_cast<size_t>(bs), 0);
      int64_t far_room = INT64_MAX;  // the fewest slots of those a block or more ahead (Orca reserves whole outputs)
      int32_t until_end = INT32_MAX;
      for (uint32_t id : r.running) {
        Request& q = front_.requests()[id];
        deliver_decode_token(q, t, detok, stream, gaps);
        const int64_t room = static_cast<int64_t>(q.blocks) * bs - q.computed;
        if (room < bs) ++lazy_room_[static_cast<size_t>(room)];
        else far_room = std::min(far_room, room);  // (needs no block for that many iterations)
        until_end = std::min(until_end, q.output_tokens - q.generated);
      }
      gaps.flush();
      st.processed(end, static_cast<int64_t>(n));
      detok_free_ns_[ri] = t;
      engine_.count_inline_event();  // the next Decide: nothing else is due at this instant
      // The iterations before the one in which a sequence ends (until_end - 1 of them), and
      // before one a block or more ahead needs a block.
      const int64_t most = std::min<int64_t>({until_end - 1, far_room, kMaxStretch - stretch - 1});
      if (from_end && most > 0) stretch += decode_lazily(ri, end, static_cast<int>(most));
      continue;
    }
    engine_.count_inline_event();  // the next Decide: nothing else is due at this instant
  }
}

// The steady-decode iterations after decide_inline's, while each changes only counts: every
// sequence decodes one more token (its context one longer, work_ incremented in place), none
// ends, the blocks they grow into are free (no eviction), the host thread's detokenizing of the
// last iteration's tokens ended before this one does, and nothing else is due before it ends.
// Each iteration is then what decide_inline's would be, figure for figure: its time from the
// cost model, the KV taken (lazy_room_ says how many sequences cross a block), the replica's
// counters, every sequence's gap (the iteration's length: record(dur, n), as the n equal adds
// of a Runs give it) and the two events it stands for. The requests themselves are written
// once at the end: computed and generated up by d, the last token's time, the longest gap and
// the blocks. The first iteration that fails a test is left to decide_inline (nothing of it done).
int ServingSim::decode_lazily(int ri, int64_t end, int most) {
  Replica& r = *replicas_[static_cast<size_t>(ri)];
  auto& st = rstats_[static_cast<size_t>(ri)];
  const size_t n = r.running.size();
  const int64_t detok = cfg_.last_mile.detokenize_ns, stream = cfg_.last_mile.stream_ns;
  const int64_t chain = detok * static_cast<int64_t>(n);  // the host thread's time for one iteration's tokens
  const double d2h = cfg_.last_mile.d2h_ns(static_cast<int>(n));
  const size_t bs = lazy_room_.size();
  int d = 0;
  int64_t max_dur = 0;
  while (d < most) {
    const int64_t need = lazy_room_[static_cast<size_t>(d) % bs];  // sequences crossing into a new block
    if (need > r.kv.free_blocks()) break;
    for (SeqWork& w : work_) ++w.context;
    const double compute_ns = cost_of(ri).decode_ns(work_);
    const int64_t dur = std::isfinite(compute_ns) && compute_ns >= 0 ? std::max<int64_t>(1, round_ns(compute_ns + d2h)) : -1;
    if (dur < 0 || chain > dur || !engine_.can_advance_to(end + dur)) {
      for (SeqWork& w : work_) --w.context;
      break;
    }
    r.kv.reserve(need, /*admission=*/false);
    account_kv(ri, end);
    st.started(0, static_cast<int>(n), n);
    st.busy(end, dur, n);
    end += dur;
    last_activity_ns_ = std::max(last_activity_ns_, end);
    ++fast_forwarded_;
    ++run_lazily_;
    engine_.advance_to(end);
    engine_.count_inline_event();  // its IterationEnd
    gaps_.record(dur, n);
    max_dur = std::max(max_dur, dur);
    st.processed(end, static_cast<int64_t>(n));
    detok_free_ns_[ri] = end + chain;
    engine_.count_inline_event();  // the next Decide
    ++d;
  }
  if (d > 0) {
    for (size_t i = 0; i < n; ++i) {
      Request& q = front_.requests()[r.running[i]];
      q.computed += d;
      q.generated += d;
      q.last_token_ns = end + static_cast<int64_t>(i + 1) * detok + stream;
      q.max_gap_ns = std::max(q.max_gap_ns, max_dur);
      const int64_t want = r.kv.blocks_for(q.computed);
      if (want > q.blocks) r.kv.adopt(q, want - q.blocks);
    }
  }
  return d;
}

}  // namespace sluice::serving
