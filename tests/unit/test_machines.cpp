// Today's machines. GB200 NVL72: the rack generator (72 GPUs one NVSwitch hop apart, two per
// Grace CPU, racks joined by a Clos), an all-reduce inside a rack that never touches the
// scale-out fabric, one across racks that does, the GB200's catalog ceilings, and DeepSeek-V3
// served on a rack. TPU v5p: its pod (8,960 chips, OCS as v4's) and a training slice on it.
#include <doctest/doctest.h>

#include "test_support.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "config/error.h"
#include "config/node.h"
#include "engine/engine.h"
#include "hardware/spec.h"
#include "network/generators.h"
#include "network/collective.h"
#include "network/flow.h"
#include "network/routing.h"

using namespace sluice;
using namespace sluice::net;
using sluice::testing::run_text;

namespace {

Topology racks(int n) {
  return load_topology(load_yaml_string(fmt::format("{{catalog: gb200-nvl72, racks: {}}}", n), "t.yaml"), testing::registry(), "topology");
}

// The bytes an all-reduce of `bytes` over `devices` put on each kind of link.
std::map<std::string, double> bytes_by_kind(const Topology& t, const std::vector<int>& devices, double bytes, CollectiveKind kind) {
  Engine e(1);
  Router r(t);
  FlowSim sim(e, t, r);
  Collective c(sim, kind, devices, bytes);
  c.start();
  e.run();
  REQUIRE(c.finished());
  std::map<std::string, double> out;
  const auto carried = sim.carried_link_bytes();
  for (int l = 0; l < t.link_count(); ++l) out[t.link(l).label] += carried[static_cast<size_t>(l)];
  return out;
}

}  // namespace

TEST_CASE("nvl72: a rack is 72 GPUs on one NVSwitch domain, two per Grace, and racks join by a NIC per GPU") {
  const Topology one = racks(1);
  CHECK(one.family == "nvl72");
  CHECK(one.devices().size() == 72);
  int hosts = 0, switches = 0;
  for (int v = 0; v < one.node_count(); ++v) {
    hosts += one.node(v).kind == NodeKind::Host;
    switches += one.node(v).kind == NodeKind::Switch;
  }
  CHECK(hosts == 36);
  CHECK(switches == 1);  // one NVLink domain; one rack has no scale-out
  for (int l = 0; l < one.link_count(); ++l) {
    const auto& k = one.link(l);
    if (k.label == "nvlink") CHECK(k.bandwidth_Bps == doctest::Approx(900e9));
    else CHECK(k.label == "pcie");  // NVLink-C2C to Grace, the host link
  }
  const Topology four = racks(4);
  CHECK(four.devices().size() == 288);
  int nics = 0;
  for (int l = 0; l < four.link_count(); ++l) nics += four.link(l).label == "nic" && four.node(four.link(l).src).kind == NodeKind::Device;
  CHECK(nics == 288);
  CHECK_THROWS_WITH_AS(load_topology(load_yaml_string("{catalog: gb200-nvl72, gpus_per_rack: 72, gpus_per_grace: 4, racks: 0}", "t.yaml"),
                                     testing::registry(), "topology"),
                       doctest::Contains("racks"), ConfigError);
}

TEST_CASE("nvl72: an all-reduce inside a rack never touches the scale-out fabric, one across racks does") {
  const Topology t = racks(2);
  const auto devs = t.devices();
  const std::vector<int> rack0(devs.begin(), devs.begin() + 72);
  for (CollectiveKind k : {CollectiveKind::AllReduceRing, CollectiveKind::AllReduceNvls}) {
    const auto inside = bytes_by_kind(t, rack0, 1e9, k);
    CHECK(inside.at("nvlink") > 0);
    CHECK(inside.at("nic") == 0);
    CHECK(inside.at("uplink") == 0);
  }
  std::vector<int> across(devs.begin() + 36, devs.begin() + 108);  // half of each rack
  const auto crossing = bytes_by_kind(t, across, 1e9, CollectiveKind::AllReduceRing);
  CHECK(crossing.at("nic") > 0);
  // A rack's all-reduce runs at NVLink speed: a 72-GPU ring of 1 GB moves 2 x 71/72 GB a GPU at 900 GB/s.
  const double ring_s = collective_time(t, CollectiveKind::AllReduceRing, rack0, 1e9).to_seconds();
  CHECK(ring_s == doctest::Approx(2.0 * 71 / 72 * 1e9 / 900e9).epsilon(0.05));
}

TEST_CASE("nvl72: the GB200's ceilings are the datasheet's, dense, and it runs FP4") {
  const HardwareSpec g = load_hardware("gb200");
  CHECK(g.peak_bf16_flops == doctest::Approx(2.5e15));
  CHECK(g.peak_fp8_flops == doctest::Approx(5e15));
  CHECK(g.peak_fp4_flops == doctest::Approx(10e15));
  CHECK(g.supports(Precision::FP4));
  CHECK(g.pcie_Bps == doctest::Approx(225e9));  // NVLink-C2C to Grace, per GPU per direction
  const HardwareSpec b = load_hardware("b200");
  CHECK(g.effective_flops() > b.effective_flops());
}

