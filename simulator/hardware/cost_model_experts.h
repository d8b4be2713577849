// Where a mixture-of-experts model's experts sit and how much each receives (part of
// hardware/cost_model.cpp's translation unit, included by cost_model_impl.h): the routing
// model's shares (uniform or Zipf, no share above 1/k), their placement over the devices of
// expert parallelism (in order, or EPLB's copies hottest first on the least-loaded device), and
// the devices a token's dispatch reaches.
#pragma once

#include <algorithm>
#include <cmath>
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
  // routing; a device of hot experts receives more of the dispatch and sends more of the
  // combine). Empty without expert parallelism.
  std::vector<double> a2a_weight;
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
    if (!mo.eplb) {  // experts in order, E / tp per device
      for (int e = 0; e < E; ++e) out.dev_share[static_cast<size_t>(e / (E / tp))].push_back(p[static_cast<size_t>(e)]);
    } else {
      out.place_eplb(p, std::min(mo.redundant_experts, E));
    }
    for (const auto& sh : out.dev_share) {
      double d = 0;
      for (double q : sh) d += q;
      // (Rows per expert: the device receives k rows a token in proportion to its share.)
      out.a2a_weight.push_back(mo.rows_per_expert ? m.experts_per_token * std::min(1.0, d)
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

  // EPLB: the r hottest experts copied (each copy half the load), then every copy, hottest
  // first, on the least-loaded device that has a slot left (slots: (E + r) / tp each).
  void place_eplb(const std::vector<double>& p, int r) {
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
      load[best] += c.first;
    }
  }
};

}  // namespace sluice
