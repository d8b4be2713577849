// A paged KV-cache block manager for one replica: fixed-size blocks, allocation as sequences
// grow, preemption support, a resident cache of finished conversation turns that the next
// turn can reuse, and a prefix cache: the blocks of a shared prompt prefix (a system prompt,
// a few-shot template), keyed by the prefix's id and shared read-only by every request that
// starts with it (vLLM's automatic prefix caching, SGLang's radix cache at one level). Cached
// blocks no request holds are evicted least-recently-used when blocks run short (conversation
// caches first, then prefixes).
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

#include "workloads/serving/kv_remote.h"
#include "workloads/serving/request.h"

namespace sluice::serving {

class BlockManager {
 public:
  BlockManager(int64_t total_blocks, int block_size, double watermark_fraction, bool reuse, bool prefix_caching = false);
  bool prefix_caching() const { return prefix_caching_; }

  int block_size() const { return block_size_; }
  int64_t total_blocks() const { return total_; }
  int64_t free_blocks() const { return free_; }
  int64_t cached_blocks() const { return cached_; }     // held by resident conversation caches
  int64_t used_blocks() const { return total_ - free_ - cached_; }  // held by live sequences
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }

  // Whether `extra` more blocks can be had (free plus evictable cache), keeping the
  // watermark free when `admission` (new sequences must not eat the last blocks).
  bool can_allocate(int64_t extra, bool admission) const;
  // Grows a request's allocation to hold `tokens` tokens, evicting cached conversations
  // if needed. Returns false (and changes nothing) if it cannot.
  bool grow_to(Request& r, int64_t tokens, bool admission = false) {
    if (tokens <= static_cast<int64_t>(r.blocks) * block_size_) return true;  // the common case: its last block has room
    return grow_slow(r, tokens, admission);
  }
  // Releases every block the request holds (its share of a prefix: the prefix stays cached).
  void release(Request& r);
  // Prefix cache. At a request's first admission: if its prefix is resident, the request
  // shares its whole blocks (at most all but the prompt's last token) and returns the tokens
  // they cover; 0 otherwise. A request's blocks count its shared ones (r.shared_blocks of them).
  int64_t claim_prefix(Request& r);
  // After a request's prefill: its prefix's whole blocks become the prefix's shared entry
  // (unless one is resident already: then it keeps its own copy).
  void publish_prefix(Request& r);
  // Drops the request's share of its prefix (the blocks stay, cached once nobody holds them).
  void unshare(Request& r);
  bool prefix_resident(int32_t prefix_id) const { return prefixes_.count(prefix_id) > 0; }
  // A host-memory tier below HBM (0 blocks: none): a cached prefix evicted from HBM moves there
  // (the least recently used there is dropped to make room) instead of being dropped, and a
  // request whose prefix is there fetches it back into HBM over the host link instead of
  // prefilling it again. The blocks fetched since the last take_fetched() are the copy the
  // next iteration waits for.
  void set_host_tier(int64_t blocks) { host_.capacity = blocks; }
  // A local-SSD tier below the host's (0 blocks: none): what the host tier evicts (or a prefix
  // HBM evicts when there is no host tier or it does not fit there) moves there; a claim from
  // it is read from the drive, then copied over the host link like a host fetch.
  void set_ssd_tier(int64_t blocks) { ssd_.capacity = blocks; }
  // Whether a prefix of `blocks` is worth reading back from the SSD (else it is prefilled
  // again and stays there); none: always.
  void set_ssd_policy(std::function<bool(int64_t blocks)> worth) { ssd_worth_ = std::move(worth); }
  int64_t take_fetched() {  // blocks to copy over the host link (from host memory or the SSD)
    const int64_t n = fetched_pending_;
    fetched_pending_ = 0;
    return n;
  }
  int64_t take_fetched_ssd() {  // of which read from the SSD first
    const int64_t n = fetched_ssd_pending_;
    fetched_ssd_pending_ = 0;
    return n;
  }
  // The deployment's remote pool below every local tier (null: none): what the lowest local
  // tier lets go of moves there (this engine its home), and a prefix found nowhere local is
  // fetched from there. The fetches since the last call: (home engine, blocks) each, copied
  // over the fabric from the home's host memory before the next iteration computes.
  void set_remote_tier(RemoteKvStore* pool, int engine) {
    remote_ = pool;
    engine_ = engine;
  }
  std::vector<std::pair<int, int64_t>>& fetched_remote() { return fetched_remote_pending_; }
  // Blocks copied from HBM to this engine's host memory since the last call (into the host tier,
  // or into the remote pool with this engine as their home): a copy in the background, over the
  // host link, which no iteration waits for.
  bool offload_pending() const { return offloaded_pending_ > 0; }
  int64_t take_offloaded() {
    const int64_t n = offloaded_pending_;
    offloaded_pending_ = 0;
    return n;
  }
  struct TierCounts {
    int64_t hits_hbm = 0, hits_host = 0, hits_ssd = 0;  // prefix claims served from each tier
    int64_t offloaded_blocks = 0, fetched_blocks = 0, dropped_blocks = 0;  // to host; over the host link (any tier); lost
    int64_t to_ssd_blocks = 0, fetched_ssd_blocks = 0;  // moved down to the SSD; read back from it
    int64_t ssd_skipped = 0;  // claim attempts that found their prefix on the SSD and chose to recompute it (faster)
    int64_t hits_remote = 0, to_remote_blocks = 0, fetched_remote_blocks = 0;  // the remote pool: claims, moved in, fetched
    int64_t conversation_fetches = 0;  // later turns whose conversation's cache came back from a tier (host, SSD or the pool)
  };
  const TierCounts& tier_counts() const { return tiers_; }
  int64_t host_used_blocks() const { return host_.used; }
  int64_t ssd_used_blocks() const { return ssd_.used; }
  // The request stops counting its blocks here, but they stay in use (its KV cache being
  // copied to another engine) until free_detached gives them back. Returns how many.
  int64_t detach(Request& r) {
    if (r.shared_blocks > 0) unshare(r);
    const int64_t n = r.blocks;
    r.blocks = 0;
    return n;
  }
  void free_detached(int64_t blocks) { free_ += blocks; }
  // Blocks taken for a request that is not here yet (its KV cache arriving layer by layer):
  // in use until adopt() hands them to it. False (nothing taken) if they cannot be had.
  bool reserve(int64_t blocks, bool admission) {
    if (!can_allocate(blocks, admission) || (free_ < blocks && !evict_until(blocks))) return false;
    free_ -= blocks;
    return true;
  }
  void adopt(Request& r, int64_t blocks) { r.blocks += static_cast<int32_t>(blocks); }
  // After a turn finishes: keep its blocks resident as the conversation's cache (replacing
  // an older entry of the same conversation) instead of freeing them.
  void retain(Request& r, int64_t tokens);
  // When a new turn arrives: if its conversation's cache is resident, move those blocks to
  // the request and return the number of tokens it covers (at most `max_tokens`).
  int64_t claim(Request& r, int64_t max_tokens);
  // Undoes a claim whose admission failed: the request's blocks become the conversation's
  // resident cache again (most recently used).
  void restore(Request& r, int64_t tokens);
  // Blocks a new sequence may use at most (all blocks less the admission watermark).
  int64_t admissible_blocks() const { return total_ - watermark_; }
  bool resident(uint32_t conversation) const { return cache_.count(conversation) > 0; }