TEST_CASE("nvl72: DeepSeek-V3's all-to-alls on a rack's NVLink take less time than across two H200 servers' NICs") {
  const auto dir = std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios";
  const std::string rack = testing::slurp(dir / "deepseek-v3-nvl72.yaml");
  const std::vector<std::string> small = {"workloads.0.workload.requests=150", "workloads.0.workload.arrival.clients=64"};
  const Json m = run_text(rack, small)["serving"];
  CHECK(m["requests"]["completed"].get<int64_t>() == 150);
  CHECK(m["moe"]["alltoalls"].get<int64_t>() > 0);
  // The same model, load and EP 16 across two 8 x H200 servers of a rail-optimized fabric: its
  // all-to-alls cross the NICs (50 GB/s a GPU) where the rack's stay on NVLink (900 GB/s).
  const Json servers = run_text(testing::slurp(dir / "deepseek-v3-ep16.yaml"), small)["serving"];
  CHECK(m["moe"]["alltoall_ms_mean"].get<double>() < servers["moe"]["alltoall_ms_mean"].get<double>() / 4);
  const Json mtp = run_text(rack, {"workloads.0.workload.requests=150", "workloads.0.workload.arrival.clients=64",
                                   "workloads.0.deployment.speculative.method=mtp"})["serving"];
  CHECK(mtp["speculative"]["drafter"].get<std::string>() == "deepseek-v3 mtp head");
  CHECK(mtp["latency_ms"]["tpot"]["mean"].get<double>() < m["latency_ms"]["tpot"]["mean"].get<double>());
}

TEST_CASE("tpu v5p: the pod has 8960 chips at 100 GB/s a link, and a training slice on it beats the same slice of v4") {
  const Topology pod = load_topology_by_name("tpu-v5p-pod", testing::registry());
  CHECK(pod.devices().size() == 8960);
  int other = 0;
  for (int l = 0; l < pod.link_count(); ++l) other += pod.link(l).bandwidth_Bps != 100e9;
  CHECK(other == 0);
  const HardwareSpec v5 = load_hardware("tpu-v5p");
  CHECK(v5.peak_bf16_flops == doctest::Approx(459e12));
  CHECK(v5.hbm_bandwidth_Bps == doctest::Approx(2765e9));
  const std::string slices = testing::slurp(std::filesystem::path(SLUICE_TESTS_DIR).parent_path() / "scenarios/tpu-v4-slices.yaml");
  const std::vector<std::string> small = {"workloads.0.workload.requests=40"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), small.begin(), small.end());
    return run_text(slices, sets)["workloads"]["pretrain"];
  };
  const Json v4 = with({});
  const Json v5p = with({"cluster.topology={catalog: tpu-v5p-pod, cubes: [4, 4, 4]}", "cluster.hardware=tpu-v5p"});
  // Twice the ICI bandwidth halves the data-parallel all-reduce; 1.67x the FLOP/s and 2.3x the
  // HBM bandwidth shorten the iteration by more than the FLOPs alone.
  CHECK(v5p["dp_allreduce_ms"].get<double>() == doctest::Approx(v4["dp_allreduce_ms"].get<double>() / 2).epsilon(0.02));
  CHECK(v4["iteration_s_mean"].get<double>() / v5p["iteration_s_mean"].get<double>() > 459.0 / 275);
  // The whole pod (140 cubes) loads, but slices are placed on pods of at most 64 cubes: said at the key.
  CHECK_THROWS_WITH_AS(run_text(slices, {"cluster.topology=tpu-v5p-pod", "cluster.hardware=tpu-v5p"}), doctest::Contains("at most 64"),
                       ConfigError);
}

TEST_CASE("xgmi mesh: MI300X GPUs talk over one direct link a pair, so a ring uses one link a hop and an all-to-all all seven") {
  const Topology t = load_topology_by_name("mi300x-8", testing::registry());
  CHECK(t.family == "xgmi-mesh");
  const auto devs = t.devices();
  REQUIRE(devs.size() == 8);
  int xgmi = 0, switches = 0;
  for (int l = 0; l < t.link_count(); ++l) xgmi += t.link(l).label == "xgmi";
  for (int v = 0; v < t.node_count(); ++v) switches += t.node(v).kind == NodeKind::Switch;
  CHECK(xgmi == 2 * 28);  // both directions of the 28 pairs
  CHECK(switches == 0);
  const double S = 8e9;
  // All-to-all: each GPU sends S/8 to each peer, all seven links at once.
  const double a2a = collective_time(t, CollectiveKind::AllToAll, devs, S).to_seconds();
  CHECK(a2a == doctest::Approx(S / 8 / 64e9).epsilon(0.02));
  // The ring all-reduce runs as four rings (strides 1, 3, 5, 7: each a cycle through all eight on
  // links the others do not use), a quarter of the bytes each: 2 x 7 steps of S/32 over one link.
  const auto rings = ring_channels(t, devs);
  CHECK(rings.size() == 4);
  std::set<std::pair<int, int>> hops;
  for (const auto& r : rings)
    for (size_t i = 0; i < r.size(); ++i) CHECK(hops.insert({r[i], r[(i + 1) % r.size()]}).second);
  const double ring = collective_time(t, CollectiveKind::AllReduceRing, devs, S).to_seconds();
  CHECK(ring == doctest::Approx(2.0 * 7 * (S / 32) / 64e9).epsilon(0.01));
  const auto bytes = bytes_by_kind(t, devs, S, CollectiveKind::AllReduceRing);
  CHECK(bytes.at("xgmi") > 0);
  CHECK(bytes.count("nic") == 0);
}
