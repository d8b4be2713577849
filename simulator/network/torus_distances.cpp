#include "network/torus_distances.h"

#include <algorithm>
#include <cstdlib>

namespace sluice::net {

namespace {
int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int torus_mod(int a, int b) { return ((a % b) + b) % b; }
}  // namespace

void TorusDistances::reduce(const Region& r, std::array<int, 3>& x) {
  if (r.twisted)
    for (size_t s = 0; s < 3; ++s) {
      if (r.dims[s] != r.k) continue;
      const int q = floor_div(x[s], r.k);
      if (q == 0) continue;
      x[s] -= q * r.k;
      if (q % 2 != 0)  // each wrap of a short dimension steps k along every long one (k mod 2k)
        for (size_t l = 0; l < 3; ++l)
          if (r.dims[l] == 2 * r.k) x[l] += r.k;
    }
  for (size_t d = 0; d < 3; ++d) x[d] = torus_mod(x[d], r.dims[d]);
}

std::unique_ptr<TorusDistances> TorusDistances::detect(const Topology& t, std::span<const int32_t> weights) {
  std::vector<const TorusShape*> shapes;
  if (t.torus && !t.pod) shapes.push_back(&*t.torus);  // (a pod's own torus is wired only by its slices)
  for (const TorusShape& s : t.slices) shapes.push_back(&s);
  if (shapes.empty() || weights.size() != static_cast<size_t>(t.link_count())) return nullptr;
  const int n = t.node_count();
  std::vector<int32_t> claims(static_cast<size_t>(n), 0);
  for (const TorusShape* s : shapes)
    for (int v : s->node_at)
      if (v >= 0 && v < n) ++claims[static_cast<size_t>(v)];
  auto out = std::unique_ptr<TorusDistances>(new TorusDistances());
  out->region_of_.assign(static_cast<size_t>(n), -1);
  out->key_.assign(static_cast<size_t>(n), 0);
  std::vector<int32_t> cell(static_cast<size_t>(n), -1);  // a node's linear index in its region
  for (const TorusShape* s : shapes) {
    Region r;
    r.dims = s->dims;
    r.wrap = s->wrap;
    r.twisted = s->twisted && s->wrap;
    const int nd = std::clamp(s->ndims, 1, 3);
    bool ok = true;
    size_t cells = 1;
    for (size_t d = 0; d < 3; ++d) {
      ok = ok && r.dims[d] >= 1 && (static_cast<int>(d) < nd || r.dims[d] == 1);
      cells *= static_cast<size_t>(std::max(1, r.dims[d]));
    }
    // (At most 2^27 cells: by_diff's 8 integers a cell then index in 32 bits.)
    if (!ok || cells != s->node_at.size() || cells > (size_t{1} << 27)) continue;
    if (r.twisted) {
      r.k = *std::min_element(r.dims.begin(), r.dims.begin() + nd);
      for (int d = 0; d < nd; ++d) ok = ok && (r.dims[static_cast<size_t>(d)] == r.k || r.dims[static_cast<size_t>(d)] == 2 * r.k);
      if (!ok || r.k < 3) continue;
    }
    for (int v : s->node_at) ok = ok && v >= 0 && v < n && claims[static_cast<size_t>(v)] == 1;
    if (!ok) continue;
    const int id = static_cast<int>(out->regions_.size());
    auto lin = [&](const std::array<int, 3>& x) { return static_cast<size_t>(x[0] + r.dims[0] * (x[1] + r.dims[1] * x[2])); };
    auto coord_of = [&](size_t i) {
      const int li = static_cast<int>(i);
      return std::array<int, 3>{li % r.dims[0], (li / r.dims[0]) % r.dims[1], li / (r.dims[0] * r.dims[1])};
    };
    const int32_t S0 = 2 * r.dims[0] - 1, S1 = 2 * r.dims[1] - 1, S2 = 2 * r.dims[2] - 1;
    for (size_t i = 0; i < cells; ++i) {
      const auto c = coord_of(i);
      const size_t v = static_cast<size_t>(s->node_at[i]);
      out->region_of_[v] = id;
      out->key_[v] = c[0] + S0 * (c[1] + S1 * c[2]);
      cell[v] = static_cast<int32_t>(i);
    }
    // A cell's torus neighbours (c ± e_d, wrapped; a mesh's edges have fewer), by linear index.
    auto neighbours = [&](const std::array<int, 3>& c, std::array<size_t, 6>& nb) {
      int m = 0;
      for (size_t d = 0; d < 3; ++d) {
        if (r.dims[d] == 1) continue;
        for (int step : {1, -1}) {
          std::array<int, 3> x = c;
          x[d] += step;
          if (!r.wrap && (x[d] < 0 || x[d] >= r.dims[d])) continue;
          reduce(r, x);
          nb[static_cast<size_t>(m++)] = lin(x);
        }
      }
      return m;
    };
    // The region's up links are exactly its torus graph, with one weight.
    int32_t w = -1;
    for (size_t i = 0; i < cells && ok; ++i) {
      const int v = s->node_at[i];
      std::array<size_t, 6> nb{};
      const int m = neighbours(coord_of(i), nb);
      unsigned covered = 0;
      for (int e : t.out_links(v)) {
        const int32_t we = weights[static_cast<size_t>(e)];
        const int u = t.link(e).dst;
        if (we >= kDown) continue;
        if (out->region_of_[static_cast<size_t>(u)] != id || (w >= 0 && we != w)) {
          ok = false;
          break;
        }
        w = we;
        const size_t lu = static_cast<size_t>(cell[static_cast<size_t>(u)]);
        bool found = false;
        for (int j = 0; j < m; ++j)
          if (nb[static_cast<size_t>(j)] == lu) covered |= 1u << j, found = true;
        ok = ok && found;
      }
      ok = ok && covered == (1u << m) - 1;
    }
    int64_t diameter = 0;
    std::vector<int32_t> hops;  // hop distance from the origin by cell (wrapping regions)
    if (ok && r.wrap) {  // hop distances from the origin: a breadth-first search over the cells
      hops.assign(cells, -1);
      std::vector<size_t> queue{0};
      hops[0] = 0;
      for (size_t q = 0; q < queue.size(); ++q) {
        std::array<size_t, 6> nb{};
        const int m = neighbours(coord_of(queue[q]), nb);
        for (int j = 0; j < m; ++j) {
          const size_t x = nb[static_cast<size_t>(j)];
          if (hops[x] >= 0) continue;
          hops[x] = hops[queue[q]] + 1;
          diameter = hops[x];
          queue.push_back(x);
        }
      }
      ok = queue.size() == cells;
    } else if (ok) {
      diameter = r.dims[0] + r.dims[1] + r.dims[2] - 3;
    }
    r.w = std::max(w, 0);
    if (!ok || diameter * r.w >= kDown) {
      for (int v : s->node_at) out->region_of_[static_cast<size_t>(v)] = -1;
      continue;
    }
    r.by_diff.resize(static_cast<size_t>(S0) * static_cast<size_t>(S1) * static_cast<size_t>(S2));
    r.center = (r.dims[0] - 1) + S0 * ((r.dims[1] - 1) + S1 * (r.dims[2] - 1));
    for (int d2 = 1 - r.dims[2]; d2 < r.dims[2]; ++d2)
      for (int d1 = 1 - r.dims[1]; d1 < r.dims[1]; ++d1)
        for (int d0 = 1 - r.dims[0]; d0 < r.dims[0]; ++d0) {
          std::array<int, 3> x{d0, d1, d2};
          int32_t h;
          if (r.wrap) {
            reduce(r, x);
            h = hops[lin(x)];
          } else {
            h = std::abs(d0) + std::abs(d1) + std::abs(d2);
          }
          r.by_diff[static_cast<size_t>(r.center + d0 + S0 * (d1 + S1 * d2))] = h * r.w;
        }
    out->regions_.push_back(std::move(r));
  }
  if (out->regions_.empty()) return nullptr;
  return out;
}

bool TorusDistances::target(int src, int dst, Target& tg) const {
  if (src < 0 || dst < 0 || static_cast<size_t>(src) >= region_of_.size() || static_cast<size_t>(dst) >= region_of_.size()) return false;
  const int32_t r = region_of_[static_cast<size_t>(dst)];
  if (r < 0 || region_of_[static_cast<size_t>(src)] != r) return false;
  const Region& g = regions_[static_cast<size_t>(r)];
  tg.region = r;
  tg.by_diff = g.by_diff.data();
  tg.base = g.center - key_[static_cast<size_t>(dst)];  // by_diff[base + key(v)]: the difference v - dst
  return true;
}

}  // namespace sluice::net
