#include "workloads/serving/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace sluice::serving {

BlockManager::BlockManager(int64_t total_blocks, int block_size, double watermark_fraction, bool reuse, bool prefix_caching)
    : total_(total_blocks),
      free_(total_blocks),
      watermark_(static_cast<int64_t>(std::floor(watermark_fraction * static_cast<double>(total_blocks)))),
      block_size_(block_size),
      reuse_(reuse),
      prefix_caching_(prefix_caching) {
  if (total_blocks <= 0 || block_size <= 0) throw std::invalid_argument("block manager needs blocks");
}

bool BlockManager::can_allocate(int64_t extra, bool admission) const {
  return free_ + cached_ - (admission ? watermark_ : 0) >= extra;
}

bool BlockManager::evict_until(int64_t need) {
  while (free_ < need && !lru_.empty()) {
    const uint32_t conv = lru_.front();
    lru_.pop_front();
    auto it = cache_.find(conv);
    free_ += it->second.blocks;
    cached_ -= it->second.blocks;
    if (any_tier()) offload(conversation_key(conv), it->second.blocks, it->second.tokens);  // down the tiers, not dropped
    cache_.erase(it);
  }
  while (free_ < need && !prefix_lru_.empty()) {  // then prefixes nobody holds
    auto it = prefixes_.find(prefix_lru_.front());
    prefix_lru_.pop_front();
    free_ += it->second.blocks;
    cached_ -= it->second.blocks;
    offload(it->first, it->second.blocks, it->second.blocks * block_size_);
    prefixes_.erase(it);
  }
  return free_ >= need;
}

// Puts a prefix into `tier`, its least recently used making room by moving down to `below`
// (or being dropped where there is none, or it does not fit there); false (nothing moved) when
// the prefix is larger than the tier.
bool BlockManager::place(TierStore& tier, TierStore* below, int32_t prefix_id, int64_t blocks, int64_t tokens) {
  if (blocks > tier.capacity) return false;
  while (tier.used + blocks > tier.capacity) {
    auto it = tier.entries.find(tier.lru.front());
    tier.lru.pop_front();
    tier.used -= it->second.blocks;
    const int32_t victim = it->first;
    const int64_t b = it->second.blocks, t = it->second.tokens;
    tier.entries.erase(it);
    if (below && place(*below, nullptr, victim, b, t)) tiers_.to_ssd_blocks += b;
    else let_go(victim, b, t);
  }
  tier.lru.push_back(prefix_id);
  tier.entries.emplace(prefix_id, HostEntry{blocks, tokens, std::prev(tier.lru.end())});
  tier.used += blocks;
  return true;
}

int64_t BlockManager::take_out(TierStore& tier, int32_t prefix_id) {
  const auto it = tier.entries.find(prefix_id);
  if (it == tier.entries.end()) return 0;
  const int64_t blocks = it->second.blocks;
  tier.lru.erase(it->second.lru_pos);
  tier.used -= blocks;
  tier.entries.erase(it);
  return blocks;
}

// A prefix leaving HBM: to the host tier if it fits there (its least recently used moving
// down to the SSD tier), else to the SSD tier, else dropped. An older copy of it in a tier
// (one a request recomputed rather than fetched) is replaced: a prefix is in one tier at most.
void BlockManager::offload(int32_t key, int64_t blocks, int64_t tokens) {
  take_out(host_, key);
  take_out(ssd_, key);
  if (place(host_, &ssd_, key, blocks, tokens)) {
    tiers_.offloaded_blocks += blocks;
    offloaded_pending_ += blocks;
  } else if (place(ssd_, nullptr, key, blocks, tokens)) {
    tiers_.to_ssd_blocks += blocks;
  } else {
    let_go(key, blocks, tokens);
  }
}

// (An entry the pool already holds, fetched from it or written through to it, stays as it is:
// nothing moves.)
void BlockManager::let_go(int32_t key, int64_t blocks, int64_t tokens) {
  if (remote_ && remote_->contains(key)) return;
  if (remote_ && remote_->put(key, blocks, tokens, engine_)) {
    tiers_.to_remote_blocks += blocks;
    offloaded_pending_ += blocks;  // into this engine's host memory
  } else {
    tiers_.dropped_blocks += blocks;
  }
}

bool BlockManager::grow_slow(Request& r, int64_t tokens, bool admission) {
  const int64_t need = blocks_for(tokens) - r.blocks;
  if (need <= 0) return true;
  if (!can_allocate(need, admission)) return false;
  if (free_ < need && !evict_until(need)) return false;  // (a call only when something must go)
  free_ -= need;
  r.blocks += static_cast<int32_t>(need);
  return true;
}

void BlockManager::release(Request& r) {
  if (r.shared_blocks > 0) unshare(r);
  free_ += r.blocks;
  r.blocks = 0;
}

