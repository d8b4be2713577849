// The serving front end: the load and the requests' lives outside the replicas.
//
// It draws conversations from the workload source (open loop: each arrival brings the next;
// closed loop: a client's next conversation starts when its last ended), turns them into
// requests (a turn resends the conversation's history), keeps the request table (a slot is
// reused once its request ended, so memory follows the requests in flight), admits or sheds
// each arrival (the in-flight bound), and hands the admitted ones to the global scheduler
// (RequestDispatcher). Every way a request ends goes through it: answered (the record to the
// sink, the request's trace, the client's next turn), rejected, failed; and so do the counts
// that request conservation is checked against.
//
// What it does not do: choose a replica (the global scheduler), run iterations (the replica
// engine, ServingSim), or recover replicas (serving_recovery.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine.h"
#include "recorder/serving_results.h"
#include "recorder/recorder.h"
#include "workloads/serving/request.h"
#include "workloads/serving/workload.h"

namespace sluice::serving {

// Where admitted requests go: the global scheduler (which replica, or parked until one is).
class RequestDispatcher {
 public:
  virtual ~RequestDispatcher() = default;
  virtual void dispatch(uint32_t id) = 0;
};

struct FrontEndOptions {
  int max_context = 0;             // a turn's history is cut to fit it (oldest dropped)
  int64_t max_in_flight = 0;       // an arrival finding more in flight is shed (0: no bound)
  int trace_pid = 2;               // requests' Perfetto process
  int trace_max_requests = 0;      // requests traced
};

// Counts of requests by how they ended, and the table's use.
struct RequestCounts {
  int64_t announced = 0;  // what the workload source will issue in all
  int64_t made = 0, released = 0;
  int64_t completed = 0;  // ended, however
  int64_t answered = 0, rejected_too_long = 0, rejected_overload = 0, rejected_late = 0, failed = 0;
  int64_t live = 0, live_high_water = 0;
};

class FrontEnd final : public EventHandler {
 public:
  FrontEnd(Engine& engine, WorkloadSource& source, FrontEndOptions o, TraceWriter* trace);
  void connect(RequestDispatcher* d) { dispatcher_ = d; }
  void set_sink(RequestSink* sink) { sink_ = sink; }
  // The first conversations (every closed-loop client's, or the open loop's first).
  void start(const std::function<void(double)>& progress, std::function<void()> on_done);
  void on_event(Engine& e, uint32_t kind, uint32_t arg) override;

  std::vector<Request>& requests() { return reqs_; }
  const std::vector<Request>& requests() const { return reqs_; }
  bool slot_used(size_t slot) const { return slot_used_[slot] != 0; }

  // A request answered: its last token reached the client at `delivered_ns`. Recorded, and
  // the client's next turn follows; its slot stays taken until release() (the replica's
  // queues may still name it).
  void answered(Request& q, int64_t delivered_ns);
  // A request that ended without an answer: too long for any replica, shed as overload, or
  // shed because its class's TTFT objective passed before it was first scheduled. Counted,
  // its client goes on, its slot is released.
  enum class Rejection { TooLong, Overload, Late };
  void reject(Request& q, Rejection why);
  // Given up (no healthy replica took it within the failover timeout); its slot is released.
  void fail(Request& q, int64_t now_ns);
  // Ends a request's hold on its slot.
  void release(uint32_t slot);

  const RequestCounts& counts() const { return n_; }
  bool all_ended() const { return n_.completed >= n_.announced; }
  int64_t conversation_slots() const { return static_cast<int64_t>(convs_.size()); }
  int64_t first_arrival_ns() const { return first_arrival_ns_; }
  int64_t last_delivery_ns() const { return last_delivery_ns_; }
  int64_t last_failure_ns() const { return last_failure_ns_; }

 private:
  enum Kind : uint32_t { kConversation = 1, kArrival };
  void start_conversation(int64_t now_ns);
  uint32_t make_request(uint32_t conv, int turn, int64_t arrival_ns, int32_t history);
  void on_arrival(uint32_t id);
  void ended(Request& q);
  void next_for_client(const Request& q, int64_t at_ns);
  void release_conversation(uint32_t conv_slot);
  void trace_request(const Request& q);

  Engine& engine_;
  WorkloadSource& source_;
  FrontEndOptions o_;
  TraceWriter* trace_;
  RequestDispatcher* dispatcher_ = nullptr;
  RequestSink* sink_ = nullptr;
  std::function<void(double)> progress_;
  std::function<void()> on_done_;
  std::vector<Request> reqs_;
  std::vector<uint8_t> slot_used_;
  std::vector<uint32_t> free_slots_, free_convs_;
  std::vector<ConversationSpec> convs_;
  std::vector<uint32_t> conv_number_;  // per conversation slot
  uint32_t conversations_made_ = 0;
  bool source_done_ = false;
  bool closed_loop_ = false;
  RequestCounts n_;
  int64_t first_arrival_ns_ = -1, last_delivery_ns_ = 0, last_failure_ns_ = 0;
};

}  // namespace sluice::serving
