#include "workloads/serving/frontend.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace sluice::serving {

FrontEnd::FrontEnd(Engine& engine, WorkloadSource& source, FrontEndOptions o, TraceWriter* trace)
    : engine_(engine), source_(source), o_(o), trace_(trace) {
  n_.announced = source_.total_requests();
  closed_loop_ = source_.arrival().kind == ArrivalSpec::Kind::ClosedLoop;
  // Requests are addressed by index, never by a pointer kept across a push_back, so the
  // vector may grow; reserve only a first slab.
  reqs_.reserve(static_cast<size_t>(std::min<int64_t>(n_.announced, 1 << 20)));
}

void FrontEnd::start(const std::function<void(double)>& progress, std::function<void()> on_done) {
  if (!dispatcher_) throw std::logic_error("internal: the serving front end has no dispatcher");
  progress_ = progress;
  on_done_ = std::move(on_done);
  if (closed_loop_) {
    for (int c = 0; c < source_.arrival().clients; ++c) start_conversation(0);
  } else {
    start_conversation(0);
  }
}

// Fetches the next conversation from the source; open-loop sources chain their arrivals.
void FrontEnd::start_conversation(int64_t now_ns) {
  if (source_done_) return;
  auto c = source_.next(now_ns);
  if (!c) {
    source_done_ = true;
    return;
  }
  // Conversation slots are reused once a conversation's last turn has ended.
  uint32_t idx;
  if (!free_convs_.empty()) {
    idx = free_convs_.back();
    free_convs_.pop_back();
    convs_[idx] = std::move(*c);
    conv_number_[idx] = conversations_made_++;
  } else {
    idx = static_cast<uint32_t>(convs_.size());
    convs_.push_back(std::move(*c));
    conv_number_.push_back(conversations_made_++);
  }
  const int64_t t = std::max(now_ns, convs_[idx].arrival_ns);
  engine_.schedule_at(SimTime::ns(t), Priority::Arrival, this, kConversation, idx);
}

uint32_t FrontEnd::make_request(uint32_t conv, int turn, int64_t arrival_ns, int32_t history) {
  const auto& spec = convs_[conv].turns[static_cast<size_t>(turn)];
  Request q;
  q.serial = static_cast<uint32_t>(n_.made);
  q.conv_slot = conv;
  q.conversation = conv_number_[conv];
  q.turn = static_cast<uint16_t>(turn);
  q.turns_total = static_cast<uint16_t>(convs_[conv].turns.size());
  q.arrival_ns = arrival_ns;
  q.input_tokens = spec.input_tokens;
  q.output_tokens = spec.output_tokens;
  q.prefix_id = spec.prefix_id;
  q.class_id = spec.class_id;
  q.priority = spec.class_id >= 0 ? source_.classes()[static_cast<size_t>(spec.class_id)].priority : 0;
  q.prefix_tokens = spec.prefix_tokens;
  // Later turns resend the history; keep it within the model's context (oldest dropped).
  q.history_tokens = std::max(0, std::min(history, o_.max_context - spec.input_tokens - spec.output_tokens));
  q.history_truncated = q.history_tokens < history;
  if (n_.made >= n_.announced) throw std::logic_error("internal: more requests than the workload announced");
  ++n_.made;
  // A free slot (a request that ended) if there is one, else a new one.
  if (!free_slots_.empty()) {
    q.id = free_slots_.back();
    free_slots_.pop_back();
    reqs_[q.id] = q;
    slot_used_[q.id] = 1;
  } else {
    q.id = static_cast<uint32_t>(reqs_.size());
    reqs_.push_back(q);
    slot_used_.push_back(1);
  }
  n_.live_high_water = std::max(n_.live_high_water, ++n_.live);
  engine_.schedule_at(SimTime::ns(arrival_ns), Priority::Arrival, this, kArrival, q.id);
  return q.id;
}

void FrontEnd::on_event(Engine& e, uint32_t kind, uint32_t arg) {
  const int64_t now = e.now().count_ns();
  switch (kind) {
    case kConversation: {
      const auto& c = convs_[arg];
      const int64_t t = c.turn_arrivals_ns.empty() ? now : std::max(now, c.turn_arrivals_ns[0]);
      make_request(arg, 0, t, 0);
      if (!closed_loop_) start_conversation(now);
      break;
    }
    case kArrival:
      on_arrival(arg);
      break;
    default:
      throw std::logic_error(fmt::format("internal: the serving front end got event kind {}", kind));
  }
}

void FrontEnd::on_arrival(uint32_t id) {
  Request& q = reqs_[id];
  if (first_arrival_ns_ < 0) first_arrival_ns_ = q.arrival_ns;
  if (o_.max_in_flight > 0 && n_.live > o_.max_in_flight) {
    // Overload: more requests in flight than the deployment may hold; this one is turned
    // away at once (as a load balancer sheds load), so memory stays bounded.
    reject(q, Rejection::Overload);
    return;
  }
  dispatcher_->dispatch(id);
}

// What every ending shares: counted, the sink told, the run told when it was the last.
void FrontEnd::ended(Request& q) {
  q.state = ReqState::Done;
  ++n_.completed;
  if (sink_) sink_->ended(q.serial, q.class_id);
  if (n_.completed == n_.announced && on_done_) on_done_();
}

