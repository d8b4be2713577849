// Routing: dimension-order on regular tori and meshes (shorter way round each ring), and
// shortest paths elsewhere (Dijkstra from the destination over the links out of each node) with a
// deterministic ECMP choice among equal-cost next hops. Hosts are never transit nodes.
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <memory>
#include <stdexcept>
#include <cstdint>
#include <unordered_map>
#include <span>
#include <utility>
#include <vector>

#include "network/clos_distances.h"
#include "network/torus_distances.h"
#include "network/topology.h"

namespace sluice::net {

// A mixing hash of a few integers, for deterministic equal-cost choices.
inline uint64_t route_hash(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c * 0x94D049BB133111EBull;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  return x ^ (x >> 32);
}

// How routes are chosen: auto picks dimension-order on regular tori, shortest path elsewhere.
enum class RoutePolicy { Auto, ShortestPath, DimensionOrder };

// Computes routes on one topology; caches one distance vector per destination.
class Router {
 public:
  explicit Router(const Topology& t, RoutePolicy policy = RoutePolicy::Auto);
  // Appends the links of a route from src to dst to `out` (empty when src == dst). `salt`
  // picks among equal-cost paths, so the flows of one collective spread over them.
  void route(int src, int dst, uint64_t salt, std::vector<int>& out);
  std::vector<int> route(int src, int dst, uint64_t salt = 0) {
    std::vector<int> r;
    route(src, dst, salt, r);
    return r;
  }
  // Adaptive routing / packet spraying: how many ways a flow from src to dst is split (the
  // equal-cost choices at the first hop that has several, at most kMaxSpray; 1 when there is
  // one path or routing is dimension-order), and the route of part `part` of them: at every
  // hop with c equal-cost choices it takes choice (part + a per-hop offset) mod c, so the parts
  // spread evenly over the first branching and keep spreading past it.
  static constexpr int kMaxSpray = 16;
  int spray_width(int src, int dst);
  void route_part(int src, int dst, uint64_t salt, int part, std::vector<int>& out);
  // ECMP's hash seed: 0 is the built-in choice; another seed re-draws every equal-cost choice
  // (a switch vendor's hash function and seed), so the luck of a placement can be swept.
  // Adaptive routing's sprayed parts (route_part) do not hash with it.
  void set_hash_seed(uint64_t seed) {
    seed_mix_ = seed == 0 ? 0 : route_hash(seed, 0x5EEDull, 0x48A54ull);
    forget_routes();
    set_aside_.clear();  // their kept routes hashed with the old seed
  }
  // Sum of the per-hop latencies of a route.
  int64_t latency_ns(std::span<const int> path) const;
  bool dimension_order() const { return dor_; }
  // After links were added, failed, came back or were torn down (a failure, a repair, OCS
  // reprogramming): what was computed for the links as they were (distances, kept routes) is
  // set aside, and routing goes on from what was set aside for links exactly as they are now
  // if there is one (a repair brings back the state its failure set aside), else from nothing.
  // Routes are a function of the links' weights (weight(): up or not, bandwidth, penalty) and
  // of the ends, which only grow, so a state computed for the same weights routes every flow
  // the same way; it only saves computing them again. At most kSetAside states, of at most
  // kSetAsideBytes together, are kept (the oldest go first; one computed for fewer links or
  // nodes than there are now, which can never fit again, at once). A state of fewer than
  // min_set_aside_bytes() (16 MiB: a small fabric's) is not kept: computing it again costs less
  // than allocating a fresh one at every failure and repair, so its memory is reused instead.
  void invalidate();
  size_t min_set_aside_bytes() const { return min_set_aside_; }
  void set_min_set_aside_bytes(size_t bytes) { min_set_aside_ = bytes; }  // (tests: 0 keeps every state)
  // How many times invalidate() found a state set aside for the links as they are.
  uint64_t revived() const { return revived_; }
  size_t set_aside() const { return set_aside_.size(); }
  // Distance vectors the current state holds (a Dijkstra's each: a composed destination has none).
  size_t distance_vectors() const { return cur_.dist.size(); }
  // Off: every destination keeps its own Dijkstra (tests compare the composed routes with them).
  void set_compose(bool on) { compose_ = on; }
  // Off: a Clos fabric's or a torus's distances are searched as any fabric's (tests compare the
  // structural ones with them). On (the default), a fabric that ClosDistances::detect accepts has
  // its distances to every GPU computed from its structure while every link is up, and a route
  // inside a torus or OCS slice that TorusDistances::detect accepts (with the links as they are
  // now) has them from its coordinates.
  void set_structural(bool on) { structural_ = on; }
  // Whether the last distances asked for came from the structure (tests).
  bool structural() const { return (clos_ != nullptr && clos_on_) || torus_on_; }
  // Routes walked by route() (shortest-path routing): once a key each while the ring of recent
  // walks holds it (tests; a smaller ring: set_walked_capacity, in integers, before any route).
  uint64_t walks() const { return walks_; }
  // For the run summary's routes line: every shortest-path walk (route(), route_part(), a dimension-order route's
  // detour), those whose distances came from the structure (a Clos, dragonfly, torus or OCS
  // slice: no search), and the searches (a Dijkstra started, or started again past a torn-down
  // circuit) the rest needed.
  struct WalkStats {
    uint64_t walks = 0, structural = 0, searches = 0;
  };
  const WalkStats& walk_stats() const { return walk_stats_; }
  void set_walked_capacity(size_t ints) {
    if (walked_) throw std::logic_error("Router::set_walked_capacity: routes were walked already");
    walked_cap_ = std::bit_ceil(std::max<size_t>(ints, kWalkHeader + kMaxKeptHops));
  }
  const Topology& topology() const { return t_; }

