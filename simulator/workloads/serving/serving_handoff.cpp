// Prefill/decode disaggregation (DistServe, Splitwise, Mooncake, Dynamo): the prefill pool
// computes a prompt's KV cache, the decode pool generates its tokens, and the KV cache moves
// between them over the world's fabric.
//
// A prompt routed to the prefill pool is prefilled there up to its last token (the global
// scheduler holds that one back). When its prefill iteration ends, the request leaves the
// prefill engine's queues and goes to the decode engine with the fewest requests routed or on
// their way to it. It waits there, first come first served, until the decode engine can hold
// its KV (blocks for the whole prompt, the admission watermark kept: the decode pool's KV
// capacity bounds what it takes); then its KV cache is copied as one flow from each prefill
// device to its decode peer (NVLink inside a server, the NICs across), sharing links with
// everything else on the fabric. Once the last byte lands, the prefill engine frees its blocks
// and the request joins the decode engine's waiting queue with its blocks held; the decode
// engine's first step on it computes the prompt's last token and samples the first token. So
// TTFT = queueing + prefill + wait for decode blocks + KV copy + the first decode step (with
// the last mile).
//
// `kv_transfer: layerwise` (Splitwise): when the prefill iteration that completes a prompt
// starts, its decode engine is chosen and the blocks reserved there (if none are waiting ahead
// of it and they can be had now; otherwise the copy is whole, as above). All but the last
// layer's share of the KV then leaves at once, as flows that share the fabric (a layer's share
// cannot really leave before that layer is computed, but a copy slower than the prefill is
// bound by the link from the start, and one faster ends with the last layer's share, which
// leaves when the prefill ends: both ends come out right), so TTFT = queueing + prefill + the
// last layer's copy (or the whole copy, when the link is the bound) + the first decode step.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

// The decode engine a prefilled request goes to: the decode router's choice among the decode
// pool (by default least_outstanding: the fewest requests routed there or on their way).
int ServingSim::pick_decode_engine(const Request& q) {
  const std::span<const std::unique_ptr<Replica>> pool(replicas_.begin() + pool_split_, replicas_.end());
  const int i = cfg_.decode_router->route(q, pool);
  if (i < 0 && !faults_enabled_) throw std::logic_error("internal: no healthy decode engine for a handoff");
  return i < 0 ? -1 : pool_split_ + i;
}

// A layer-by-layer copy, as the prefill iteration that brings request `id` to `final_tokens`
// computed tokens starts on engine `from`: blocks reserved at its decode engine, all but the
// last layer's share sent now (the last when the prefill ends: start_handoff).
void ServingSim::begin_layerwise(int from, uint32_t id, int32_t final_tokens) {
  Request& q = front_.requests()[id];
  const auto& from_nodes = fabric_.replica_nodes[static_cast<size_t>(from)];
  if (q.layerwise_to >= 0 || q.handoff_pick >= 0 || from_nodes.empty()) return;
  const int to = pick_decode_engine(q);
  if (to < 0) return;  // none healthy: start_handoff gives the prompt back when its prefill ends
  q.handoff_pick = to;  // the router is asked once: a fallback to a whole copy goes here too
  Replica& dst = *replicas_[static_cast<size_t>(to)];
  if (!handoff_wait_[static_cast<size_t>(to)].empty()) return;  // first come, first served: it waits behind them, whole
  const int64_t now = engine_.now().count_ns();
  account_kv(to, now);
  // Its first step there, and the drafts it verifies with speculative decoding (mech::decode_slots).
  const int64_t first = static_cast<int64_t>(final_tokens) + 1;
  const int64_t blocks = dst.kv.blocks_for(dst.lookahead == 0 ? first
                                                              : std::min<int64_t>(first + dst.lookahead,
                                                                                  std::max<int64_t>(first, q.prompt_len() + q.output_tokens)));
  if (!dst.kv.reserve(blocks, /*admission=*/true)) return;
  q.layerwise_to = to;
  q.layerwise_blocks = static_cast<int32_t>(blocks);
  q.handoff_pick = -1;
  ++replicas_[static_cast<size_t>(to)]->incoming;
  ++replicas_[static_cast<size_t>(to)]->routed;
  const double layers = static_cast<double>(cfg_.model.layers);
  const double early = dst.kv_bytes_per_token * final_tokens * (layers - 1) / layers;
  const auto& to_nodes = fabric_.replica_nodes[static_cast<size_t>(to)];
  // One more than the flows: the prefill's end, which sends the last layer's share.
  q.copy_gen = next_copy_gen();
  deal_rank(q.dp_engine, q.dp_rank, to);
  q.handoff_flows = send_kv(q, from_nodes, to_nodes, early, 0) + 1;
}

