#include "network/pod.h"

#include <algorithm>
#include <bit>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace sluice::net {

const char* placement_name(PlacementPolicy p) { return p == PlacementPolicy::FirstFit ? "first-fit" : "best-fit"; }

PodAllocator::PodAllocator(std::array<int, 3> grid, bool ocs, PlacementPolicy policy)
    : grid_(grid), n_(grid[0] * grid[1] * grid[2]), ocs_(ocs), policy_(policy) {
  if (n_ < 1 || n_ > 64) throw std::invalid_argument(fmt::format("a pod of {} cubes: the allocator handles 1 to 64", n_));
  nbr_.assign(static_cast<size_t>(n_), 0);
  auto idx = [&](int x, int y, int z) { return x + grid_[0] * (y + grid_[1] * z); };
  for (int z = 0; z < grid_[2]; ++z)
    for (int y = 0; y < grid_[1]; ++y)
      for (int x = 0; x < grid_[0]; ++x) {
        uint64_t m = 0;
        const int c[3] = {x, y, z};
        for (int d = 0; d < 3; ++d)
          for (int s : {-1, 1}) {
            int q[3] = {c[0], c[1], c[2]};
            q[d] = (q[d] + s + grid_[static_cast<size_t>(d)]) % grid_[static_cast<size_t>(d)];
            const int j = idx(q[0], q[1], q[2]);
            if (j != idx(x, y, z)) m |= uint64_t{1} << j;
          }
        nbr_[static_cast<size_t>(idx(x, y, z))] = m;
      }
}

const std::vector<PodAllocator::Candidate>& PodAllocator::blocks(const CubeShape& s) const {
  auto it = cache_.find(s);
  if (it != cache_.end()) return it->second;
  // Every orientation and origin (wrapping round the torus), deduplicated, in order of the
  // lowest cube index so that first-fit is well defined.
  std::set<uint64_t> seen;
  std::vector<std::pair<int, Candidate>> found;
  std::array<int, 3> e{s.x, s.y, s.z};
  std::sort(e.begin(), e.end());
  do {
    if (e[0] > grid_[0] || e[1] > grid_[1] || e[2] > grid_[2]) continue;
    for (int oz = 0; oz < grid_[2]; ++oz)
      for (int oy = 0; oy < grid_[1]; ++oy)
        for (int ox = 0; ox < grid_[0]; ++ox) {
          uint64_t m = 0;
          for (int dz = 0; dz < e[2]; ++dz)
            for (int dy = 0; dy < e[1]; ++dy)
              for (int dx = 0; dx < e[0]; ++dx) {
                const int x = (ox + dx) % grid_[0], y = (oy + dy) % grid_[1], z = (oz + dz) % grid_[2];
                m |= uint64_t{1} << (x + grid_[0] * (y + grid_[1] * z));
              }
          if (!seen.insert(m).second) continue;
          uint64_t nb = 0;
          for (uint64_t r = m; r; r &= r - 1) nb |= nbr_[static_cast<size_t>(std::countr_zero(r))];
          found.push_back({ox + grid_[0] * (oy + grid_[1] * oz), Candidate{m, nb & ~m}});
        }
  } while (std::next_permutation(e.begin(), e.end()));
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Candidate> out;
  for (auto& f : found) out.push_back(f.second);
  return cache_.emplace(s, std::move(out)).first->second;
}

bool PodAllocator::feasible(const CubeShape& s) const {
  const uint64_t all = n_ == 64 ? ~uint64_t{0} : (uint64_t{1} << n_) - 1;
  return place(s, all).has_value();
}

std::optional<uint64_t> PodAllocator::place(const CubeShape& s, uint64_t free) const {
  const int need = s.cubes();
  if (need > n_ || std::popcount(free) < need) return std::nullopt;
  if (ocs_) {
    std::vector<int> cand;
    for (uint64_t r = free; r; r &= r - 1) cand.push_back(std::countr_zero(r));
    if (policy_ == PlacementPolicy::BestFit) {
      std::stable_sort(cand.begin(), cand.end(), [&](int a, int b) {
        return std::popcount(nbr_[static_cast<size_t>(a)] & ~free) > std::popcount(nbr_[static_cast<size_t>(b)] & ~free);
      });
    }
    uint64_t m = 0;
    for (int i = 0; i < need; ++i) m |= uint64_t{1} << cand[static_cast<size_t>(i)];
    return m;
  }
  const auto& bl = blocks(s);
  std::optional<uint64_t> best;
  int best_score = -1;
  for (const auto& c : bl) {
    if ((c.mask & ~free) != 0) continue;
    if (policy_ == PlacementPolicy::FirstFit) return c.mask;
    const int score = std::popcount(c.neighbours & ~free);
    if (score > best_score) { best_score = score; best = c.mask; }
  }
  return best;
}

std::array<int, 3> PodAllocator::extents(uint64_t mask) const {
  std::array<int, 3> out{0, 0, 0};
  for (int d = 0; d < 3; ++d) {
    std::vector<char> used(static_cast<size_t>(grid_[static_cast<size_t>(d)]), 0);
    for (uint64_t r = mask; r; r &= r - 1) {
      const int c = std::countr_zero(r);
      const int coord = d == 0 ? c % grid_[0] : d == 1 ? (c / grid_[0]) % grid_[1] : c / (grid_[0] * grid_[1]);
      used[static_cast<size_t>(coord)] = 1;
    }
    for (char u : used) out[static_cast<size_t>(d)] += u;
  }
  return out;
}

uint64_t PodAllocator::block_at_origin(std::array<int, 3> dims) const {
  uint64_t m = 0;
  for (int z = 0; z < dims[2]; ++z)
    for (int y = 0; y < dims[1]; ++y)
      for (int x = 0; x < dims[0]; ++x) m |= uint64_t{1} << (x + grid_[0] * (y + grid_[1] * z));
  return m;
}

}  // namespace sluice::net
