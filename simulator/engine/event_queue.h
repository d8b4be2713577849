// The event queue: a 4-ary min-heap under a total order (time, priority class, insertion sequence).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "engine/simtime.h"

namespace sluice {

class Engine;

// Priority classes break ties between events at the same nanosecond; lower runs first.
enum class Priority : uint8_t {
  Fault = 0,     // failures and repairs change the world before anything reacts to it
  Network = 1,   // flow completions and reconfigurations
  Compute = 2,   // iteration ends on devices
  Arrival = 3,   // new work entering the system
  Default = 4,
  Schedule = 5,  // decisions that look at everything that happened at this instant
  Stats = 7,     // samplers and progress, after the world settled
};

// Anything that receives events implements this; the kind and arg say what happened.
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void on_event(Engine& engine, uint32_t kind, uint32_t arg) = 0;
  // Whether a pending event (kind, arg, generation) is already void: it will do nothing when
  // delivered (a timer superseded by a later one). Asked only by scans of the queue
  // (Engine::next_event_excluding); false, the default, is always safe.
  virtual bool is_void(uint32_t kind, uint32_t arg, uint32_t generation) const {
    (void)kind, (void)arg, (void)generation;
    return false;
  }
};

// The generation an event was scheduled under (Engine::schedule_at): 24 bits are kept, so two
// generations are told apart when they differ modulo 2^24 (Generation::same compares so).
struct Generation {
  uint32_t value = 0;
  static constexpr uint32_t kMask = 0xFFFFFFu;
  constexpr Generation(uint32_t v = 0) : value(v & kMask) {}
  friend constexpr bool operator==(Generation a, Generation b) { return a.value == b.value; }
};
inline constexpr uint32_t kKindBits = 8;
inline constexpr uint32_t kMaxKind = (1u << kKindBits) - 1;

// One pending event: 32 bytes. Its kind field holds the handler's kind in the low kKindBits
// and the event's generation above them (the engine's layout, unpacked on delivery). Its key packs (time, priority, sequence) into one 128-bit
// integer, so the total order is a single unsigned comparison. Time is never negative.
struct Event {
  __uint128_t key;  // time_ns << 64 | priority << 56 | sequence
  EventHandler* target;
  uint32_t kind;
  uint32_t arg;
  int64_t time_ns() const { return static_cast<int64_t>(key >> 64); }
  uint64_t order() const { return static_cast<uint64_t>(key); }
};

// A 4-ary heap: half the depth of a binary heap, and the four children of a node sit in
// two cache lines. pop() moves the hole to a leaf along the smallest children, then sifts
// the last element up from there (Floyd's method), which saves a comparison per level.
class EventQueue {
 public:
  void reserve(size_t n) { heap_.reserve(n); }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.front(); }

  void push(SimTime t, Priority p, EventHandler* target, uint32_t kind, uint32_t arg) {
    if (seq_ >= (uint64_t{1} << 56)) throw std::overflow_error("event sequence counter exhausted (2^56 events)");
    if (t.count_ns() < 0) throw std::invalid_argument("events cannot be scheduled at negative times");
    const __uint128_t key = (static_cast<__uint128_t>(t.count_ns()) << 64) | (uint64_t(p) << 56) | seq_++;
    heap_.push_back(Event{key, target, kind, arg});
    sift_up(heap_.size() - 1, heap_.back());
  }

  Event pop() {
    Event out = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    const size_t n = heap_.size();
    if (n == 0) return out;
    // Hole from the root down to a leaf along the smallest child.
    size_t i = 0;
    for (;;) {
      const size_t c = 4 * i + 1;
      if (c + 3 < n) {
        size_t a = heap_[c + 1].key < heap_[c].key ? c + 1 : c;
        size_t b = heap_[c + 3].key < heap_[c + 2].key ? c + 3 : c + 2;
        size_t best = heap_[b].key < heap_[a].key ? b : a;
        heap_[i] = heap_[best];
        i = best;
      } else if (c < n) {
        size_t best = c;
        for (size_t j = c + 1; j < n; ++j)
          if (heap_[j].key < heap_[best].key) best = j;
        heap_[i] = heap_[best];
        i = best;
      } else {
        break;
      }
    }
    sift_up(i, last);
    return out;
  }

  uint64_t inserted() const { return seq_; }
  // The first pending event in the total order whose handler is not `target` and that is not
  // void (nullptr when none): a linear scan, as earliest_excluding.
  const Event* first_excluding(const EventHandler* target, uint32_t kind_bits) const {
    const Event* best = nullptr;
    const uint32_t mask = (1u << kind_bits) - 1;
    for (const Event& e : heap_)
      if (e.target != target && (!best || e.key < best->key) && !e.target->is_void(e.kind & mask, e.arg, e.kind >> kind_bits)) best = &e;
    return best;
  }
  // The earliest time of a pending event whose handler is not `target` and that is not void
  // (INT64_MAX when none): a linear scan, for a handler that asks whether anything else can
  // act before a time. `kind_bits`: the low bits of Event::kind that hold the handler's kind.
  int64_t earliest_excluding(const EventHandler* target, uint32_t kind_bits) const {
    const Event* e = first_excluding(target, kind_bits);  // the first in the order is the earliest
    return e ? e->time_ns() : INT64_MAX;
  }

 private:
  void sift_up(size_t i, const Event e) {
    while (i > 0) {
      const size_t parent = (i - 1) >> 2;
      if (!(e.key < heap_[parent].key)) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  std::vector<Event> heap_;
  uint64_t seq_ = 0;
};

}  // namespace sluice