 private:
  void route_dor(int src, int dst, uint64_t salt, std::vector<int>& out) const;
  // The shortest-path walk: part < 0 picks by hash, else route_part's choice.
  void route_walk(int src, int dst, uint64_t salt, int part, std::vector<int>& out);
  // Where distance vectors live: chunks of memory the router keeps (on Linux, asked for in
  // huge pages), carved in order and reused after invalidate(). A 100k-GPU fat-tree asks for
  // thousands of half-megabyte vectors; from malloc each page of each was a fault of its own.
  class DistArena {
   public:
    DistArena() = default;
    DistArena(const DistArena&) = delete;
    DistArena& operator=(const DistArena&) = delete;
    DistArena(DistArena&& o) noexcept { swap(o); }
    DistArena& operator=(DistArena&& o) noexcept {  // (o takes this one's chunks, freed with it)
      swap(o);
      return *this;
    }
    ~DistArena();
    int32_t* take(size_t n);  // n int32s, uninitialised, valid until reset()
    void reset() { chunk_ = 0, used_ = 0; }
    void swap(DistArena& o) noexcept {
      chunks_.swap(o.chunks_);
      std::swap(chunk_, o.chunk_);
      std::swap(used_, o.used_);
    }
    size_t bytes() const {
      size_t b = 0;
      for (const Chunk& c : chunks_) b += c.bytes;
      return b;
    }

   private:
    struct Chunk {
      void* p;
      size_t bytes;
    };
    std::vector<Chunk> chunks_;
    size_t chunk_ = 0, used_ = 0;  // the chunk being carved, and its bytes taken
  };
  // A distance per node, the max (unknown) where none was written.
  class DistVec {
   public:
    void reset(DistArena& a, size_t n) {
      p_ = a.take(n);
      std::fill(p_, p_ + n, std::numeric_limits<int32_t>::max());
    }
    int32_t operator[](size_t v) const { return p_[v]; }
    void set(size_t v, int32_t d) { p_[v] = d; }

