// A serving request and the work one iteration does on it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sluice::serving {

// Handoff: prefilled on a prefill engine, its KV cache on its way to a decode engine
// (waiting for blocks there, or crossing the fabric).
enum class ReqState : uint8_t { Pending, Waiting, Running, Swapped, Done, Handoff };

// A batch entry that is static batching's padding (a finished member still holding its row):
// it costs a decode step and refers to no request.
inline constexpr uint32_t kPaddingSlot = 0xFFFFFFFFu;

// One request (one turn of a conversation). Token bookkeeping: the sequence has
// length() = prompt_len() + generated tokens; `computed` of them have KV in the cache.
// An iteration processes up to length() - computed tokens; when it reaches length(),
// the model samples one more token.
//
// `id` is the request's slot in the simulation's request table: queues, batches and events
// name requests by it, and the slot is reused once the request has ended (so memory holds
// the requests in flight, not every request of the run). `serial` is the request's number in
// the run (requests.csv's id), `conversation` the conversation's number (the KV cache's key)
// and `conv_slot` its slot in the table of conversations in progress.
struct alignas(64) Request {
  // Hot: what every iteration reads and writes of a running sequence, in its first cache
  // line (a replica's batch touches each member several times an iteration).
  uint32_t id = 0;
  int32_t computed = 0;
  int32_t generated = 0;
  int32_t history_tokens = 0;  // earlier turns' prompts and answers, resent with this turn
  int32_t input_tokens = 0;    // this turn's new prompt tokens
  int32_t output_tokens = 0;   // tokens to generate
  int32_t blocks = 0;          // KV blocks held on its replica
  ReqState state = ReqState::Pending;
  // Timestamps (ns); -1 until known.
  int64_t first_scheduled_ns = -1;
  int64_t first_token_ns = -1;   // delivered to the client
  int64_t last_token_ns = -1;
  int64_t max_gap_ns = 0;
  // Cold: identity, admission and failure bookkeeping.
  uint32_t serial = 0;
  uint32_t conv_slot = 0;
  uint32_t conversation = 0;
  uint32_t turn = 0;         // 0 for the first turn
  uint32_t turns_total = 1;  // turns in this conversation
  int32_t replica = -1;
  uint32_t client = 0;       // closed-loop client that issued it
  int64_t arrival_ns = 0;
  int32_t cached_tokens = 0;   // prompt tokens whose KV was reused from a resident cache
  int32_t preemptions = 0;
  bool history_truncated = false;  // oldest history dropped to fit the context: no cached prefix applies
  bool rejected = false;           // can never fit the replica's KV cache (vLLM ignores such requests)
  bool failed = false;             // given up: no healthy replica took it within the failover timeout
  bool parked = false;             // waiting for a healthy replica
  int32_t retries = 0;             // times a failure sent it back to the router
  int32_t reprefills = 0;          // times it lost computed KV to a failure and prefilled again
  int64_t park_deadline_ns = 0;
  // Disaggregated serving: the prefill engine it left, the blocks it still holds there until
  // its KV cache has crossed, the copy's flows still in flight, and when its wait or copy began.
  // Prefix caching: the shared prefix its prompt starts with (-1: none), its length, and the
  // blocks of it this request shares (counted in `blocks`).
  int32_t prefix_id = -1;
  int32_t prefix_tokens = 0;
  int32_t shared_blocks = 0;
  // Its request class (-1: none) and priority (lower first where the deployment orders by it).
  int32_t class_id = -1;
  int32_t priority = 0;
  int32_t handoff_from = -1;
  int32_t handoff_blocks = 0;
  int32_t handoff_flows = 0;
  int32_t layerwise_to = -1;     // a layer-by-layer copy under way to this decode engine (-1: none)
  int32_t handoff_pick = -1;     // the decode engine already picked for it (a layer-by-layer copy that fell back to whole)
  int32_t layerwise_blocks = 0;  // the blocks reserved there for it
  int64_t handoff_mark_ns = 0;
  uint32_t copy_gen = 0;         // its KV copy's generation: a failure voids the copy's flows in flight by a new one
  // Data-parallel attention: the decode engine whose device `dp_rank` holds its KV cache and runs
  // its attention (-1: none yet), dealt round-robin as its KV copy is sent there.
  int32_t dp_engine = -1;
  int32_t dp_rank = -1;
  // The same on a prefill pool with data-parallel attention: the prefill engine and its device
  // that prefill the prompt and hold its KV cache until the copy (dealt round-robin as the
  // engine's scheduler first considers it); its KV copy leaves from that device alone.
  int32_t prefill_engine = -1;
  int32_t prefill_rank = -1;

  int32_t prompt_len() const { return history_tokens + input_tokens; }
  int32_t length() const { return prompt_len() + generated; }
  // More than one token left to process: prompt (or, after a recompute preemption, prompt
  // and generated tokens) still to prefill. Exactly one left is a decode step.
  bool in_prefill() const { return computed < length() - 1; }
  bool finished() const { return generated >= output_tokens; }
};
static_assert(offsetof(Request, max_gap_ns) + sizeof(int64_t) <= 64, "a request's hot fields fill its first cache line");

// One sequence's share of an iteration.
struct BatchEntry {
  uint32_t req;
  int32_t new_tokens;
  int32_t context;
  bool samples = true;  // reaches the sequence's end, so the model samples a token (not a prefill chunk short of it)
};

// What a scheduler decided for one iteration of one replica.
struct Batch {
  std::vector<BatchEntry> entries;
  double extra_ns = 0;        // swap traffic etc. on the iteration's critical path
  double swap_bytes = 0;      // of which KV copied over the host link (a flow per device on a fabric)
  double storage_ns = 0;      // of which reading KV from a local SSD first (the drive's bandwidth, not a flow)
  int64_t start_ns = 0;       // when the iteration starts: a request's first scheduling, set as it is added
  int prefill_entries = 0;
  int decode_entries = 0;
  // Set by the simulation only, for a batch its steady decode formed (every entry a running
  // sequence past its first token, decoding one): its end skips the tests that cannot fail.
  bool steady_decode = false;
  bool empty() const { return entries.empty(); }
  void clear() {
    entries.clear();
    extra_ns = 0;
    swap_bytes = 0;
    storage_ns = 0;
    prefill_entries = decode_entries = 0;
    steady_decode = false;
  }
};

}  // namespace sluice::serving
