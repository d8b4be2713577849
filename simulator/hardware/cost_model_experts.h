// Where a mixture-of-experts model's experts sit and how much each receives (part of
// hardware/cost_model.cpp's translation unit, included by cost_model_impl.h): the routing
// model's shares (uniform or Zipf, no share above 1/k), their placement over the devices of
// expert parallelism (in order, or EPLB's copies hottest first on the least-loaded device), and
// the devices a token's dispatch reaches.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

#include "hardware/cost_model.h"

namespace sluice {

// (Not in an anonymous namespace: CostModel::Impl holds one.)
struct ExpertPlacement {
  // Each device's expert copies, as the share of all token-expert assignments each copy
  // receives (the shares of all devices sum to 1); without expert parallelism one entry, every
  // expert, each split over the tp devices.
  std::vector<std::vector<double>> dev_share;
  // All-to-all dispatch: the devices a token's k experts are on, in expectation (a token is sent
  // once to each, not once per expert): sum over devices of 1 - (1 - its share)^k, each of the
  // k picks taken as independent. With rows per expert (MoeOptions::rows_per_expert): k, a row
  // for each of its experts, wherever they are.
  double a2a_dest = 0;
  // Each device's part of those destinations, over their mean (1 on every device under uniform
  // routing when its experts sit alike in the groups of group-limited routing; a device of hot
  // experts receives more of the dispatch and sends more of the combine). Empty without expert
  // parallelism.
  std::vector<double> a2a_weight;
  // Group-limited routing (ModelSpec::group_limited; empty otherwise): each device's share of the
  // assignments by expert group, each group's share of all of them, and every set of
  // groups_per_token groups a token may pick with its chance and its groups' share together.
  std::vector<std::vector<double>> dev_group;
  std::vector<double> group_share;
  struct GroupSet {
    uint32_t mask;
    double chance, share;
  };
  std::vector<GroupSet> group_sets;
  int groups_per_token = 0, topk = 0;
  bool grouped() const { return !group_share.empty(); }
  // The chance that a token sends to a set of devices holding `share` of the assignments in each
  // group. A token's groups are a set of groups_per_token drawn with a chance in proportion to
  // the product of their shares (conditional Poisson sampling: under uniform routing every set
  // alike, so how many of a server's groups a token picks is hypergeometric). DeepSeek's router
  // keeps the groups whose best experts score highest (V3: the sum of a group's top two; V2:
  // its best), so each chosen group gives the token one
  // expert (its best: on the set with the set's part of that group's share), and the other
  // k - groups_per_token picks land in the chosen groups in proportion to share, independently
  // as without groups. (More groups a token than experts: all k picks that way.) Every set of
  // groups is weighed: at most C(16, 8) = 12,870.
  double hit(const std::vector<double>& share) const {
    if (group_sets.empty()) return 1 - std::pow(1 - std::min(1.0, std::accumulate(share.begin(), share.end(), 0.0)), topk);  // (no set has a share)
    const int forced = groups_per_token <= topk ? groups_per_token : 0, rest = topk - forced;
    double none = 0;
    for (const GroupSet& gs : group_sets) {
      double miss = 1, x = 0;
      for (uint32_t m = gs.mask; m != 0; m &= m - 1) {
        const int g = std::countr_zero(m);
        const double q = share[static_cast<size_t>(g)];
        if (q <= 0) continue;
        x += q;
        if (forced > 0) miss *= 1 - std::min(1.0, q / group_share[static_cast<size_t>(g)]);
      }
      if (rest > 0) miss *= std::pow(1 - std::min(1.0, x / gs.share), rest);
      none += gs.chance * miss;
    }
    return 1 - none;
  }
  // The busiest device's all-to-all traffic over an even split's: a device d sends dispatch
  // (the part f of the bytes) to every other j in proportion to w_j and combines back (1 - f)
  // in proportion to w_d, so it sends (f (n - w_d) + (1 - f)(n - 1) w_d) / (n - 1) of the even
  // share: ((n - 2) w_d + n) / (2 (n - 1)) when the two are alike (f = 1/2).
  double a2a_busiest(double f) const {
    const double n = static_cast<double>(a2a_weight.size());
    double most = 1;
    if (n < 2) return most;
    for (double w : a2a_weight)
      most = std::max(most, f == 0.5 ? ((n - 2) * w + n) / (2 * (n - 1)) : (f * (n - w) + (1 - f) * (n - 1) * w) / (n - 1));
    return most;
  }

  // Token-expert rows a device's copies receive from M tokens, each to k experts.
  static double rows(const std::vector<double>& shares, double M, int k) {
    double t = 0;
    for (double q : shares) t += M * k * q;
    return t;
  }