int64_t BlockManager::claim_prefix(Request& r) {
  auto it = prefixes_.find(r.prefix_id);
  if (it == prefixes_.end()) {
    // In the host or the SSD tier: fetched back into HBM (if HBM can hold it) as a prefix entry again.
    const auto h = host_.entries.find(r.prefix_id);
    const bool on_host = h != host_.entries.end();
    const auto s = on_host ? ssd_.entries.end() : ssd_.entries.find(r.prefix_id);
    if (!on_host && s == ssd_.entries.end()) return remote_ ? claim_remote(r) : 0;
    const int64_t blocks = on_host ? h->second.blocks : s->second.blocks;
    if (blocks > (static_cast<int64_t>(r.prompt_len()) - 1) / block_size_ || !can_allocate(blocks, /*admission=*/true)) return 0;
    if (!on_host && ssd_worth_ && !ssd_worth_(blocks)) {
      ++tiers_.ssd_skipped;
      return 0;
    }
    take_out(on_host ? host_ : ssd_, r.prefix_id);
    it = cache_fetched_prefix(r.prefix_id, blocks);
    fetched_pending_ += blocks;
    tiers_.fetched_blocks += blocks;
    if (on_host) {
      ++tiers_.hits_host;
    } else {
      fetched_ssd_pending_ += blocks;
      tiers_.fetched_ssd_blocks += blocks;
      ++tiers_.hits_ssd;
    }
  } else {
    ++tiers_.hits_hbm;
  }
  return share_prefix(r, it->second);
}

// Whole blocks, leaving at least the prompt's last token to compute (it samples the first).
int64_t BlockManager::share_prefix(Request& r, PrefixEntry& e) {
  const int64_t blocks = std::min<int64_t>(e.blocks, (static_cast<int64_t>(r.prompt_len()) - 1) / block_size_);
  if (blocks <= 0) return 0;
  if (e.holders++ == 0) {
    cached_ -= e.blocks;
    prefix_lru_.erase(e.lru_pos);
  }
  r.blocks += static_cast<int32_t>(blocks);
  r.shared_blocks = static_cast<int32_t>(blocks);
  return blocks * block_size_;
}

// A prefix fetched back into HBM (from a tier or the pool): its blocks allocated, held by
// nobody yet, so cached as if just released (the claim that fetched it takes it).
std::unordered_map<int32_t, BlockManager::PrefixEntry>::iterator BlockManager::cache_fetched_prefix(int32_t prefix_id, int64_t blocks) {
  if (!evict_until(blocks)) throw std::logic_error("internal: a prefix fetch found fewer blocks than can_allocate promised");
  free_ -= blocks;
  prefix_lru_.push_back(prefix_id);
  cached_ += blocks;
  return prefixes_.emplace(prefix_id, PrefixEntry{blocks, 0, std::prev(prefix_lru_.end())}).first;
}

// A prefix found in no local tier but in the remote pool: fetched into HBM (if HBM can hold
// it) as a prefix entry, the pool keeping its copy for other replicas.
int64_t BlockManager::claim_remote(Request& r) {
  if (!remote_->contains(r.prefix_id)) return 0;
  const RemoteKvStore::Entry* e = remote_->use(r.prefix_id);
  const int64_t blocks = e->blocks;
  const int home = e->home;  // (copied: making room below may put other prefixes into the pool)
  if (blocks > (static_cast<int64_t>(r.prompt_len()) - 1) / block_size_ || !can_allocate(blocks, /*admission=*/true)) return 0;
  const auto it = cache_fetched_prefix(r.prefix_id, blocks);
  fetched_remote_pending_.emplace_back(home, blocks);
  tiers_.fetched_remote_blocks += blocks;
  ++tiers_.hits_remote;
  return share_prefix(r, it->second);
}

void BlockManager::publish_prefix(Request& r) {
  if (!prefix_caching_ || r.prefix_id < 0 || r.shared_blocks > 0 || prefixes_.count(r.prefix_id)) return;
  const int64_t blocks = std::min<int64_t>({r.prefix_tokens, r.computed, static_cast<int64_t>(r.blocks) * block_size_}) / block_size_;
  if (blocks <= 0) return;
  prefixes_.emplace(r.prefix_id, PrefixEntry{blocks, 1, prefix_lru_.end()});
  r.shared_blocks = static_cast<int32_t>(blocks);
}

void BlockManager::unshare(Request& r) {
  auto it = prefixes_.find(r.prefix_id);
  if (it == prefixes_.end() || r.shared_blocks <= 0)
    throw std::logic_error("internal: a request shares a prefix its replica does not hold");
  PrefixEntry& e = it->second;
  r.blocks -= r.shared_blocks;
  r.shared_blocks = 0;
  if (--e.holders == 0) {  // nobody holds it: cached, evictable
    cached_ += e.blocks;
    prefix_lru_.push_back(r.prefix_id);
    e.lru_pos = std::prev(prefix_lru_.end());
  }
}