// Data-parallel attention: the device of decode engine `to` that will hold the request's KV cache
// and run its attention, dealt round-robin over its devices as copies are sent there (SGLang's
// DP controller's default); kept while the request stays on that engine.
// The device of engine `to` (data-parallel attention) that a request's `engine`/`rank` pair names:
// the next in turn on that engine, kept while the request stays there.
void ServingSim::deal_rank(int32_t& engine, int32_t& rank, int to) {
  if (!runs_dp_attention(to) || engine == to) return;
  engine = to;
  rank = dp_next_[static_cast<size_t>(to)]++ % tp_of(to);
}

int ServingSim::rank_on(int ri, Request& q, bool deal) {
  const int dp = tp_of(ri);
  if (ri < pool_split_) {  // a prefill engine: a prompt's device is dealt as its scheduler first considers it here
    if (q.prefill_engine != ri) {
      if (!deal) return dp_next_[static_cast<size_t>(ri)] % dp;
      deal_rank(q.prefill_engine, q.prefill_rank, ri);
    }
    return q.prefill_rank % dp;
  }
  return q.dp_rank >= 0 ? q.dp_rank % dp : 0;  // a decode engine's: dealt as its KV copy was sent here
}

// Each device's share of a KV copy as a flow: with as many devices on both sides, each prefill
// device sends its heads to its decode peer; where the pools' tensor parallelism differs, the
// copy is cut into as many pieces as the larger side has devices, each piece from the device
// that holds its heads to the one that will.
int32_t ServingSim::send_kv(const Request& q, const std::vector<int>& from, const std::vector<int>& to, double bytes, size_t salt) {
  // Piece j of n covers the same heads on both sides: from the device that holds them to the one that will.
  // Under data-parallel attention the sequence's cache goes to the one decode device that will
  // attend over it (its dp_rank, dealt by deal_rank), each prefill device sending its share of
  // it; from a prefill pool with data-parallel attention it leaves the one device that prefilled
  // it (its prefill_rank, dealt as the prompt joined a batch there).
  const bool one_from = q.prefill_rank >= 0 && from.size() > 1, one_to = data_parallel_attention(cfg_) && to.size() > 1;
  if (one_from || one_to) {
    const std::vector<int> src = one_from ? std::vector<int>{from[static_cast<size_t>(q.prefill_rank) % from.size()]} : from;
    const std::vector<int> dst = one_to ? std::vector<int>{to[static_cast<size_t>(q.dp_rank) % to.size()]} : to;
    return send_kv(q, src, dst, bytes, salt);
  }
  const size_t n = std::lcm(from.size(), to.size());
  const double share = bytes / static_cast<double>(n);
  const uint64_t tag = kHandoffFlow | q.id | (static_cast<uint64_t>(q.copy_gen & kCopyGenMask) << 40);
  for (size_t j = 0; j < n; ++j)
    fabric_.flows->start(from[j * from.size() / n], to[j * to.size() / n], share, this, tag, static_cast<uint64_t>(q.serial) * 7919 + salt + j);
  return static_cast<int32_t>(n);
}

