// The hierarchical all-to-all's plan (DeepEP's normal internode kernels), beside the collectives
// of collective.cpp: which pairs it sends and how many bytes each carries.
#include "network/collective.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace sluice::net {

// DeepEP's internode all-to-all (its "normal" kernels, for training and prefill; its low-latency
// kernels, for decode, send straight over RDMA as the flat all-to-all does): what device (k, r) (server k, local rank
// r) sends to the devices of another server k' goes over the network once, to (k', r) on the
// same rail, deduplicated (a token whose experts are on several of k''s devices crosses once:
// opt_.a2a_dedup of those devices), and (k', r) forwards each device of k' its part over NVLink,
// with what (k', r) itself sends them. The combine runs it backwards (NVLink inside the experts'
// server, reduced there, then across once: that server's share), and the fused collective's
// pairs carry both (a2a_weights as the flat all-to-all's). DeepEP pipelines the forwarding
// behind the network's chunks: both kinds of flows run at once (the first all-to-all pays the
// longer of the two latencies), and each of the fused all-to-alls after it pays a network
// route's latency and an NVLink route's (routes from the group's first device). Pairs: n (K - 1)
// across servers and n (M - 1) inside, for n (n - 1) flat (144 GPUs on 18 servers: 3,456 against
// 20,592). One server: the flat all-to-all.
void Collective::plan_hierarchical_alltoall() {
  const int n = static_cast<int>(devices_.size());
  const auto servers = by_server(sim_.topology(), devices_);
  const int K = static_cast<int>(servers.size()), M = static_cast<int>(servers.front().size());
  Op o{Op::AllToAll, devices_};
  o.chunk_bytes = bytes_ / n / opt_.paths;
  if (K == 1) {
    phases_.push_back({o});
    return;
  }
  for (const auto& sv : servers)
    if (static_cast<int>(sv.size()) != M)
      throw std::invalid_argument(fmt::format("alltoall-hierarchical: servers hold {} and {} of the devices; it needs the same number on each "
                                              "(a rail per local rank)",
                                              M, sv.size()));
  std::vector<std::vector<int>> pos(static_cast<size_t>(K));  // each server's devices as positions in the group
  std::vector<int> server_of(static_cast<size_t>(n)), rank_of(static_cast<size_t>(n));
  std::vector<double> share(static_cast<size_t>(K));
  for (int k = 0; k < K; ++k) {
    for (int d : servers[static_cast<size_t>(k)]) {
      const int p = static_cast<int>(std::find(devices_.begin(), devices_.end(), d) - devices_.begin());
      server_of[static_cast<size_t>(p)] = k;
      rank_of[static_cast<size_t>(p)] = static_cast<int>(pos[static_cast<size_t>(k)].size());
      pos[static_cast<size_t>(k)].push_back(p);
    }
    const double s = opt_.a2a_dedup ? opt_.a2a_dedup(pos[static_cast<size_t>(k)]) : 1.0;
    if (!(s > 0 && s <= 1)) throw std::logic_error(fmt::format("alltoall-hierarchical: a server's share {} outside (0, 1]", s));
    share[static_cast<size_t>(k)] = s;
  }
  // Each ordered pair (i, j) carries its dispatch part f = a2a_dispatch_fraction (i's tokens to j's
  // experts, in proportion to w_j; a half in BF16) and its combine part 1 - f (i's experts' outputs
  // back to j's tokens, w_i), as the flat all-to-all's f w_j + (1 - f) w_i. Across servers the dispatch crosses on i's rail to j's server, once a token
  // for that server (its share), then NVLink there to j; the combine goes over NVLink in i's
  // server to j's local rank, is reduced there (a token's outputs from i's server summed) and
  // crosses once on j's rail (i's server's share). Inside a server, NVLink directly.
  auto w = [&](int p) { return opt_.a2a_weights.empty() ? 1.0 : opt_.a2a_weights[static_cast<size_t>(p)]; };
  const double f = opt_.a2a_dispatch_fraction;
  std::vector<double> across(static_cast<size_t>(n * K), 0.0), inside(static_cast<size_t>(n * M), 0.0);
  const double c0 = o.chunk_bytes;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const int k = server_of[static_cast<size_t>(i)], r = rank_of[static_cast<size_t>(i)];
      const int k2 = server_of[static_cast<size_t>(j)], r2 = rank_of[static_cast<size_t>(j)];
      if (k == k2) {
        inside[static_cast<size_t>(i * M + r2)] += c0 * (f * w(j) + (1 - f) * w(i));
        continue;
      }
      const double dispatch = c0 * w(j) * f, combine = c0 * w(i) * (1 - f);
      across[static_cast<size_t>(i * K + k2)] += dispatch * share[static_cast<size_t>(k2)];
      across[static_cast<size_t>(pos[static_cast<size_t>(k)][static_cast<size_t>(r2)] * K + k2)] += combine * share[static_cast<size_t>(k)];
      if (r != r2) {
        inside[static_cast<size_t>(pos[static_cast<size_t>(k2)][static_cast<size_t>(r)] * M + r2)] += dispatch;
        inside[static_cast<size_t>(i * M + r2)] += combine;
      }
    }
  for (int p = 0; p < n; ++p) {
    const int k = server_of[static_cast<size_t>(p)], r = rank_of[static_cast<size_t>(p)];
    for (int k2 = 0; k2 < K; ++k2)
      if (k2 != k) o.pairs.push_back({p, pos[static_cast<size_t>(k2)][static_cast<size_t>(r)], across[static_cast<size_t>(p * K + k2)]});
    for (int r2 = 0; r2 < M; ++r2)
      if (r2 != r) o.pairs.push_back({p, pos[static_cast<size_t>(k)][static_cast<size_t>(r2)], inside[static_cast<size_t>(p * M + r2)]});
  }
  Router& rt = sim_.router();
  o.layer_latency_ns = rt.latency_ns(rt.route(devices_[static_cast<size_t>(pos[0][0])], devices_[static_cast<size_t>(pos[1][0])], route_hash(opt_.salt, 0, 0))) +
                       (M > 1 ? rt.latency_ns(rt.route(devices_[static_cast<size_t>(pos[0][0])], devices_[static_cast<size_t>(pos[0][1])], route_hash(opt_.salt, 0, 1))) : 0);
  phases_.push_back({std::move(o)});
}

}  // namespace sluice::net
