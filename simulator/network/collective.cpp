#include "network/collective.h"

#include <algorithm>
#include <numeric>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "registry/registry.h"

namespace sluice::net {

namespace {
struct NameOf {
  CollectiveKind k;
  const char* n;
};
constexpr NameOf kNames[] = {
    {CollectiveKind::AllReduceRing, "allreduce-ring"},   {CollectiveKind::AllReduceTree, "allreduce-tree"},
    {CollectiveKind::AllReduceHierarchical, "allreduce-hierarchical"}, {CollectiveKind::AllGather, "allgather"},
    {CollectiveKind::ReduceScatter, "reducescatter"},    {CollectiveKind::AllToAll, "alltoall"},
    {CollectiveKind::SendRecv, "sendrecv"},            {CollectiveKind::AllReduceNcclTree, "allreduce-nccl-tree"},
    {CollectiveKind::AllReduceAuto, "allreduce-auto"},     {CollectiveKind::AllReduceNvls, "allreduce-nvls"},
    {CollectiveKind::AllToAllHierarchical, "alltoall-hierarchical"},
};
// The group's devices by the reducing NVSwitch each is linked to (in order of first
// appearance); empty when a device has none.
std::vector<std::vector<int>> by_nvls_switch(const Topology& topo, const std::vector<int>& devices, std::vector<int>* switches = nullptr) {
  std::vector<int> keys;
  std::vector<std::vector<int>> groups;
  for (int d : devices) {
    const int sw = nvls_switch(topo, d);
    if (sw < 0) return {};
    auto it = std::find(keys.begin(), keys.end(), sw);
    if (it == keys.end()) {
      keys.push_back(sw);
      groups.push_back({d});
    } else {
      groups[static_cast<size_t>(it - keys.begin())].push_back(d);
    }
  }
  if (switches) *switches = keys;
  return groups;
}

// NCCL's channels for a group: one per device a server holds when two or more servers hold
// the same number (>= 2) each (one per NIC, rails), else one.
int channel_count(const std::vector<std::vector<int>>& servers) {
  const size_t m = servers.front().size();
  if (servers.size() < 2 || m < 2) return 1;
  for (const auto& sv : servers)
    if (sv.size() != m) return 1;
  return static_cast<int>(m);
}

// Server order of NCCL's two trees: the first a binary heap over the servers in order, the
// second over them reversed, so the first tree's leaves are the second's inner nodes.
int tree_server(int t, int q, int K) { return t == 0 ? q : K - 1 - q; }

int default_tree_chunks(double tree_bytes, int asked) {
  if (asked > 0) return asked;
  return static_cast<int>(std::clamp(std::ceil(tree_bytes / (1024.0 * 1024.0)), 1.0, 64.0));
}

// Tag layout: op index (20 bits) | from position (22 bits) | info (22 bits).
uint64_t make_tag(size_t op, int from, uint64_t info) {
  return (static_cast<uint64_t>(op) << 44) | (static_cast<uint64_t>(from) << 22) | (info & 0x3FFFFF);
}
}  // namespace

std::vector<std::vector<int>> by_server(const Topology& topo, const std::vector<int>& devices) {
  std::vector<int> keys;
  std::vector<std::vector<int>> servers;
  for (int d : devices) {
    const int g = topo.torus ? -1 : topo.node(d).group;
    auto it = g < 0 ? keys.end() : std::find(keys.begin(), keys.end(), g);
    if (it == keys.end()) {
      keys.push_back(g);
      servers.push_back({d});
    } else {
      servers[static_cast<size_t>(it - keys.begin())].push_back(d);
    }
  }
  return servers;
}

int nvls_switch(const Topology& topo, int device) {
  for (int l : topo.out_links(device)) {
    const NodeInfo& n = topo.node(topo.link(l).dst);
    if (n.kind == NodeKind::Switch && n.reduces && topo.link(l).up) return topo.link(l).dst;
  }
  return -1;
}

void require_nvls(const Topology& topo, const std::vector<int>& devices, const std::string& key) {
  for (int d : devices)
    if (nvls_switch(topo, d) < 0)
      throw std::runtime_error(fmt::format("{} allreduce-nvls: device {} is not on an NVSwitch with NVLink SHARP (the topology's "
                                           "nvls: true; HGX H100/H200 have it, A100 does not); valid: allreduce-ring, allreduce-auto",
                                           key, topo.node(d).name));
  const auto groups = by_nvls_switch(topo, devices);
  for (const auto& g : groups)
    if (g.size() != groups.front().size())
      throw std::runtime_error(fmt::format("{} allreduce-nvls: the group's NVSwitches hold {} and {} of its devices; NVLS across "
                                           "switches needs the same number on each; valid: allreduce-ring, allreduce-auto",
                                           key, groups.front().size(), g.size()));
}

void require_even_servers(const Topology& topo, const std::vector<int>& devices, const std::string& key) {
  const auto servers = by_server(topo, devices);
  for (const auto& sv : servers)
    if (sv.size() != servers.front().size())
      throw std::runtime_error(fmt::format("{} hierarchical: the group's servers hold {} and {} of its devices ({} and {}); it needs the "
                                           "same number on each (a rail a local rank); valid: flat, or a placement that fills whole servers",
                                           key, servers.front().size(), sv.size(), topo.node(servers.front().front()).name,
                                           topo.node(sv.front()).name));
}

const char* collective_name(CollectiveKind k) {
  for (const auto& x : kNames)
    if (x.k == k) return x.n;
  return "?";
}
std::vector<std::pair<std::string, CollectiveKind>> tp_allreduces() {
  std::vector<std::pair<std::string, CollectiveKind>> v;
  for (const CollectiveKind k : {CollectiveKind::AllReduceRing, CollectiveKind::AllReduceNvls, CollectiveKind::AllReduceAuto})
    v.emplace_back(collective_name(k), k);
  return v;
}
std::optional<CollectiveKind> parse_collective(const std::string& name) {
  for (const auto& x : kNames)
    if (name == x.n) return x.k;
  return std::nullopt;
}
std::vector<std::string> collective_names() {
  std::vector<std::string> v;
  for (const auto& x : kNames) v.emplace_back(x.n);
  return v;
}

Collective::Collective(FlowSim& sim, CollectiveKind kind, std::vector<int> devices, double bytes, CollectiveOptions opt)
    : sim_(sim), kind_(kind), devices_(std::move(devices)), bytes_(bytes), opt_(opt) {
  if (devices_.empty()) throw std::invalid_argument("a collective needs at least one device");
  if (devices_.size() >= (1u << 22)) throw std::invalid_argument("a collective over more than 4M devices");
  if (kind_ == CollectiveKind::SendRecv && devices_.size() != 2)
    throw std::invalid_argument(fmt::format("send/recv needs exactly 2 devices, got {}", devices_.size()));
  if (opt_.chunks < 1 || opt_.paths < 1) throw std::invalid_argument("chunks and paths must be at least 1");
  if (!opt_.a2a_weights.empty() && opt_.a2a_weights.size() != devices_.size())
    throw std::invalid_argument(fmt::format("{} all-to-all weights for {} devices", opt_.a2a_weights.size(), devices_.size()));
  algorithm_ = kind_ == CollectiveKind::AllReduceAuto ? allreduce_choice(sim_.topology(), sim_.router(), devices_, bytes_, opt_).choice : kind_;
  plan();
}

void Collective::plan() {
  const int n = static_cast<int>(devices_.size());
  auto ring = [&](std::vector<int> dev, double chunk, int steps) {
    Op o{Op::Ring, std::move(dev)};
    o.chunk_bytes = chunk;
    o.steps = steps;
    return o;
  };
  // Across groups (servers, or NVSwitches), one ring per local rank through every group's
  // device of that rank, each all-reducing `per_rank` bytes: the middle of a hierarchical
  // all-reduce, its rails.
  auto rails = [&](const std::vector<std::vector<int>>& groups, double per_rank) {
    const int K = static_cast<int>(groups.size()), M = static_cast<int>(groups.front().size());
    std::vector<Op> ops;
    for (int r = 0; r < M; ++r) {
      std::vector<int> d;
      for (int k = 0; k < K; ++k) d.push_back(groups[static_cast<size_t>(k)][static_cast<size_t>(r)]);
      ops.push_back(ring(d, per_rank / K, 2 * (K - 1)));
    }
    return ops;
  };
  // Rings run as NCCL's channels, each carrying its share of the bytes.
  auto rings = [&](int steps) {
    const auto orders = opt_.channels == 1 ? std::vector<std::vector<int>>{devices_} : ring_channels(sim_.topology(), devices_);
    const double share = bytes_ / static_cast<double>(orders.size());
    std::vector<Op> ops;
    for (const auto& order : orders) ops.push_back(ring(order, share / n, steps));
    return ops;
  };
  switch (algorithm_) {
    case CollectiveKind::AllReduceRing:
    case CollectiveKind::AllReduceAuto:  // resolved in the constructor; never left
      phases_.push_back(rings(2 * (n - 1)));
      break;
    case CollectiveKind::AllReduceNcclTree:
      phases_.push_back(nccl_trees());
      break;
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
      phases_.push_back(rings(n - 1));
      break;
    case CollectiveKind::AllToAll: {
      Op o{Op::AllToAll, devices_};
      o.chunk_bytes = bytes_ / n / opt_.paths;
      phases_.push_back({o});
      break;
    }
    case CollectiveKind::AllToAllHierarchical:
      plan_hierarchical_alltoall();
      break;
    case CollectiveKind::SendRecv: {
      Op o{Op::Send, devices_};
      o.chunk_bytes = bytes_;
      phases_.push_back({o});
      break;
    }
    case CollectiveKind::AllReduceTree: {
      std::vector<int> parent(static_cast<size_t>(n));
      for (int p = 0; p < n; ++p) parent[static_cast<size_t>(p)] = p == 0 ? -1 : (p - 1) / 2;
      phases_.push_back({tree_op(devices_, std::move(parent), bytes_, opt_.chunks)});
      break;
    }
    case CollectiveKind::AllReduceNvls: {
      // NVLink SHARP: each device's share of the buffer is read-reduced by its NVSwitch and the
      // result multicast back (NCCL's NVLS: multimem ld_reduce and st), so a device sends and
      // receives S(1 + 1/M) over its NVLink instead of a ring's 2(M-1)/M S each way. Across
      // servers (NCCL's NVLS with a network part): the switches reduce-scatter (a device sends
      // S, receives S/M), each local rank all-reduces its S/M with its peers in the other
      // servers by a ring (one per rail), and the switches all-gather (sends S/M, receives S).
      std::vector<int> switches;
      const auto groups = by_nvls_switch(sim_.topology(), devices_, &switches);
      if (groups.empty())
        throw std::invalid_argument(fmt::format("allreduce-nvls: a device of the group is not on an NVSwitch with NVLink SHARP "
                                                "(topology key nvls: true); valid: allreduce-ring, allreduce-nccl-tree, allreduce-auto"));
      const int K = static_cast<int>(groups.size()), M = static_cast<int>(groups.front().size());
      for (const auto& g : groups)
        if (static_cast<int>(g.size()) != M)
          throw std::invalid_argument(fmt::format("allreduce-nvls: NVSwitches hold {} and {} of the devices; it needs the same number on each", M, g.size()));
      auto sw_op = [&](int k, double up, double down) {
        Op o{Op::Switch, groups[static_cast<size_t>(k)]};
        o.sw = switches[static_cast<size_t>(k)];
        o.chunk_bytes = up;
        o.down_bytes = down;
        return o;
      };
      const double S = bytes_, m = static_cast<double>(M);
      if (K == 1) {
        phases_.push_back({sw_op(0, S * (1 + 1 / m), S * (1 + 1 / m))});
        break;
      }
      std::vector<Op> rs, ag;
      for (int k = 0; k < K; ++k) {
        rs.push_back(sw_op(k, S, S / m));
        ag.push_back(sw_op(k, S / m, S));
      }
      phases_.push_back(std::move(rs));
      phases_.push_back(rails(groups, S / m));
      phases_.push_back(std::move(ag));
      break;
    }
    case CollectiveKind::AllReduceHierarchical: {
      // Groups are the devices' servers (or cubes), whatever order the devices come in: a
      // data-parallel set with several devices per server reduce-scatters inside each server
      // over its fast links, all-reduces across servers per local rank, then all-gathers. A set
      // with one device per server has nothing to do inside servers: that is the ring.
      std::vector<std::vector<int>> groups_of;
      if (opt_.group_size > 0) {
        if (n % opt_.group_size != 0)
          throw std::invalid_argument(fmt::format("hierarchical all-reduce: {} devices do not split into groups of {}", n, opt_.group_size));
        for (int k = 0; k < n / opt_.group_size; ++k)
          groups_of.emplace_back(devices_.begin() + k * opt_.group_size, devices_.begin() + (k + 1) * opt_.group_size);
      } else {
        std::vector<int> keys;
        for (int d : devices_) {
          const int gk = sim_.topology().node(d).group;
          auto it = std::find(keys.begin(), keys.end(), gk);
          if (gk < 0 || it == keys.end()) {
            keys.push_back(gk);
            groups_of.push_back({d});
          } else {
            groups_of[static_cast<size_t>(it - keys.begin())].push_back(d);
          }
        }
      }
      const int g = static_cast<int>(groups_of.front().size());
      for (const auto& grp : groups_of)
        if (static_cast<int>(grp.size()) != g)
          throw std::invalid_argument(fmt::format("hierarchical all-reduce: servers hold {} and {} of the devices; it needs the same number in each",
                                                  g, grp.size()));
      std::vector<Op> intra_rs, intra_ag;
      for (const auto& grp : groups_of) {
        intra_rs.push_back(ring(grp, bytes_ / g, g - 1));
        intra_ag.push_back(ring(grp, bytes_ / g, g - 1));
      }
      phases_.push_back(std::move(intra_rs));
      phases_.push_back(rails(groups_of, bytes_ / g));
      phases_.push_back(std::move(intra_ag));
      break;
    }
  }
}

Collective::Op Collective::tree_op(std::vector<int> dev, std::vector<int> parent, double bytes, int chunks) {
  Op o{Op::Tree, std::move(dev)};
  const int n = static_cast<int>(o.dev.size());
  o.chunks = chunks;
  o.chunk_bytes = bytes / chunks;
  o.parent = std::move(parent);
  std::vector<int> count(static_cast<size_t>(n) + 1, 0);
  for (int p = 0; p < n; ++p) {
    const int q = o.parent[static_cast<size_t>(p)];
    if (q < 0) o.root = p;
    else ++count[static_cast<size_t>(q) + 1];
  }
  o.kid_off.assign(static_cast<size_t>(n) + 1, 0);
  for (int p = 0; p < n; ++p) o.kid_off[static_cast<size_t>(p) + 1] = o.kid_off[static_cast<size_t>(p)] + count[static_cast<size_t>(p) + 1];
  o.kids.assign(static_cast<size_t>(std::max(0, n - 1)), 0);
  std::vector<int> fill(o.kid_off.begin(), o.kid_off.end() - 1);
  for (int p = 0; p < n; ++p)  // children in ascending position: a heap's 2p+1 before 2p+2
    if (const int q = o.parent[static_cast<size_t>(p)]; q >= 0) o.kids[static_cast<size_t>(fill[static_cast<size_t>(q)]++)] = p;
  for (int p = 0; p < n; ++p)
    if (o.kid_off[static_cast<size_t>(p) + 1] - o.kid_off[static_cast<size_t>(p)] > 3)
      throw std::logic_error("a tree node with more than three children");
  return o;
}

// NCCL's tree all-reduce: per channel, each server's devices form a chain starting at the
// channel's local rank (its head, whose NIC the channel crosses the network through); the
// heads form two binary trees over the servers (the second over them reversed), each carrying
// half of the channel's share, reduced up and broadcast down in pipelined chunks.
std::vector<Collective::Op> Collective::nccl_trees() const {
  const auto servers = by_server(sim_.topology(), devices_);
  const int K = static_cast<int>(servers.size()), m = channel_count(servers);
  const double tree_bytes = bytes_ / (2.0 * m);
  const int chunks = default_tree_chunks(tree_bytes, opt_.tree_chunks);
  std::vector<Op> ops;
  for (int c = 0; c < m; ++c)
    for (int t = 0; t < 2; ++t) {
      std::vector<int> dev, parent, head(static_cast<size_t>(K));
      for (int k = 0; k < K; ++k) {  // chains: head first
        const auto& sv = servers[static_cast<size_t>(k)];
        const int M = static_cast<int>(sv.size());
        head[static_cast<size_t>(k)] = static_cast<int>(dev.size());
        for (int i = 0; i < M; ++i) {
          dev.push_back(sv[static_cast<size_t>((c + i) % M)]);
          parent.push_back(i == 0 ? -1 : static_cast<int>(dev.size()) - 2);
        }
      }
      for (int q = 1; q < K; ++q)  // heads: a binary heap over the tree's server order
        parent[static_cast<size_t>(head[static_cast<size_t>(tree_server(t, q, K))])] = head[static_cast<size_t>(tree_server(t, (q - 1) / 2, K))];
      ops.push_back(tree_op(std::move(dev), std::move(parent), tree_bytes, chunks));
    }
  return ops;
}

AllReduceEstimate allreduce_choice(const Topology& topo, Router& router, const std::vector<int>& devices, double bytes,
                                   const CollectiveOptions& opt) {
  AllReduceEstimate e;
  const double n = static_cast<double>(devices.size());
  if (devices.size() < 2) return e;
  const auto servers = by_server(topo, devices);
  const int K = static_cast<int>(servers.size()), m = channel_count(servers);
  size_t M = 0;
  for (const auto& sv : servers) M = std::max(M, sv.size());
  auto hop = [&](int a, int b, double& lat_ns, double& bw) {
    const auto path = router.route(a, b);
    lat_ns = static_cast<double>(router.latency_ns(path));
    bw = std::numeric_limits<double>::infinity();
    for (int l : path) bw = std::min(bw, topo.link(l).bandwidth_Bps);
  };
  double lat_in = 0, bw_in = std::numeric_limits<double>::infinity(), lat_out = 0, bw_out = bw_in;
  for (const auto& sv : servers)
    if (sv.size() >= 2) {
      hop(sv[0], sv[1], lat_in, bw_in);
      break;
    }
  if (K >= 2) hop(servers[0][0], servers[1][0], lat_out, bw_out);
  const double S = bytes;
  // A fused collective stands for `fused` back-to-back ones: each pays its latencies (the tree
  // is not run fused: it is left out).
  const double fused = opt.fused();
  // Ring: 2(n-1) steps, each device forwarding as its step arrives, so the latency is twice a
  // lap of the ring (K crossings between servers, the other hops inside); each channel's
  // crossing has a NIC to itself.
  const double ring_lat = 2 * (n - 1) / n * (K * (K >= 2 ? lat_out : lat_in) + (n - K) * lat_in);
  const double ring_bw = K >= 2 ? m * bw_out : bw_in;
  e.ring_ns = fused * ring_lat + 2 * (n - 1) / n * S / ring_bw * 1e9;
  // Tree: chain hops inside, heap levels between servers, up and down.
  const double levels = K >= 2 ? std::floor(std::log2(static_cast<double>(K))) : 0;
  const double depth_hops = static_cast<double>(M - 1) + levels;
  double busiest = 0;  // a head's tree edges per direction, both trees (each carries S / (2m))
  for (int k = 0; k < K; ++k) {
    double edges = 0;
    for (int t = 0; t < 2; ++t) {
      const int q = tree_server(t, k, K);  // its place in tree t (the orders are their own inverses)
      edges += (q > 0 ? 1 : 0) + (2 * q + 1 < K ? 1 : 0) + (2 * q + 2 < K ? 1 : 0);
    }
    busiest = std::max(busiest, edges);
  }
  const int chunks = default_tree_chunks(S / (2.0 * m), opt.tree_chunks);
  const double tree_bytes = S / (2.0 * m), chunk = tree_bytes / chunks;
  // Each chunk crosses an edge after the previous one: every further chunk adds a hop's latency.
  auto edge_ns = [&](double edge_bytes, double bw, double lat) { return edge_bytes / bw * 1e9 + (chunks - 1) * lat; };
  const double out_ns = K >= 2 ? edge_ns(busiest * tree_bytes, bw_out, lat_out) : 0;
  // Inside a server a chain device sends up (unless it is the head) and down (unless it is the
  // tail) in every tree of every channel: with the channels' heads rotating, 2(m-1)/m S a device.
  std::vector<double> per(M, 0);  // chain sends of each local rank, in trees' shares
  for (int c = 0; c < m; ++c)
    for (size_t i = 0; i < M; ++i) per[(static_cast<size_t>(c) + i) % M] += 2 * ((i > 0 ? 1 : 0) + (i + 1 < M ? 1 : 0));
  const double sends = *std::max_element(per.begin(), per.end()) * tree_bytes;
  const double in_ns = M >= 2 ? edge_ns(sends, bw_in, lat_in) : 0;
  const double fill_ns = 2 * depth_hops * chunk / std::min(bw_in, K >= 2 ? bw_out : bw_in) * 1e9;
  e.tree_ns = 2 * ((static_cast<double>(M) - 1) * lat_in + levels * lat_out) + std::max(out_ns, in_ns) + fill_ns;
  if (fused > 1) e.tree_ns = std::numeric_limits<double>::infinity();
  e.choice = e.tree_ns < e.ring_ns ? CollectiveKind::AllReduceNcclTree : CollectiveKind::AllReduceRing;
  const auto sw_groups = by_nvls_switch(topo, devices);
  if (!sw_groups.empty()) {
    const int Ks = static_cast<int>(sw_groups.size());
    const double Ms = static_cast<double>(sw_groups.front().size());
    bool equal = true;
    for (const auto& g : sw_groups) equal = equal && static_cast<double>(g.size()) == Ms;
    double lat_sw = 0, bw_sw = 0;
    hop(devices[0], nvls_switch(topo, devices[0]), lat_sw, bw_sw);
    if (equal && Ks == 1) {
      e.nvls_ns = fused * 2 * lat_sw + S * (1 + 1 / Ms) / bw_sw * 1e9;
    } else if (equal) {
      double lat_x = 0, bw_x = 0;
      hop(sw_groups[0][0], sw_groups[1][0], lat_x, bw_x);
      e.nvls_ns = 2 * (fused * 2 * lat_sw + S / bw_sw * 1e9) + fused * 2 * (Ks - 1) * lat_x + 2.0 * (Ks - 1) / Ks * S / Ms / bw_x * 1e9;
    }
    if (e.nvls_ns < std::min(e.ring_ns, e.tree_ns)) e.choice = CollectiveKind::AllReduceNvls;
  }
  return e;
}

void Collective::start(std::function<void(Engine&)> on_done) {
  on_done_ = std::move(on_done);
  started_at_ = sim_.engine().now();
  phase_ = 0;
  start_phase(sim_.engine());
}

void Collective::start_phase(Engine& e) {
  while (phase_ < phases_.size()) {
    auto& ops = phases_[phase_];
    ops_left_ = ops.size();
    for (size_t oi = 0; oi < ops.size(); ++oi) start_op(oi);
    if (ops_left_ > 0) return;
    ++phase_;  // every op of this phase was empty
  }
  finished_ = true;
  finished_at_ = e.now();
  // The callback may destroy this collective (its owner is done with it): it runs from a local,
  // and nothing here or up the stack touches the collective after it returns.
  if (auto done = std::move(on_done_)) done(e);
}

void Collective::send(size_t oi, int from_pos, int to_pos, double bytes, uint64_t info, uint64_t salt) {
  Op& o = phases_[phase_][oi];
  ++o.pending;
  ++flows_;
  sim_.start(o.dev[static_cast<size_t>(from_pos)], o.dev[static_cast<size_t>(to_pos)], bytes, this, make_tag(oi, from_pos, info),
             route_hash(opt_.salt, static_cast<uint64_t>(from_pos), salt));
}

// A million pairs start at once: the flow tables take their room first (FlowSim::reserve), the
// routes' length estimated as twice the longest of a few from the first device (routes differ in
// length; hop slots reserved and never used cost address space, not memory).
void Collective::reserve_alltoall(const Op& o, size_t pairs) {
  const size_t n = o.dev.size();
  if (pairs * static_cast<size_t>(opt_.paths) < 4096 + sim_.free_flows()) return;  // (a repeated collective reuses its records)
  size_t hops = 1;
  for (const size_t j : {n / 4, n / 2, 3 * n / 4, n - 1})
    if (j > 0) hops = std::max(hops, sim_.router().route(o.dev[0], o.dev[j], route_hash(opt_.salt, 0, 0)).size());
  sim_.reserve(pairs * static_cast<size_t>(opt_.paths), 2 * hops);
}

void Collective::start_op(size_t oi) {
  Op& o = phases_[phase_][oi];
  const int n = static_cast<int>(o.dev.size());
  const bool empty = n < 2 || (o.type == Op::Ring && o.steps <= 0);
  if (empty) {
    --ops_left_;
    return;
  }
  switch (o.type) {
    case Op::Ring:
      if (opt_.fused_ring_steps) {
        int64_t lat = 0;
        for (int i = 0; i < n; ++i) {
          const auto path = sim_.router().route(o.dev[static_cast<size_t>(i)], o.dev[static_cast<size_t>((i + 1) % n)],
                                                route_hash(opt_.salt, static_cast<uint64_t>(i), 0));
          lat = std::max(lat, sim_.router().latency_ns(path));
        }
        o.tail_latency_ns = lat * (std::llround(o.steps * opt_.fused()) - 1);
        for (int i = 0; i < n; ++i) send(oi, i, (i + 1) % n, o.chunk_bytes * o.steps, static_cast<uint64_t>(o.steps - 1), 0);
        break;
      }
      for (int i = 0; i < n; ++i) send(oi, i, (i + 1) % n, o.chunk_bytes, 0, 0);
      break;
    case Op::AllToAll:
      reserve_alltoall(o, o.pairs.empty() ? static_cast<size_t>(n) * static_cast<size_t>(n - 1) : o.pairs.size());
      if (!o.pairs.empty()) {  // listed pairs (hierarchical)
        o.tail_latency_ns = o.layer_latency_ns * (std::llround(opt_.fused()) - 1);
        for (const auto& pr : o.pairs)
          for (int p = 0; p < opt_.paths; ++p)
            send(oi, pr.from, pr.to, pr.bytes, static_cast<uint64_t>(pr.to), static_cast<uint64_t>(pr.to) * 131 + static_cast<uint64_t>(p));
        break;
      }
      if (opt_.fused_count > 1) {
        // Standing for fused_count all-to-alls one after another: the later ones' route
        // latencies, paid after the last byte (the longest route from the first device).
        int64_t lat = 0;
        for (int j = 1; j < n; ++j)
          lat = std::max(lat, sim_.router().latency_ns(sim_.router().route(o.dev[0], o.dev[static_cast<size_t>(j)], route_hash(opt_.salt, 0, 0))));
        o.tail_latency_ns = lat * (std::llround(opt_.fused_count) - 1);
      }
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if (i != j) {
            const double f = opt_.a2a_dispatch_fraction;  // (0.5: the two weights' mean)
            const double w = opt_.a2a_weights.empty()
                                 ? 1.0
                                 : f * opt_.a2a_weights[static_cast<size_t>(j)] + (1 - f) * opt_.a2a_weights[static_cast<size_t>(i)];
            for (int p = 0; p < opt_.paths; ++p)
              send(oi, i, j, o.chunk_bytes * w, static_cast<uint64_t>(j), static_cast<uint64_t>(j) * 131 + static_cast<uint64_t>(p));
          }
      break;
    case Op::Send:
      send(oi, 0, 1, o.chunk_bytes, 0, 0);
      break;
    case Op::Switch: {
      // Up and down at once; the multicast trails the reduction by a hop (and each of the
      // fused collectives pays both hops).
      int64_t lat = 0;
      for (int i = 0; i < n; ++i) {
        const int d = o.dev[static_cast<size_t>(i)];
        lat = std::max(lat, sim_.router().latency_ns(sim_.router().route(d, o.sw)));
        o.pending += 2;
        flows_ += 2;
        sim_.start(d, o.sw, o.chunk_bytes, this, make_tag(oi, i, 0), route_hash(opt_.salt, static_cast<uint64_t>(i), 1));
        sim_.start(o.sw, d, o.down_bytes, this, make_tag(oi, i, 1), route_hash(opt_.salt, static_cast<uint64_t>(i), 2));
      }
      o.tail_latency_ns = lat * (std::llround(2 * opt_.fused()) - 1);
      break;
    }
    case Op::Tree:
      o.recv.assign(static_cast<size_t>(n * o.chunks), 0);
      o.have.assign(static_cast<size_t>(n * o.chunks), 0);
      o.next_up.assign(static_cast<size_t>(n), 0);
      o.busy_up.assign(static_cast<size_t>(n), 0);
      o.next_down.assign(o.kids.size(), 0);
      o.busy_down.assign(o.kids.size(), 0);
      for (int p = n - 1; p >= 0; --p)
        if (p != o.root) tree_try_up(oi, p);
      break;
  }
}

// Tree all-reduce over any tree of positions (Op::parent; the binary heap for allreduce-tree,
// chains and double binary trees for NCCL's). A node sends chunk c up once it holds the reduced
// chunk from all its children, one chunk at a time; the root broadcasts each reduced chunk
// down, and every node forwards what it receives to each child, one chunk at a time per child.
// Tag info: chunk << 3 | 4 (down) | child index.
void Collective::tree_try_up(size_t oi, int p) {
  Op& o = phases_[phase_][oi];
  if (p == o.root || o.busy_up[static_cast<size_t>(p)] || o.next_up[static_cast<size_t>(p)] >= o.chunks) return;
  const int c = o.next_up[static_cast<size_t>(p)];
  const int kids = o.kid_off[static_cast<size_t>(p) + 1] - o.kid_off[static_cast<size_t>(p)];
  if (o.recv[static_cast<size_t>(p * o.chunks + c)] < kids) return;
  o.busy_up[static_cast<size_t>(p)] = 1;
  ++o.next_up[static_cast<size_t>(p)];
  send(oi, p, o.parent[static_cast<size_t>(p)], o.chunk_bytes, static_cast<uint64_t>(c) << 3, static_cast<uint64_t>(c));
}

void Collective::tree_try_down(size_t oi, int p, int k) {
  Op& o = phases_[phase_][oi];
  const size_t slot = static_cast<size_t>(o.kid_off[static_cast<size_t>(p)] + k);
  if (slot >= static_cast<size_t>(o.kid_off[static_cast<size_t>(p) + 1]) || o.busy_down[slot] || o.next_down[slot] >= o.chunks) return;
  const int c = o.next_down[slot];
  if (!o.have[static_cast<size_t>(p * o.chunks + c)]) return;
  o.busy_down[slot] = 1;
  ++o.next_down[slot];
  send(oi, p, o.kids[slot], o.chunk_bytes, (static_cast<uint64_t>(c) << 3) | 4u | static_cast<uint64_t>(k), static_cast<uint64_t>(c));
}

void Collective::tree_down_all(size_t oi, int p) {
  Op& o = phases_[phase_][oi];
  const int kids = o.kid_off[static_cast<size_t>(p) + 1] - o.kid_off[static_cast<size_t>(p)];
  for (int k = 0; k < kids; ++k) tree_try_down(oi, p, k);
}

void Collective::on_flow_done(Engine& e, uint64_t tag) {
  if (cancelled_) return;
  const size_t oi = static_cast<size_t>(tag >> 44);
  const int from = static_cast<int>((tag >> 22) & 0x3FFFFF);
  const uint64_t info = tag & 0x3FFFFF;
  Op& o = phases_[phase_][oi];
  --o.pending;
  const int n = static_cast<int>(o.dev.size());
  bool done = false;
  switch (o.type) {
    case Op::Ring: {
      // Step k arrived at the next device, which forwards step k+1.
      const int to = (from + 1) % n;
      const int k = static_cast<int>(info);
      if (k + 1 < o.steps) {
        ++o.pending;
        ++flows_;
        sim_.start(o.dev[static_cast<size_t>(to)], o.dev[static_cast<size_t>((to + 1) % n)], o.chunk_bytes, this,
                   make_tag(oi, to, static_cast<uint64_t>(k + 1)), route_hash(opt_.salt, static_cast<uint64_t>(to), 0));
      }
      done = o.pending == 0;
      if (done && o.tail_latency_ns > 0) {
        last_event_ns_ = std::max(last_event_ns_, e.now().count_ns() + o.tail_latency_ns);
        e.schedule_in(SimTime::ns(o.tail_latency_ns), Priority::Network, this, 0, static_cast<uint32_t>(oi));
        return;
      }
      break;
    }
    case Op::Send:
      done = o.pending == 0;
      break;
    case Op::AllToAll:
    case Op::Switch:
      done = o.pending == 0;
      if (done && o.tail_latency_ns > 0) {
        last_event_ns_ = std::max(last_event_ns_, e.now().count_ns() + o.tail_latency_ns);
        e.schedule_in(SimTime::ns(o.tail_latency_ns), Priority::Network, this, 0, static_cast<uint32_t>(oi));
        return;
      }
      break;
    case Op::Tree: {
      const int c = static_cast<int>(info >> 3);
      if (!(info & 4u)) {  // up: from -> parent
        const int parent = o.parent[static_cast<size_t>(from)];
        o.busy_up[static_cast<size_t>(from)] = 0;
        ++o.recv[static_cast<size_t>(parent * o.chunks + c)];
        const int kids = o.kid_off[static_cast<size_t>(parent) + 1] - o.kid_off[static_cast<size_t>(parent)];
        if (parent == o.root && o.recv[static_cast<size_t>(o.root * o.chunks + c)] == kids) {
          o.have[static_cast<size_t>(o.root * o.chunks + c)] = 1;
          tree_down_all(oi, o.root);
        }
        tree_try_up(oi, from);
        tree_try_up(oi, parent);
      } else {  // down: from -> its child k
        const int k = static_cast<int>(info & 3u);
        const size_t slot = static_cast<size_t>(o.kid_off[static_cast<size_t>(from)] + k);
        const int child = o.kids[slot];
        o.busy_down[slot] = 0;
        o.have[static_cast<size_t>(child * o.chunks + c)] = 1;
        tree_try_down(oi, from, k);
        tree_down_all(oi, child);
      }
      done = o.pending == 0;
      if (done) {  // every node must hold every chunk
        for (int p = 0; p < n && done; ++p)
          for (int cc = 0; cc < o.chunks; ++cc)
            if (!o.have[static_cast<size_t>(p * o.chunks + cc)]) { done = false; break; }
      }
      break;
    }
  }
  if (done) op_done(e);
}

void Collective::on_event(Engine& e, uint32_t, uint32_t) {
  if (cancelled_) {
    e.discount_void_event();
    return;
  }
  op_done(e);
}

bool Collective::spent() const { return finished_ || (cancelled_ && sim_.engine().now().count_ns() > last_event_ns_); }

void Collective::op_done(Engine& e) {
  if (--ops_left_ > 0) return;
  ++phase_;
  start_phase(e);
}

SimTime collective_time(const Topology& topo, CollectiveKind kind, const std::vector<int>& devices, double bytes,
                        CollectiveOptions opt, RoutePolicy policy, SimTime quantum) {
  Engine engine(0);
  Router router(topo, policy);
  FlowSim sim(engine, topo, router);
  sim.set_quantum(quantum);
  Collective c(sim, kind, devices, bytes, opt);
  c.start();
  engine.run();
  if (!c.finished()) throw std::logic_error(fmt::format("{} did not finish (a link with no capacity?)", collective_name(kind)));
  return c.duration();
}

namespace {
// Every device of the group has a direct link to every other (a mesh server: AMD's xGMI).
bool fully_meshed(const Topology& topo, const std::vector<int>& devices) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      bool direct = false;
      for (int l : topo.out_links(a)) direct = direct || topo.link(l).dst == b;
      if (!direct) return false;
    }
  return true;
}
}  // namespace