void FrontEnd::reject(Request& q, Rejection why) {
  const uint32_t slot = q.id;
  q.rejected = true;
  ++(why == Rejection::Overload ? n_.rejected_overload : why == Rejection::Late ? n_.rejected_late : n_.rejected_too_long);
  ended(q);
  next_for_client(q, engine_.now().count_ns());
  release(slot);
}

void FrontEnd::fail(Request& q, int64_t now_ns) {
  const uint32_t slot = q.id;
  q.failed = true;
  ++n_.failed;
  last_failure_ns_ = std::max(last_failure_ns_, now_ns);
  ended(q);
  next_for_client(q, now_ns);
  release(slot);
}

void FrontEnd::answered(Request& q, int64_t delivered_ns) {
  q.state = ReqState::Done;
  ++n_.completed;
  ++n_.answered;
  // Time order of every answered request (checked as it ends: its slot is reused after).
  if (!(q.arrival_ns <= q.first_scheduled_ns && q.first_scheduled_ns <= q.first_token_ns && q.first_token_ns <= q.last_token_ns))
    throw std::logic_error(fmt::format("latency invariant broken: request {} arrived at {} ns, was first scheduled at {} ns, had its "
                                       "first token at {} ns and its last at {} ns",
                                       q.serial, q.arrival_ns, q.first_scheduled_ns, q.first_token_ns, q.last_token_ns));
  if (sink_) {
    ServingRequestRecord rec;
    rec.id = q.serial;
    rec.conversation = q.conversation;
    rec.turn = q.turn;
    rec.replica = q.replica;
    rec.arrival_ns = q.arrival_ns;
    rec.first_scheduled_ns = q.first_scheduled_ns;
    rec.first_token_ns = q.first_token_ns;
    rec.last_token_ns = q.last_token_ns;
    rec.max_gap_ns = q.max_gap_ns;
    rec.input_tokens = q.input_tokens;
    rec.history_tokens = q.history_tokens;
    rec.cached_tokens = q.cached_tokens;
    rec.output_tokens = q.output_tokens;
    rec.preemptions = q.preemptions;
    rec.prefix_id = q.prefix_id;
    rec.class_id = q.class_id;
    rec.prefix_tokens = q.prefix_tokens;
    sink_->answered(rec);
  }
  if (n_.completed == n_.announced && on_done_) on_done_();
  last_delivery_ns_ = std::max(last_delivery_ns_, delivered_ns);
  if (trace_ && trace_->enabled() && static_cast<int64_t>(q.serial) < o_.trace_max_requests) trace_request(q);
  if (progress_ && (n_.completed % 1024 == 0)) progress_(static_cast<double>(n_.completed) / static_cast<double>(n_.announced));
  next_for_client(q, delivered_ns);
}

void FrontEnd::trace_request(const Request& q) {
  const int tid = static_cast<int>(q.serial);
  trace_->name_thread(o_.trace_pid, tid, fmt::format("request {}", q.serial));
  trace_->complete(o_.trace_pid, tid, "queued", "request", q.arrival_ns, q.first_scheduled_ns - q.arrival_ns);
  trace_->complete(o_.trace_pid, tid, "prefill", "request", q.first_scheduled_ns, q.first_token_ns - q.first_scheduled_ns,
                   {{"input", static_cast<double>(q.input_tokens)}, {"history", static_cast<double>(q.history_tokens)},
                    {"cached", static_cast<double>(q.cached_tokens)}});
  trace_->complete(o_.trace_pid, tid, "decode", "request", q.first_token_ns, q.last_token_ns - q.first_token_ns,
                   {{"output", static_cast<double>(q.output_tokens)}, {"preemptions", static_cast<double>(q.preemptions)}});
}

void FrontEnd::release(uint32_t slot) {
  if (!slot_used_[slot]) throw std::logic_error(fmt::format("internal: request slot {} released twice", slot));
  slot_used_[slot] = 0;
  free_slots_.push_back(slot);
  ++n_.released;
  --n_.live;
}

void FrontEnd::release_conversation(uint32_t conv_slot) {
  convs_[conv_slot] = ConversationSpec{};  // its turns' memory goes now
  free_convs_.push_back(conv_slot);
}

// The client sees the answer at `delivered_ns`; its next turn (or next conversation) follows.
void FrontEnd::next_for_client(const Request& q, int64_t delivered_ns) {
  const uint32_t cs = q.conv_slot;
  const auto& conv = convs_[cs];
  const int next_turn = static_cast<int>(q.turn) + 1;
  if (next_turn < static_cast<int>(conv.turns.size())) {
    int64_t at = delivered_ns + source_.think_time_ns();
    if (!conv.turn_arrivals_ns.empty()) at = std::max(delivered_ns, conv.turn_arrivals_ns[static_cast<size_t>(next_turn)]);
    make_request(cs, next_turn, at, q.prompt_len() + q.output_tokens);  // q may move: the table can grow
    return;
  }
  release_conversation(cs);  // its last turn ended
  if (closed_loop_) start_conversation(delivered_ns);
}

}  // namespace sluice::serving
