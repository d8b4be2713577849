// `sluice bench network`: how fast the flow-level network simulates. A ring all-reduce over
// all 4096 chips of a TPU v4 pod, an all-to-all over 256 GPUs of a fat-tree, and how the
// cost grows with the number of concurrent flows (all-to-all at three sizes).
#include <chrono>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "network/collective.h"
#include "network/generators.h"
#include "registry/registry.h"

namespace sluice::net {

namespace {

struct Run {
  double wall_s = 0;
  SimTime sim;
  FlowStats stats;
};

Run run_collective(const Topology& t, CollectiveKind kind, const std::vector<int>& devs, double bytes) {
  Engine engine(1);
  Router router(t);
  FlowSim sim(engine, t, router);
  Collective c(sim, kind, devs, bytes);
  const auto t0 = std::chrono::steady_clock::now();
  c.start();
  engine.run();
  Run r;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sim = c.duration();
  r.stats = sim.stats();
  return r;
}

Topology fat_tree(int servers) {
  ClosSpec c;
  c.servers = servers;
  c.server.host_cpus = 0;
  return build_clos(c, fmt::format("fat-tree-{}", servers * 8));
}

void print_run(const std::string& what, const Run& r) {
  std::printf("%s\n", what.c_str());
  std::printf("  wall %.3f s   flows %llu   %.0f flows/s   simulated %s\n", r.wall_s, static_cast<unsigned long long>(r.stats.started),
              static_cast<double>(r.stats.started) / r.wall_s, r.sim.str().c_str());
  std::printf("  rate recomputations %llu, mean component %.1f flows / %.1f links, largest %llu flows, peak concurrent %llu\n",
              static_cast<unsigned long long>(r.stats.recomputes),
              static_cast<double>(r.stats.flows_rated) / static_cast<double>(std::max<uint64_t>(1, r.stats.recomputes)),
              static_cast<double>(r.stats.links_rated) / static_cast<double>(std::max<uint64_t>(1, r.stats.recomputes)),
              static_cast<unsigned long long>(r.stats.max_component_flows), static_cast<unsigned long long>(r.stats.max_active));
}

int bench_network(bool quick) {
  std::printf("sluice bench network%s\n\n", quick ? " --quick" : "");
  {
    PodSpec p;
    if (quick) p.cubes = {2, 2, 2};
    const Topology pod = build_tpu_pod(p, "tpu-v4-pod");
    const auto ring = ring_order(pod);
    const double bytes = 1024.0 * 1024 * 1024;
    const Run r = run_collective(pod, CollectiveKind::AllReduceRing, ring, bytes);
    const double n = static_cast<double>(ring.size());
    const double analytic = 2 * (n - 1) / n * bytes / p.link_Bps * 1e9 + 2 * (n - 1) * static_cast<double>(p.link_latency_ns);
    print_run(fmt::format("ring all-reduce of 1 GiB over {} chips of a TPU v4 pod ({} cubes, snake ring on the torus)", ring.size(),
                          p.cubes[0] * p.cubes[1] * p.cubes[2]),
              r);
    std::printf("  analytic 2(n-1)/n*S/B + 2(n-1)*hop = %.0f ns, simulated %lld ns\n\n", analytic, static_cast<long long>(r.sim.count_ns()));
  }
  {
    const int servers = quick ? 8 : 32;
    const Topology ft = fat_tree(servers);
    const Run r = run_collective(ft, CollectiveKind::AllToAll, ft.devices(), 256.0 * 1024 * 1024);
    print_run(fmt::format("all-to-all of 256 MiB per GPU over {} GPUs of a 2-tier fat-tree (400 Gb/s per GPU)", ft.devices().size()), r);
    std::printf("\n");
  }
  std::printf("cost growth with concurrent flows (all-to-all on fat-trees, n(n-1) flows at once):\n");
  std::printf("  %8s %12s %10s %12s %14s %16s\n", "GPUs", "flows", "wall s", "us/flow", "recomputes", "flows rated");
  const std::vector<int> sizes = quick ? std::vector<int>{2, 4, 8} : std::vector<int>{8, 16, 32};
  std::vector<std::pair<double, double>> pts;
  for (int s : sizes) {
    const Topology ft = fat_tree(s);
    const Run r = run_collective(ft, CollectiveKind::AllToAll, ft.devices(), 64.0 * 1024 * 1024);
    std::printf("  %8zu %12llu %10.3f %12.2f %14llu %16llu\n", ft.devices().size(), static_cast<unsigned long long>(r.stats.started),
                r.wall_s, r.wall_s * 1e6 / static_cast<double>(r.stats.started), static_cast<unsigned long long>(r.stats.recomputes),
                static_cast<unsigned long long>(r.stats.flows_rated));
    pts.push_back({static_cast<double>(r.stats.started), r.wall_s});
  }
  const double k = std::log(pts.back().second / pts.front().second) / std::log(pts.back().first / pts.front().first);
  std::printf("  wall time grows as flows^%.2f between the smallest and largest size (1 = linear, 2 = quadratic)\n", k);
  // The hard case: on a torus flows end in many waves, each re-rating the shared component.
  std::printf("\ncost growth when flows end in many waves (all-to-all on 3D tori, shortest-path ECMP, exact timing):\n");
  std::printf("  %8s %12s %10s %12s %14s %16s %14s %14s\n", "chips", "flows", "wall s", "us/flow", "recomputes", "flows rated", "rated/flow",
              "rate changes");
  const std::vector<std::vector<int>> shapes =
      quick ? std::vector<std::vector<int>>{{2, 2, 2}, {2, 2, 4}, {4, 4, 4}} : std::vector<std::vector<int>>{{4, 4, 4}, {4, 4, 8}, {4, 8, 8}};
  pts.clear();
  for (const auto& dims : shapes) {
    TorusSpec spec;
    spec.dims = dims;
    const Topology t = build_torus(spec, "torus");
    Engine engine(1);
    Router router(t, RoutePolicy::ShortestPath);
    FlowSim sim(engine, t, router);
    Collective c(sim, CollectiveKind::AllToAll, t.devices(), 64.0 * 1024 * 1024);
    const auto t0 = std::chrono::steady_clock::now();
    c.start();
    engine.run();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& st = sim.stats();
    std::printf("  %8zu %12llu %10.3f %12.2f %14llu %16llu %14.1f %14llu\n", t.devices().size(), static_cast<unsigned long long>(st.started),
                wall, wall * 1e6 / static_cast<double>(st.started), static_cast<unsigned long long>(st.recomputes),
                static_cast<unsigned long long>(st.flows_rated), static_cast<double>(st.flows_rated) / static_cast<double>(st.started),
                static_cast<unsigned long long>(st.reschedules));
    pts.push_back({static_cast<double>(st.started), wall});
  }
  const double k2 = std::log(pts.back().second / pts.front().second) / std::log(pts.back().first / pts.front().first);
  std::printf("  wall time grows as flows^%.2f; recomputations grow with the number of completion waves, not with flows\n", k2);
  return 0;
}

}  // namespace

SLUICE_REGISTER(bench, network_bench) {
  reg.add("bench", "network",
          "flow-level network speed: ring all-reduce over a 4096-chip TPU v4 pod, all-to-all over 256 fat-tree GPUs, scaling with flows",
          Schema{}, BenchFn(bench_network));
}

}  // namespace sluice::net