std::vector<std::vector<int>> ring_channels(const Topology& topo, const std::vector<int>& devices) {
  const auto servers = by_server(topo, devices);
  if (servers.size() == 1 && devices.size() >= 3 && fully_meshed(topo, devices)) {
    // A mesh (RCCL on an MI300X platform): rings of every stride s coprime with n (i -> i + s),
    // each a cycle through all n devices on links no other ring uses.
    const size_t n = devices.size();
    std::vector<std::vector<int>> rings;
    for (size_t s = 1; s < n; ++s) {
      if (std::gcd(s, n) != 1) continue;
      auto& order = rings.emplace_back();
      for (size_t i = 0, at = 0; i < n; ++i, at = (at + s) % n) order.push_back(devices[at]);
    }
    return rings;
  }
  // A torus (TPU ICI, a GPU torus) has no NICs: its ring follows the wiring (ring_order); by_server
  // makes each of its devices a server of one, so it gets one ring, as does a group with any
  // ungrouped device or servers holding different numbers of it.
  const size_t m = static_cast<size_t>(channel_count(servers));
  if (m < 2) return {devices};
  const long K = static_cast<long>(servers.size()), M = static_cast<long>(m);
  std::vector<std::vector<int>> channels(m);
  // Channel c enters an even server at local rank c and walks up to c - 1; the next (odd)
  // server it enters at c - 1 and walks down to c; so every crossing joins equal ranks.
  for (long c = 0; c < M; ++c) {
    auto& order = channels[static_cast<size_t>(c)];
    order.reserve(devices.size());
    for (long k = 0; k < K; ++k) {
      const auto& s = servers[static_cast<size_t>(k)];
      for (long i = 0; i < M; ++i)
        order.push_back(s[static_cast<size_t>(k % 2 == 0 ? (c + i) % M : ((c - 1 - i) % M + M) % M)]);
    }
  }
  return channels;
}