void BlockManager::retain(Request& r, int64_t tokens) {
  if (!reuse_ || r.turn + 1 >= r.turns_total || r.shared_blocks > 0) {  // nothing will come back for it (or it shares a prefix)
    release(r);
    return;
  }
  if (auto it = cache_.find(r.conversation); it != cache_.end()) {  // replace an older turn
    free_ += it->second.blocks;
    cached_ -= it->second.blocks;
    lru_.erase(it->second.lru_pos);
    cache_.erase(it);
  }
  // Only the blocks that hold `tokens` stay resident (Orca and static reserve more).
  const int64_t keep = std::min<int64_t>(r.blocks, blocks_for(tokens));
  free_ += r.blocks - keep;
  r.blocks = static_cast<int32_t>(keep);
  lru_.push_back(r.conversation);
  cache_[r.conversation] = Entry{tokens, r.blocks, std::prev(lru_.end())};
  cached_ += r.blocks;
  if (remote_) {
    // Written through to the pool (as Mooncake stores every turn's KV): the next turn may land on
    // another replica, which fetches it from this one's host memory.
    if (remote_->put(conversation_key(r.conversation), r.blocks, tokens, engine_)) {
      tiers_.to_remote_blocks += r.blocks;
      offloaded_pending_ += r.blocks;
    }
  }
  r.blocks = 0;
}

int64_t BlockManager::claim(Request& r, int64_t max_tokens) {
  auto it = cache_.find(r.conversation);
  if (it == cache_.end()) return any_tier() ? claim_from_tiers(r, max_tokens) : 0;
  if (remote_) {
    // An older turn's cache resident here, a later one's in the pool (the turns between ran
    // elsewhere): the pool's, which covers more of the history.
    const int32_t key = conversation_key(r.conversation);
    if (remote_->contains(key) && std::min(remote_->use(key)->tokens, max_tokens) > std::min(it->second.tokens, max_tokens)) {
      free_ += it->second.blocks;
      cached_ -= it->second.blocks;
      lru_.erase(it->second.lru_pos);
      cache_.erase(it);
      return claim_from_tiers(r, max_tokens);
    }
  }
  const int64_t tokens = std::min(it->second.tokens, max_tokens);
  // Whole blocks covering `tokens` move to the request; any surplus block returns to the pool.
  const int64_t keep = blocks_for(tokens);
  free_ += it->second.blocks - keep;
  cached_ -= it->second.blocks;
  r.blocks += static_cast<int32_t>(keep);
  lru_.erase(it->second.lru_pos);
  cache_.erase(it);
  return tokens;
}

// A later turn whose conversation's cache is not resident here: from the host tier, the SSD
// tier or the remote pool (in that order), its blocks allocated in HBM and fetched like a
// prefix's (over the host link, after a drive read, or over the fabric from the pool).
int64_t BlockManager::claim_from_tiers(Request& r, int64_t max_tokens) {
  const int32_t key = conversation_key(r.conversation);
  TierStore* tier = host_.entries.count(key) ? &host_ : ssd_.entries.count(key) ? &ssd_ : nullptr;
  const RemoteKvStore::Entry* pooled = tier || !remote_ ? nullptr : remote_->use(key);
  if (!tier && !pooled) return 0;
  const int64_t tokens = std::min(tier ? tier->entries.at(key).tokens : pooled->tokens, max_tokens);
  const int64_t keep = blocks_for(tokens);
  const int home = pooled ? pooled->home : engine_;
  if (tokens <= 0 || !can_allocate(keep, /*admission=*/true)) return 0;
  if (tier) take_out(*tier, key);
  if (!evict_until(keep)) throw std::logic_error("internal: a conversation fetch found fewer blocks than can_allocate promised");
  free_ -= keep;
  r.blocks += static_cast<int32_t>(keep);
  ++tiers_.conversation_fetches;
  if (!tier) {
    fetched_remote_pending_.emplace_back(home, keep);
    tiers_.fetched_remote_blocks += keep;
    return tokens;
  }
  fetched_pending_ += keep;
  tiers_.fetched_blocks += keep;
  if (tier == &ssd_) {
    fetched_ssd_pending_ += keep;
    tiers_.fetched_ssd_blocks += keep;
  }
  return tokens;
}

void BlockManager::restore(Request& r, int64_t tokens) {
  lru_.push_back(r.conversation);
  cache_[r.conversation] = Entry{tokens, r.blocks, std::prev(lru_.end())};
  cached_ += r.blocks;
  r.blocks = 0;
}

}  // namespace sluice::serving