  // The routing model's shares, placed over tp devices (expert parallelism with tp > 1) or
  // kept as one view; throws std::invalid_argument for a placement that cannot be.
  static ExpertPlacement plan(const ModelSpec& m, const MoeOptions& mo, int tp) {
    const int E = m.experts;
    if (const auto problem = moe_problem(m, mo, tp)) throw std::invalid_argument(problem->problem);
    const std::vector<double> p = shares(m, mo);
    ExpertPlacement out;
    if (!(mo.expert_parallel && tp > 1)) {
      out.dev_share.push_back(p);
      return out;
    }
    out.dev_share.assign(static_cast<size_t>(tp), {});
    const int G = m.group_limited() ? m.expert_groups : 0, per_group = G > 0 ? E / G : 1;
    if (G > 0) out.dev_group.assign(static_cast<size_t>(tp), std::vector<double>(static_cast<size_t>(G), 0.0));
    if (!mo.eplb) {  // experts in order, E / tp per device
      for (int e = 0; e < E; ++e) {
        const int d = e / (E / tp);
        out.dev_share[static_cast<size_t>(d)].push_back(p[static_cast<size_t>(e)]);
        if (G > 0) out.dev_group[static_cast<size_t>(d)][static_cast<size_t>(e / per_group)] += p[static_cast<size_t>(e)];
      }
    } else {
      out.place_eplb(p, std::min(mo.redundant_experts, E), per_group);
    }
    if (G > 0) out.pick_groups(p, per_group, m.groups_per_token, m.experts_per_token);
    for (size_t dev = 0; dev < out.dev_share.size(); ++dev) {
      double d = 0;
      for (double q : out.dev_share[dev]) d += q;
      // (Rows per expert: the device receives k rows a token in proportion to its share, grouped or not.)
      out.a2a_weight.push_back(mo.rows_per_expert ? m.experts_per_token * std::min(1.0, d)
                               : out.grouped()    ? out.hit(out.dev_group[dev])
                                                  : 1 - std::pow(1 - std::min(1.0, d), m.experts_per_token));
      out.a2a_dest += out.a2a_weight.back();
    }
    bool even = true;
    for (double& w : out.a2a_weight) {
      w *= static_cast<double>(out.a2a_weight.size()) / out.a2a_dest;
      even = even && std::abs(w - 1) < 1e-9;
    }
    if (even) out.a2a_weight.assign(out.a2a_weight.size(), 1.0);  // exactly: no rounding in an even all-to-all's bytes
    return out;
  }

 private:
  // Each expert's share of the assignments: uniform, Zipf (expert e the (e+1)-th hottest), or
  // measured (expert e's logged count over the total).
  static std::vector<double> shares(const ModelSpec& m, const MoeOptions& mo) {
    const int E = m.experts;
    std::vector<double> p(static_cast<size_t>(E), 1.0 / E);
    if (mo.routing == MoeOptions::Routing::Uniform) return p;
    double z = 0;
    for (int e = 0; e < E; ++e)
      z += p[static_cast<size_t>(e)] = mo.routing == MoeOptions::Routing::Zipf ? std::pow(e + 1.0, -mo.zipf_s) : mo.expert_load.at(static_cast<size_t>(e));
    for (double& x : p) x /= z;
    // A token goes to k distinct experts, so no expert gets more than 1/k of the assignments
    // (all M tokens): a share above it is capped and its excess spread over the others in
    // proportion to theirs, until none is over.
    const double cap = 1.0 / m.experts_per_token;
    for (int round = 0; round < E; ++round) {
      double excess = 0, free = 0;  // above the cap; the shares below it
      for (double x : p) {
        if (x > cap) excess += x - cap;
        else if (x < cap) free += x;
      }
      if (excess <= 1e-15 || free <= 0) break;
      for (double& x : p) x = x >= cap ? cap : x * (1 + excess / free);
    }
    return p;
  }

  // Each group's share of the assignments and the sets of groups a token may pick (see hit).
  void pick_groups(const std::vector<double>& p, int per_group, int per_token, int k) {
    const size_t G = p.size() / static_cast<size_t>(per_group);
    if (G > 16 || per_token < 1 || static_cast<int>(G) < per_token || p.size() % static_cast<size_t>(per_group) != 0)
      throw std::invalid_argument("group-limited routing needs 1 to 16 groups dividing the experts and 1 to that many a token");
    group_share.assign(G, 0.0);
    for (size_t e = 0; e < p.size(); ++e) group_share[e / static_cast<size_t>(per_group)] += p[e];
    groups_per_token = per_token;
    topk = k;
    double total = 0;
    for (uint32_t mask = 0; mask < (1u << G); ++mask) {
      if (std::popcount(mask) != per_token) continue;
      double chance = 1, sh = 0;
      for (uint32_t m = mask; m != 0; m &= m - 1) {
        chance *= group_share[static_cast<size_t>(std::countr_zero(m))];
        sh += group_share[static_cast<size_t>(std::countr_zero(m))];
      }
      if (chance > 0) group_sets.push_back({mask, chance, sh});
      total += chance;
    }
    for (GroupSet& gs : group_sets) gs.chance /= total;
  }

  // EPLB: the r hottest experts copied (each copy half the load), then every copy, hottest
  // first, on the least-loaded device that has a slot left (slots: (E + r) / tp each).
  void place_eplb(const std::vector<double>& p, int r, int per_group) {
    std::vector<std::pair<double, int>> copies;  // (share, expert)
    for (int e = 0; e < static_cast<int>(p.size()); ++e) {
      const int n = e < r ? 2 : 1;
      for (int c = 0; c < n; ++c) copies.push_back({p[static_cast<size_t>(e)] / n, e});
    }
    std::stable_sort(copies.begin(), copies.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    const size_t slots = copies.size() / dev_share.size();
    std::vector<double> load(dev_share.size(), 0);
    for (const auto& c : copies) {
      size_t best = 0;
      bool found = false;
      for (size_t d = 0; d < load.size(); ++d)
        if (dev_share[d].size() < slots && (!found || load[d] < load[best])) best = d, found = true;
      dev_share[best].push_back(c.first);
      if (!dev_group.empty()) dev_group[best][static_cast<size_t>(c.second / per_group)] += c.first;
      load[best] += c.first;
    }
  }
};

}  // namespace sluice
