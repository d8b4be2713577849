// A TPU pod's slices: forming one (its chips in ring order, and with OCS its own torus of
// circuits), tearing one down, and the record of every slice formed.
#include "world/slices.h"

#include <algorithm>

#include "network/generators.h"

namespace sluice {

SliceManager::SliceManager(net::Topology& t, net::Router& router, net::FlowSim& flows, Engine& engine, int64_t reconfigure_ns)
    : topo_(t), router_(router), flows_(flows), engine_(engine), reconfigure_ns_(reconfigure_ns) {
  if (!(t.pod && t.torus)) return;  // the pod generator's own description, not guessed from names or counts
  ocs_ = t.pod->ocs;
  edge_ = t.pod->cube_edge;
  grid_ = t.pod->grid;
  const int n = static_cast<int>(t.devices().size());
  cube_at_.assign(static_cast<size_t>(n), -1);
  for (int d = 0; d < n; ++d) {
    const auto& c = t.node(device_node(d)).coord;
    cube_at_[static_cast<size_t>(t.torus->index(c[0], c[1], c[2]))] = d;
  }
}

std::vector<int> SliceManager::form(const std::vector<int>& cubes, std::array<int, 3> shape, bool twist, const std::string& who) {
  auto& t = topo_;
  const int e = edge_;
  const auto& g = grid_;
  auto cube_coord = [&](int c) { return std::array<int, 3>{c % g[0], (c / g[0]) % g[1], c / (g[0] * g[1])}; };
  // Each cube's position in the slice, in cubes.
  std::vector<std::array<int, 3>> pos(cubes.size());
  std::array<int, 3> dims = shape;
  if (ocs_) {
    for (size_t i = 0; i < cubes.size(); ++i) {
      const int k = static_cast<int>(i);
      pos[i] = {k % shape[0], (k / shape[0]) % shape[1], k / (shape[0] * shape[1])};
    }
  } else {
    // A contiguous block, possibly wrapping round the static torus: per dimension, its extent
    // and the first coordinate from which the block is consecutive.
    for (int d = 0; d < 3; ++d) {
      std::vector<char> used(static_cast<size_t>(g[static_cast<size_t>(d)]), 0);
      for (int c : cubes) used[static_cast<size_t>(cube_coord(c)[static_cast<size_t>(d)])] = 1;
      int extent = 0;
      for (char u : used) extent += u;
      int start = 0;
      for (int s0 = 0; s0 < g[static_cast<size_t>(d)]; ++s0)
        if (used[static_cast<size_t>(s0)] && !used[static_cast<size_t>((s0 + g[static_cast<size_t>(d)] - 1) % g[static_cast<size_t>(d)])]) start = s0;
      dims[static_cast<size_t>(d)] = extent;
      for (size_t i = 0; i < cubes.size(); ++i)
        pos[i][static_cast<size_t>(d)] = (cube_coord(cubes[i])[static_cast<size_t>(d)] - start + g[static_cast<size_t>(d)]) % g[static_cast<size_t>(d)];
    }
  }
  const int X = dims[0] * e, Y = dims[1] * e, Z = dims[2] * e;
  std::vector<int> at(static_cast<size_t>(X * Y * Z), -1);  // device by slice coordinate
  for (size_t i = 0; i < cubes.size(); ++i) {
    const auto cc = cube_coord(cubes[i]);
    for (int z = 0; z < e; ++z)
      for (int y = 0; y < e; ++y)
        for (int x = 0; x < e; ++x) {
          const int d = cube_at_[static_cast<size_t>(t.torus->index(cc[0] * e + x, cc[1] * e + y, cc[2] * e + z))];
          const int sx = pos[i][0] * e + x, sy = pos[i][1] * e + y, sz = pos[i][2] * e + z;
          at[static_cast<size_t>(sx + X * (sy + Y * sz))] = d;
        }
  }
  if (ocs_) {
    // The slice's torus: a circuit for every neighbour pair that crosses a cube face
    // (through the OCS of that dimension and face position), wrap-around included.
    double bw = 0;
    int64_t lat = 0;
    for (int l = 0; l < t.link_count(); ++l)
      if (t.link(l).label == "ici") {
        bw = t.link(l).bandwidth_Bps;
        lat = t.link(l).latency_ns;
        break;
      }
    std::vector<int> ocs_ids;
    for (int v = 0; v < t.node_count(); ++v)
      if (t.node(v).kind == net::NodeKind::Ocs) ocs_ids.push_back(v);
    const std::array<int, 3> D{X, Y, Z};
    const int first_circuit = t.link_count();
    // Twisted (TPU v4's OCS slices of shape k×k×2k or k×2k×2k): a wrap-around link of a short
    // dimension (extent k) lands k further along every long one (extent 2k). k is a multiple
    // of the cube edge, so the far end keeps its face position: the same OCS carries it.
    const bool twisted = twist && net::twist_allowed({X, Y, Z});
    const int k_short = std::min({X, Y, Z});
    for (int z = 0; z < Z; ++z)
      for (int y = 0; y < Y; ++y)
        for (int x = 0; x < X; ++x) {
          const std::array<int, 3> c{x, y, z};
          for (int d = 0; d < 3; ++d) {
            if (c[static_cast<size_t>(d)] % e != e - 1) continue;  // inside a cube: electrical
            std::array<int, 3> n = c;
            n[static_cast<size_t>(d)] = (c[static_cast<size_t>(d)] + 1) % D[static_cast<size_t>(d)];
            if (twisted && c[static_cast<size_t>(d)] == D[static_cast<size_t>(d)] - 1 && D[static_cast<size_t>(d)] == k_short)
              for (int l = 0; l < 3; ++l)
                if (D[static_cast<size_t>(l)] == 2 * k_short) n[static_cast<size_t>(l)] = (n[static_cast<size_t>(l)] + k_short) % (2 * k_short);
            const int a = at[static_cast<size_t>(c[0] + X * (c[1] + Y * c[2]))];
            const int b = at[static_cast<size_t>(n[0] + X * (n[1] + Y * n[2]))];
            const int u = c[static_cast<size_t>((d + 1) % 3)] % e, w = c[static_cast<size_t>((d + 2) % 3)] % e;
            const size_t oi = static_cast<size_t>(d * e * e + u * e + w);
            const int e = t.add_link(device_node(a), device_node(b), bw, lat, "ici-ocs-slice", 0, true,
                                     oi < ocs_ids.size() ? ocs_ids[oi] : -1);
            if (running_ && reconfigure_ns_ > 0)
              for (int l : {e, t.link(e).reverse}) {
                flows_.set_link_capacity(l, 0);
                flows_.set_link_capacity_at(engine_.now() + SimTime::ns(reconfigure_ns_), l, bw);
              }
          }
        }
    // The slice's torus as the router's closed forms read it (checked there against the links).
    net::TorusShape shape;
    shape.ndims = 3;
    shape.dims = D;
    shape.twisted = twisted;
    shape.node_at.resize(at.size());
    for (size_t i = 0; i < at.size(); ++i) shape.node_at[i] = device_node(at[i]);
    t.slices.push_back(std::move(shape));
    if (hooks_.added) hooks_.added(first_circuit, t.link_count());  // (before the router reads them)
    router_.invalidate();
    formed_.push_back(Record{who, {X, Y, Z}, twisted ? "twisted torus" : "torus"});
  } else {
    formed_.push_back(Record{who, {X, Y, Z}, "static block"});
  }
  // Ring order: a boustrophedon snake over the slice, so ring neighbours are torus neighbours.
  std::vector<int> order;
  long row = 0;
  for (int z = 0; z < Z; ++z)
    for (int yi = 0; yi < Y; ++yi) {
      const int y = (z % 2 == 0) ? yi : Y - 1 - yi;
      for (int xi = 0; xi < X; ++xi) {
        const int x = (row % 2 == 0) ? xi : X - 1 - xi;
        order.push_back(at[static_cast<size_t>(x + X * (y + Y * z))]);
      }
      ++row;
    }
  return order;
}

void SliceManager::tear_down(const std::vector<int>& devices) {
  auto& t = topo_;
  std::vector<char> in(static_cast<size_t>(t.node_count()), 0);
  for (int d : devices) in[static_cast<size_t>(device_node(d))] = 1;
  for (int e = 0; e < t.link_count(); ++e) {
    auto& l = t.mutable_link(e);
    if (l.label != "ici-ocs-slice" || !in[static_cast<size_t>(l.src)] || !in[static_cast<size_t>(l.dst)]) continue;
    if (hooks_.torn) hooks_.torn(e);  // (a circuit a fault holds down must not come back at the repair)
    if (!l.up) continue;
    l.up = false;
    flows_.set_link_capacity(e, 0);
  }
  std::erase_if(t.slices, [&](const net::TorusShape& s) { return !s.node_at.empty() && in[static_cast<size_t>(s.node_at.front())]; });
  router_.invalidate();
}

}  // namespace sluice