   private:
    int32_t* p_ = nullptr;
  };
  // Distances to one destination, settled as far as routes have needed them: a Dijkstra
  // (Dial's buckets) that stops once it has settled every node up to the distance a route
  // asks for, and resumes from its frontier when a route needs more. A node nearer than
  // `settled_below` holds its exact distance; any other holds a tentative one (never below
  // its true distance) or the max (so does, once a run finished partial, every node past a
  // torn-down circuit: unknown). A walk from src reads only nodes no farther than src
  // as candidates (dist(w) + w(v, w) == dist(v) <= dist(src)), so with every node up to
  // dist(src) settled it finds the same candidates as a finished run would give, and a
  // route inside one plane of a 100k-GPU rail-optimized fat-tree settles about its plane
  // instead of the whole cluster. The frontier is not kept: it is every node with a
  // tentative distance, found again by a scan of the vector when the run resumes.
  struct DistState {
    int dst = -1;
    DistVec dist;
    size_t next_bucket = 0;          // the buckets below it are done
    int64_t settled_below = 0;       // next_bucket's first distance; the max once finished
    bool finished = false;           // every bucket and the heap done (or stopped at a torn-down circuit)
    bool partial = false;            // finished, but stopped before a torn-down circuit's weight
  };
  // Distances to a destination as a walk reads them: the destination's own Dijkstra, or (a
  // device whose neighbours are switches, with no torn-down link in the weights) composed
  // from its neighbours' distances over its first hop, min_u w(dst,u) + d(u, .): the same
  // numbers, without a distance vector per device (on a 16k-GPU fat-tree, 16k of them).
  // A neighbour that is a dead end (a server's NVSwitch: every link of it to a device, each of
  // whose other links go to switches) is composed one level further, so it needs no Dijkstra
  // of its own either: a path from dst through it either ends at one of its devices (`near`:
  // w(dst,u) + w(u,g)), stops at it (w(dst,u)), or leaves through a device g to a switch x,
  // w(dst,u) + w(u,g) + w(g,x) + d(x, .) (a term per x, its least weight). Every term is a
  // path's length and every shortest path is among them, so the minimum is exact.
  struct Dist {
    static constexpr int kMaxVia = 4;     // a device with more neighbours keeps its own Dijkstra
    static constexpr int kMaxTerms = 12;  // distance vectors composed
    static constexpr int kMaxNear = 20;   // single nodes at a fixed distance (a dead end and its devices)
    DistState* whole = nullptr;
    const ClosDistances* clos = nullptr;  // from the fabric's structure (tg): no vector at all
    ClosDistances::Target tg;
    const TorusDistances* torus = nullptr;  // from a torus's coordinates (tt): no vector either
    TorusDistances::Target tt;
    std::array<int32_t, kMaxTerms> via_w{};                    // a path's weight to a switch ...
    std::array<DistState*, kMaxTerms> via{};                   // ... and that switch's distances
    std::array<std::pair<int32_t, int32_t>, kMaxNear> near{};  // (node, distance)
    int vias = 0, nears = 0, dst = -1;
    int32_t near_lo = std::numeric_limits<int32_t>::max(), near_hi = -1;
    int32_t operator[](size_t w) const {
      if (whole) return whole->dist[w];
      if (clos) return clos->dist(tg, static_cast<int>(w));
      if (torus) return torus->dist(tt, static_cast<int>(w));
      if (static_cast<int>(w) == dst) return 0;
      int64_t best = std::numeric_limits<int32_t>::max();
      for (int i = 0; i < vias; ++i) {
        const int32_t x = via[static_cast<size_t>(i)]->dist[w];
        if (x != std::numeric_limits<int32_t>::max()) best = std::min<int64_t>(best, static_cast<int64_t>(via_w[static_cast<size_t>(i)]) + x);
      }
      if (static_cast<int32_t>(w) >= near_lo && static_cast<int32_t>(w) <= near_hi)
        for (int i = 0; i < nears; ++i)
          if (near[static_cast<size_t>(i)].first == static_cast<int32_t>(w)) best = std::min<int64_t>(best, near[static_cast<size_t>(i)].second);
      return static_cast<int32_t>(best);
    }
    void add_term(int32_t w, DistState* v) {
      for (int i = 0; i < vias; ++i)
        if (via[static_cast<size_t>(i)] == v) {
          via_w[static_cast<size_t>(i)] = std::min(via_w[static_cast<size_t>(i)], w);
          return;
        }
      if (vias == kMaxTerms) throw std::logic_error("Router::Dist: more composed terms than it holds");
      via_w[static_cast<size_t>(vias)] = w;
      via[static_cast<size_t>(vias++)] = v;
    }
    void add_near(int32_t node, int32_t w) {
      if (nears == kMaxNear) throw std::logic_error("Router::Dist: more fixed distances than it holds");
      near[static_cast<size_t>(nears++)] = {node, w};
      near_lo = std::min(near_lo, node);
      near_hi = std::max(near_hi, node);
    }
  };
  // Composes dead end u (reached from dst over a link of weight wu) into d, or returns false
  // (u is no dead end, or the terms would not fit) leaving d as it was.
  // `rest`: dst's links still to be added after u's (each may need a term of its own).
  bool compose_dead_end(int u, int dst, int32_t wu, int rest, Dist& d);
  Dist distances(int src, int dst);
  void ensure_weights();
  // The state of dst's distances, created (nothing settled) when first asked.
  DistState& dist_state(int dst);
  // s as a fresh run to dst: every distance unknown but dst's own 0, nothing settled.
  void start_state(DistState& s, int dst);
  // Settles every node of s at distance <= bound (all of them, and the heap past the buckets,
  // when bound reaches past the buckets), or fewer: only up to the bucket where node `until`
  // (when >= 0) is settled. Unless `complete`, the heap stops before a torn-down circuit's
  // weight (the rest left unknown, the max): what every route over live links needs,
  // without exploring the whole of a large pod whose idle circuits are down.
  void settle(DistState& s, int64_t bound, bool complete, int until = -1);
  // Settles s until node v is settled (or s is finished).
  void settle_node(DistState& s, int v);
  // Settles every term of d as far as a walk from src reads it.
  void settle_for(Dist& d, int src);
  int32_t weight(int link) const;
  int32_t static_weight(int link) const;
  std::vector<int32_t> static_w_;  // static_weight() per link (links added later: computed when asked)
  const Topology& t_;
  bool dor_ = false;
  std::vector<int> torus_link_;  // node * 6 + 2 * dim + (0: +, 1: -) -> link id, -1 when none
  // A link out of a node: its far end, its weight and its id (State::arc).
  struct Arc {
    int32_t to, w, link;
  };
  std::vector<uint64_t> heap_;  // the Dijkstra's queue beyond its buckets, (distance << 32 | node), kept for its capacity
  // The Dijkstra's buckets of nodes by distance / kBucketWidth (see settle), kept for their capacity.
  std::vector<std::vector<uint32_t>> buckets_;
  std::vector<int32_t> settled_;  // the Dijkstra's settled marks: a settle() call's stamp (no clearing between calls)
  int32_t stamp_ = 0;
  std::vector<int> cand_;
  uint64_t seed_mix_ = 0;
  // Hashed routes already walked (route(), shortest-path routing): the same (src, dst, salt)
  // walks the same links until invalidate(), and a training iteration's collectives and
  // hand-offs ask for the same ones every micro-batch. A route is kept the second time it is
  // asked for (seen_, a fixed table of the keys asked once, by hash: serving's per-request
  // salts, asked once each, never fill the map), its links in cur_.route_pool; at most
  // kRoutesKept routes and kRoutePoolMax links (past either, routes are walked, not kept):
  // about 200 MB at most beside seen_'s 16 MB.
  void forget_routes() {
    cur_.kept_n = 0;
    cur_.route_pool.clear();
    if (++cur_.seen_epoch == 0) {  // wrapped: 0 marks a slot never written, so start clean at 1
      std::fill(cur_.kept.begin(), cur_.kept.end(), Kept{});
      cur_.seen_epoch = 1;
    }  // (else a kept slot of an older epoch is empty)
    forget_seen();
  }
  // The keys asked once are the router's, not a state's (they only decide when a route is kept,
  // never which): a change of the links forgets them, and a state set aside or revived leaves
  // the table where it is (a fresh one a change would cost 16 MB to allocate and clear).
  void forget_seen() {
    if (++seen_stamp_ == 0) {
      std::fill(seen_.begin(), seen_.end(), Seen{});
      seen_stamp_ = 1;
    }
  }
  struct RouteKey {
    uint64_t ends, salt;  // src << 32 | dst
    bool operator==(const RouteKey& o) const { return ends == o.ends && salt == o.salt; }
  };
  struct RouteKeyHash {
    size_t operator()(const RouteKey& k) const {
      return static_cast<size_t>((k.ends * 0x9E3779B97F4A7C15ull) ^ ((k.salt + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull));
    }
  };
  static constexpr size_t kRoutePoolMax = size_t{1} << 24, kRoutesKept = size_t{1} << 21, kSeen = size_t{1} << 20;
  // The kept routes: an open-addressed table (linear probing, at most half full) of slots of
  // this epoch, each its key and its links' place in cur_.route_pool (at << 8 | count); one
  // probe or two per lookup where a node-based map chased three pointers.
  struct Kept {
    RouteKey key{};
    uint32_t at_len = 0;
    uint32_t epoch = 0;
  };
  static constexpr size_t kMaxKeptHops = 255;  // a longer route is walked every time
  static uint64_t kept_hash(const RouteKey& key) { return RouteKeyHash{}(key) | 1; }  // (never 0: a Seen slot's empty hash)
  const Kept* find_kept(const RouteKey& key, uint64_t h) const;
  void keep(const RouteKey& key, uint64_t h, uint32_t at, uint32_t len);
  struct Seen {
    uint64_t hash = 0;
    uint32_t epoch = 0;
    uint32_t walked = 0;  // where its walk went in walked_: the low 32 bits of walked_head_ then
  };
  std::vector<Seen> seen_;  // kSeen slots once a route is asked for, stamped seen_stamp_
  uint32_t seen_stamp_ = 1;
  // The routes walked lately, so that the second ask (the one that keeps a route) and any ask
  // once the kept table is full copy the first walk instead of walking again: a ring of
  // walked_cap_ integers (a power of two), each entry its key (src, dst, salt's two halves), its
  // hop count, the seen_stamp_ it was walked under and its links, written at walked_head_
  // (integers written since the start; an entry never straddles the ring's end). An entry is
  // found from its key's Seen slot and read only while the ring has not come round to it and its
  // key and stamp match, so serving's one-off routes cycle through it in fixed memory (16 MiB)
  // and never crowd out the routes asked again. It needs no clearing: a change of the links
  // moves seen_stamp_, and an entry of another stamp is never read. A route of more than
  // kMaxKeptHops links is not put in it (walked at every ask).
  static constexpr size_t kWalkHeader = 6;
  std::unique_ptr<int32_t[]> walked_;
  size_t walked_cap_ = size_t{1} << 22;
  uint64_t walked_head_ = 0;
  uint64_t walks_ = 0;  // route walks (route_walk calls from route())
  WalkStats walk_stats_;
  void remember_walk(const RouteKey& key, std::span<const int> links, Seen& seen);
  const int32_t* walked_route(const RouteKey& key, const Seen& seen, size_t& hops) const;
  // Everything computed for one set of link weights: what invalidate() sets aside and brings
  // back (a default State is nothing computed yet). The router routes from cur_.
  struct State {
    DistArena arena;                          // (before dist: outlives the vectors it holds)
    std::unordered_map<int, DistState> dist;  // (references stay valid as it grows, and when it moves)
    std::vector<int32_t> weights;   // weight() per link (ensure_weights)
    std::vector<int32_t> link_dst;  // each link's far end, beside its weight
    // The links out of each node in out_links order, with their far end and weight side by side
    // (compressed rows: node v's are arc[arc_at[v] .. arc_at[v + 1]]): what the Dijkstra and
    // the walk read, contiguous instead of a vector per node and a lookup per link.
    std::vector<int32_t> arc_at;
    std::vector<Arc> arc;
    bool weights_down = false;  // some link in weights is torn down (weight 1 << 26)
    int32_t min_weight = 0;     // the lightest link's weight (buckets need it at least their width)
    // Kept routes (route()): the table, its count, their links, and its epoch (a slot of
    // another epoch is empty).
    std::vector<Kept> kept;
    size_t kept_n = 0;
    std::vector<int32_t> route_pool;
    uint32_t seen_epoch = 1;
    size_t bytes() const;
  };
  State cur_;
  static constexpr size_t kSetAside = 4, kSetAsideBytes = size_t{1} << 30;
  std::vector<std::unique_ptr<State>> set_aside_;  // most recent first
  size_t min_set_aside_ = size_t{16} << 20;
  uint64_t revived_ = 0;
  bool compose_ = true;
  bool structural_ = true;
  // The fabric's structure (ClosDistances::detect) for the topology's size it was found at:
  // found again once links or nodes were added (storage servers, circuits).
  std::unique_ptr<ClosDistances> clos_;
  int clos_nodes_ = -1, clos_links_ = -1;
  bool clos_on_ = false;
  // The tori and slices whose links are as their coordinates say (TorusDistances::detect), for the
  // topology's size and the links' weights (weights_epoch_, counted by invalidate()) it was found at.
  std::unique_ptr<TorusDistances> torus_;
  int torus_nodes_ = -1, torus_links_ = -1;
  uint64_t torus_epoch_ = 0, weights_epoch_ = 1;
  bool torus_on_ = false;
};

}  // namespace sluice::net