// Engine `e` failed (replica_down, after it dropped its queues and its KV cache): the KV copies
// it was the source or the target of. A copy whose source was e lost its KV cache: its blocks at
// the decode engine are freed, its flows in flight void, and the request goes into `lost` to be
// prefilled again. A copy bound for e still has its KV cache at the prefill engine: it goes to
// another decode engine (waiting there for blocks like any handoff), or, with none healthy, is
// given up and prefilled again once one is back. A layer-by-layer copy bound for e, or from e,
// gives back its reserved blocks; a prompt still prefilling elsewhere then goes whole.
void ServingSim::fail_handoffs(int e, std::vector<uint32_t>& lost) {
  const int64_t now = engine_.now().count_ns();
  std::vector<uint32_t> retarget;
  std::vector<int> pump;  // decode engines that gave blocks back: their waiting handoffs may start (after the loop)
  for (Request& q : front_.requests()) {
    if (q.handoff_pick == e) q.handoff_pick = -1;
    if (q.state == ReqState::Waiting || q.state == ReqState::Running) {
      if (q.layerwise_to < 0 || (q.layerwise_to != e && q.replica != e)) continue;
      Replica& dst = *replicas_[static_cast<size_t>(q.layerwise_to)];
      if (q.layerwise_to != e) {
        account_kv(q.layerwise_to, now);
        dst.kv.free_detached(q.layerwise_blocks);  // reserved, never adopted
        --dst.routed;
        pump.push_back(q.layerwise_to);
      }
      --dst.incoming;
      q.layerwise_to = -1;
      q.layerwise_blocks = 0;
      q.handoff_flows = 0;
      q.copy_gen = next_copy_gen();  // the layers already on their way are void
      continue;
    }
    if (q.state != ReqState::Handoff || (q.handoff_from != e && q.replica != e)) continue;
    const int to = q.replica;
    auto& wait = handoff_wait_[static_cast<size_t>(to)];
    const auto it = std::find(wait.begin(), wait.end(), q.id);
    const bool copying = it == wait.end();
    if (!copying) wait.erase(it);
    q.copy_gen = next_copy_gen();
    q.handoff_flows = 0;
    Replica& dst = *replicas_[static_cast<size_t>(to)];
    if (copying) kv_transfer_bytes_ -= dst.kv_bytes_per_token * q.computed;  // a copy that will not land is not counted
    --dst.incoming;
    if (to != e) {
      account_kv(to, now);
      dst.kv.release(q);  // the blocks it held there for the copy
      --dst.routed;
    }
    q.blocks = q.shared_blocks = 0;
    if (q.handoff_from == e) {
      --in_handoff_;
      lost.push_back(q.id);
      if (to != e) pump.push_back(to);
    } else {
      retarget.push_back(q.id);
    }
  }
  for (uint32_t id : retarget) {
    Request& q = front_.requests()[id];
    const int from = q.handoff_from;
    const std::span<const std::unique_ptr<Replica>> pool(replicas_.begin() + pool_split_, replicas_.end());
    const int i = cfg_.decode_router->route(q, pool);
    if (i < 0) {
      // No decode engine left: the copy is given up and the prefill engine's blocks freed.
      account_kv(from, now);
      replicas_[static_cast<size_t>(from)]->kv.free_detached(q.handoff_blocks);
      --in_handoff_;
      lost.push_back(id);
      request_schedule(from);
      continue;
    }
    const int to = pool_split_ + i;
    q.replica = to;
    ++replicas_[static_cast<size_t>(to)]->incoming;
    ++replicas_[static_cast<size_t>(to)]->routed;
    handoff_wait_[static_cast<size_t>(to)].push_back(id);
    pump.push_back(to);
  }
  std::sort(pump.begin(), pump.end());
  pump.erase(std::unique(pump.begin(), pump.end()), pump.end());
  for (int to : pump) {
    pump_handoffs(to);
    request_schedule(to);
  }
}