std::vector<int> ring_order(const Topology& topo) {
  if (!topo.torus || topo.torus->twisted) return topo.devices();
  const auto& ts = *topo.torus;
  const int X = ts.dims[0], Y = ts.dims[1], Z = ts.dims[2];
  std::vector<int> order;
  order.reserve(static_cast<size_t>(X * Y * Z));
  long row = 0;
  for (int z = 0; z < Z; ++z) {
    for (int yi = 0; yi < Y; ++yi) {
      const int y = (z % 2 == 0) ? yi : Y - 1 - yi;
      for (int xi = 0; xi < X; ++xi) {
        const int x = (row % 2 == 0) ? xi : X - 1 - xi;
        order.push_back(ts.node_at[static_cast<size_t>(ts.index(x, y, z))]);
      }
      ++row;
    }
  }
  return order;
}

void Graveyard::bury(std::unique_ptr<Collective> c) {
  if (!c) return;
  if (dead_.size() >= prune_at_) {  // amortised: a sweep each time the yard doubles
    std::erase_if(dead_, [](const std::unique_ptr<Collective>& d) { return d->spent(); });
    prune_at_ = std::max<size_t>(64, 2 * dead_.size());
  }
  dead_.push_back(std::move(c));
}

}  // namespace sluice::net

namespace sluice {

// The collectives training's `dp_algorithm` offers and `sluice list collective` shows.
SLUICE_REGISTER(component, collectives) {
  const std::pair<const char*, const char*> collectives[] = {
      {"allreduce-ring", "ring all-reduce: 2(n-1) steps of S/n to the next device (reduce-scatter then all-gather)"},
      {"allreduce-tree", "binary-tree all-reduce: reduce to the root then broadcast, pipelined in chunks"},
      {"allreduce-hierarchical", "reduce-scatter inside each server, ring all-reduce across servers per local rank, all-gather inside"},
      {"allgather", "ring all-gather: n-1 steps of S/n"},
      {"reducescatter", "ring reduce-scatter: n-1 steps of S/n"},
      {"alltoall", "every device sends S/n to every other at once (optionally split over several ECMP paths)"},
      {"sendrecv", "one flow of S bytes from the first device to the second"},
      {"allreduce-nccl-tree", "NCCL's tree: per channel (one per NIC), a chain through each server's devices and a double binary tree over the servers' heads, half the bytes each, pipelined in chunks"},
      {"allreduce-auto", "NCCL's choice: the ring, its tree or NVLS (where the NVSwitch reduces), whichever its tuner-style estimate (latency + bytes / bandwidth from the topology) predicts fastest"},
      {"allreduce-nvls", "NVLink SHARP: the NVSwitch reduces and multicasts, S(1+1/M) each way over a device's NVLink; across servers a ring per local rank between the switches' reduce-scatter and all-gather (needs nvls: true)"},
      {"alltoall-hierarchical", "DeepEP's internode all-to-all (its normal kernels, for training and prefill): what a device sends to another server's devices crosses once, to the device of its local rank there (its rail), which forwards each its part over NVLink; an MoE dispatch sends a token once per server (deployment.moe.alltoall_algorithm)"},
  };
  for (const auto& [n, doc] : collectives) reg.add("collective", n, doc, Schema{});
}

}  // namespace sluice