 private:
  bool grow_slow(Request& r, int64_t tokens, bool admission);
  int64_t claim_remote(Request& r);
  struct Entry {
    int64_t tokens;
    int64_t blocks;
    std::list<uint32_t>::iterator lru_pos;
  };
  bool evict_until(int64_t need);
  int64_t total_, free_, cached_ = 0, watermark_;
  int block_size_;
  bool reuse_;
  std::unordered_map<uint32_t, Entry> cache_;
  std::list<uint32_t> lru_;  // front = least recently used
  struct PrefixEntry {
    int64_t blocks;
    int64_t holders;                           // requests sharing it; cached (evictable) at 0
    std::list<int32_t>::iterator lru_pos;      // in prefix_lru_ while holders == 0
  };
  bool prefix_caching_ = false;
  std::unordered_map<int32_t, PrefixEntry> prefixes_;
  int64_t share_prefix(Request& r, PrefixEntry& e);
  std::unordered_map<int32_t, PrefixEntry>::iterator cache_fetched_prefix(int32_t prefix_id, int64_t blocks);
  std::list<int32_t> prefix_lru_;
  void offload(int32_t key, int64_t blocks, int64_t tokens);
  // A conversation's cache in the tiers, beside the prefixes (whose ids are >= 0).
  static int32_t conversation_key(uint32_t conversation) { return -1 - static_cast<int32_t>(conversation & 0x7FFFFFFF); }
  bool any_tier() const { return host_.capacity > 0 || ssd_.capacity > 0 || remote_ != nullptr; }
  int64_t claim_from_tiers(Request& r, int64_t max_tokens);
  int64_t offloaded_pending_ = 0;
  struct HostEntry {
    int64_t blocks;
    int64_t tokens;
    std::list<int32_t>::iterator lru_pos;
  };
  struct TierStore {  // a tier below HBM: prefixes by id, least recently used first
    int64_t capacity = 0, used = 0;
    std::unordered_map<int32_t, HostEntry> entries;
    std::list<int32_t> lru;
  };
  bool place(TierStore& tier, TierStore* below, int32_t prefix_id, int64_t blocks, int64_t tokens);
  int64_t take_out(TierStore& tier, int32_t prefix_id);  // its blocks (0: not there), removed
  TierStore host_, ssd_;
  std::function<bool(int64_t)> ssd_worth_;
  int64_t fetched_pending_ = 0, fetched_ssd_pending_ = 0;
  TierCounts tiers_;
  // A prefix no local tier keeps any longer: to the remote pool if there is one, else dropped.
  void let_go(int32_t key, int64_t blocks, int64_t tokens);
  RemoteKvStore* remote_ = nullptr;
  int engine_ = -1;
  std::vector<std::pair<int, int64_t>> fetched_remote_pending_;
};

}  // namespace sluice::serving
