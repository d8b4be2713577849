#include "workloads/serving/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace sluice::serving {

BlockManager::BlockManager(int64_t total_blocks, int block_size, double watermark_fraction, bool reuse)
    : total_(total_blocks),
      free_(total_blocks),
      watermark_(static_cast<int64_t>(std::floor(watermark_fraction * static_cast<double>(total_blocks)))),
      block_size_(block_size),
      reuse_(reuse) {
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
    cache_.erase(it);
  }
  return free_ >= need;
}

bool BlockManager::grow_slow(Request& r, int64_t tokens, bool admission) {
  const int64_t need = blocks_for(tokens) - r.blocks;
  if (need <= 0) return true;
  if (!can_allocate(need, admission)) return false;
  if (!evict_until(need)) return false;
  free_ -= need;
  r.blocks += static_cast<int32_t>(need);
  return true;
}

void BlockManager::release(Request& r) {
  free_ += r.blocks;
  r.blocks = 0;
}

void BlockManager::retain(Request& r, int64_t tokens) {
  if (!reuse_ || r.turn + 1 >= r.turns_total) {  // nothing will come back for it
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
  r.blocks = 0;
}

int64_t BlockManager::claim(Request& r, int64_t max_tokens) {
  auto it = cache_.find(r.conversation);
  if (it == cache_.end()) return 0;
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

void BlockManager::restore(Request& r, int64_t tokens) {
  lru_.push_back(r.conversation);
  cache_[r.conversation] = Entry{tokens, r.blocks, std::prev(lru_.end())};
  cached_ += r.blocks;
  r.blocks = 0;
}

}  // namespace sluice::serving
