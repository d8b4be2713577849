// A remote KV pool shared by a deployment's replicas (Mooncake Store: the serving servers'
// host DRAM pooled over RDMA). What a replica's lowest KV tier lets go of (a cached prefix
// evicted from HBM, or from its host or SSD tier) moves here instead of being dropped, kept in
// the host memory of the replica that let it go (its "home"); any replica whose prompt starts
// with that prefix fetches it from there over the fabric instead of prefilling it again, and
// the pool keeps its copy for the others. Least recently used entries are dropped when full.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>

namespace sluice::serving {

class RemoteKvStore {
 public:
  explicit RemoteKvStore(int64_t capacity_blocks) : capacity_(capacity_blocks) {}
  struct Entry {
    int64_t blocks;
    int64_t tokens;  // the tokens it covers (a conversation's last block may be partly filled)
    int home;        // the engine whose host memory holds it
    std::list<int32_t>::iterator lru_pos;
  };
  // Puts entry `id` (a prefix, or a conversation's cache: BlockManager's keys) of `blocks` from
  // engine `home` (an older copy replaced, the least recently used dropped to make room); false
  // when it can never fit.
  bool put(int32_t id, int64_t blocks, int64_t tokens, int home) {
    if (blocks > capacity_) {
      dropped_blocks_ += blocks;
      return false;
    }
    erase(id);
    while (used_ + blocks > capacity_) {
      const auto it = entries_.find(lru_.front());
      dropped_blocks_ += it->second.blocks;
      used_ -= it->second.blocks;
      lru_.pop_front();
      entries_.erase(it);
    }
    lru_.push_back(id);
    entries_.emplace(id, Entry{blocks, tokens, home, std::prev(lru_.end())});
    used_ += blocks;
    put_blocks_ += blocks;
    return true;
  }
  // The entry of prefix `id` (null: not here), made the most recently used.
  const Entry* use(int32_t id) {
    const auto it = entries_.find(id);
    if (it == entries_.end()) return nullptr;
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);
    return &it->second;
  }
  bool contains(int32_t id) const { return entries_.count(id) > 0; }
  int64_t capacity_blocks() const { return capacity_; }
  int64_t used_blocks() const { return used_; }
  int64_t put_blocks() const { return put_blocks_; }          // moved in so far
  int64_t dropped_blocks() const { return dropped_blocks_; }  // let go of when full

 private:
  void erase(int32_t id) {
    const auto it = entries_.find(id);
    if (it == entries_.end()) return;
    used_ -= it->second.blocks;
    lru_.erase(it->second.lru_pos);
    entries_.erase(it);
  }
  int64_t capacity_, used_ = 0, put_blocks_ = 0, dropped_blocks_ = 0;
  std::unordered_map<int32_t, Entry> entries_;
  std::list<int32_t> lru_;  // front: least recently used
};

}  // namespace sluice::serving