void ServingSim::start_handoff(int from, uint32_t id) {
  Request& q = front_.requests()[id];
  const int64_t now = engine_.now().count_ns();
  q.input_tokens += 1;  // the prompt's last token, held back by the global scheduler
  q.handoff_from = from;
  replicas_[static_cast<size_t>(from)]->kv.publish_prefix(q);  // the prefill engine keeps its prompt's shared prefix
  q.handoff_blocks = static_cast<int32_t>(replicas_[static_cast<size_t>(from)]->kv.detach(q));  // still in use there until copied
  q.state = ReqState::Handoff;
  ++in_handoff_;
  if (q.layerwise_to >= 0) {
    // Its blocks are waiting at the decode engine and all but the last layer left during the
    // prefill: the last layer's share goes now.
    const int to = q.layerwise_to;
    Replica& dst = *replicas_[static_cast<size_t>(to)];
    q.replica = to;
    q.handoff_mark_ns = now;  // the copy's time on the request's path: from the prefill's end to the last byte
    dst.kv.adopt(q, q.layerwise_blocks);
    q.layerwise_to = -1;
    q.layerwise_blocks = 0;
    handoff_wait_ns_.record(0);
    const double bytes = dst.kv_bytes_per_token * q.computed;
    kv_transfer_bytes_ += bytes;
    const auto& from_nodes = fabric_.replica_nodes[static_cast<size_t>(from)];
    const auto& to_nodes = fabric_.replica_nodes[static_cast<size_t>(to)];
    q.handoff_flows += send_kv(q, from_nodes, to_nodes, bytes / static_cast<double>(cfg_.model.layers),
                               std::lcm(from_nodes.size(), to_nodes.size()));
    kv_copied(id);  // the prefill's end: the copy completes with its last flow
    return;
  }
  q.handoff_mark_ns = now;
  const bool picked = q.handoff_pick >= 0 && replicas_[static_cast<size_t>(q.handoff_pick)]->routable();
  const int to = picked ? q.handoff_pick : pick_decode_engine(q);
  q.handoff_pick = -1;
  if (to < 0) {
    // Every decode engine is down (failures): the prompt's KV cache is given up and the request
    // goes back to the global scheduler, which parks it until one is back.
    account_kv(from, now);
    replicas_[static_cast<size_t>(from)]->kv.free_detached(q.handoff_blocks);
    --in_handoff_;
    send_back(id);
    return;
  }
  q.replica = to;
  ++replicas_[static_cast<size_t>(to)]->incoming;
  ++replicas_[static_cast<size_t>(to)]->routed;
  handoff_wait_[static_cast<size_t>(to)].push_back(id);
  pump_handoffs(to);
}

// Starts the copies of the handoffs waiting at decode engine `to`, in order, while it can hold them.
void ServingSim::pump_handoffs(int to) {
  auto& wait = handoff_wait_[static_cast<size_t>(to)];
  Replica& dst = *replicas_[static_cast<size_t>(to)];
  const int64_t now = engine_.now().count_ns();
  while (!wait.empty()) {
    Request& q = front_.requests()[wait.front()];
    // Blocks for the whole prompt: the cache that crosses and the last token's slot, so its
    // admission there never waits for a block.
    account_kv(to, now);
    if (!dst.kv.grow_to(q, mech::decode_slots(dst, q), /*admission=*/true)) break;
    wait.pop_front();
    handoff_wait_ns_.record(now - q.handoff_mark_ns);
    q.handoff_mark_ns = now;
    const double bytes = dst.kv_bytes_per_token * q.computed;
    kv_transfer_bytes_ += bytes;
    deal_rank(q.dp_engine, q.dp_rank, to);
    const auto& from_nodes = fabric_.replica_nodes[static_cast<size_t>(q.handoff_from)];
    const auto& to_nodes = fabric_.replica_nodes[static_cast<size_t>(to)];
    if (bytes <= 0 || from_nodes.empty()) {
      q.handoff_flows = 1;
      kv_copied(q.id);
      continue;
    }
    // Each prefill device sends its share (its heads of every layer) to its decode peer.
    q.copy_gen = next_copy_gen();
    q.handoff_flows = send_kv(q, from_nodes, to_nodes, bytes, 0);
  }
}

void ServingSim::kv_copied(uint32_t id) {
  Request& q = front_.requests()[id];
  if (--q.handoff_flows > 0) return;
  const int64_t now = engine_.now().count_ns();
  kv_transfer_ns_.record(now - q.handoff_mark_ns);
  ++kv_transfers_;
  const int from = q.handoff_from, to = q.replica;
  account_kv(from, now);
  replicas_[static_cast<size_t>(from)]->kv.free_detached(q.handoff_blocks);
  q.handoff_blocks = 0;
  --replicas_[static_cast<size_t>(to)]->incoming;
  --in_handoff_;
  Replica& dst = *replicas_[static_cast<size_t>(to)];
  q.state = ReqState::Waiting;
  global_.enqueue(dst, id);
  request_schedule(to);
  request_schedule(from);  // its blocks are free: a waiting prompt may fit now
}

}  // namespace sluice::serving
