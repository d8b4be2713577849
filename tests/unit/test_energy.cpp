// Energy, power, cost and carbon (world/energy.h): a device's energy and a small cluster's
// energy and cost by hand, a workload's share, a served run's devices against its own
// metrics, autoscaled replicas off while unpaid, and bad input refused at its key.
#include <cmath>

#include <fmt/format.h>

#include "test_support.h"
#include "engine/busy_profile.h"
#include "world/energy.h"

using namespace sluice;
using sluice::testing::run_text;

namespace {

HardwareSpec powered(double tdp, double idle, double mem) {
  HardwareSpec h = sluice::testing::round_device();
  h.tdp_w = tdp;
  h.idle_w = idle;
  h.memory_bound_w = mem;
  return h;
}

constexpr double kYear = 365.25 * 86400, kMonth = kYear / 12;

// Two GPUs of one server (one host) on one switch, a NIC each.
net::Topology two_gpus() {
  using namespace sluice::net;
  Topology t("two-gpus");
  const int g0 = t.add_node(NodeInfo{"g0", NodeKind::Device, 0, 1000, {-1, -1, -1}, 0});
  const int g1 = t.add_node(NodeInfo{"g1", NodeKind::Device, 0, 1000, {-1, -1, -1}, 0});
  const int host = t.add_node(NodeInfo{"h0", NodeKind::Host, 0, 500, {-1, -1, -1}, 0});
  const int sw = t.add_node(NodeInfo{"sw", NodeKind::Switch, 0, 2000, {-1, -1, -1}, -1});
  t.add_link(g0, sw, 50e9, 500, "nic", 100);
  t.add_link(g1, sw, 50e9, 500, "nic", 100);
  t.add_link(g0, host, 64e9, 600, "pcie");
  t.add_link(g1, host, 64e9, 600, "pcie");
  return t;
}

}  // namespace

TEST_CASE("energy: a device draws idle while on, memory-bound power while busy, up to TDP while compute-bound") {
  const HardwareSpec h = powered(700, 75, 450);
  // 10 s, 2 of them off, busy 4, compute-bound 1: 75 x 8 + 375 x 4 + 250 x 1.
  CHECK(device_energy_j(h, 10, DeviceActivity{4, 1, 2}) == doctest::Approx(2350).epsilon(1e-12));
  // Compute beyond busy and busy beyond the time on are clamped: on 8 s, busy 8, compute 8 = TDP x 8.
  CHECK(device_energy_j(h, 10, DeviceActivity{20, 30, 2}) == doctest::Approx(700 * 8).epsilon(1e-12));
  // Idle all the way.
  CHECK(device_energy_j(h, 10, DeviceActivity{}) == doctest::Approx(750).epsilon(1e-12));
  // A device with no power figures is not counted.
  CHECK(device_energy_j(sluice::testing::round_device(), 10, DeviceActivity{4, 1, 0}) == 0);
}

TEST_CASE("energy: a small cluster's energy, cost and carbon by hand, and one workload's share") {
  const net::Topology t = two_gpus();
  const HardwareSpec hw = powered(700, 100, 400);
  Economics e;
  e.pue = 1.5;
  e.usd_per_kwh = 0.1;
  e.lifetime_years = 1;
  e.hosting_usd_per_kw_month = 100;
  e.grid_g_per_kwh = 400;
  e.host_w = 1000;
  e.host_idle_w = 200;
  e.switch_w = 300;
  e.nic_w = 20;
  const double T = 10;
  const EnergyLedger L(t, {&hw, &hw}, {DeviceActivity{5, 2, 0}, DeviceActivity{}}, T, e);
  REQUIRE(L.known());
  // g0: 100 x 10 + 300 x 5 + 300 x 2; g1 idle; the host at its server's mean busy fraction
  // (0.25); the switch and two NICs constant.
  CHECK(L.device_j(0) == doctest::Approx(3100).epsilon(1e-12));
  CHECK(L.device_j(1) == doctest::Approx(1000).epsilon(1e-12));
  const double host_j = (200 + 800 * 0.25) * T, switch_j = 300 * T, nics_j = 2 * 20 * T;
  const double it = 3100 + 1000 + host_j + switch_j + nics_j;
  CHECK(L.it_j() == doctest::Approx(it).epsilon(1e-12));
  CHECK(L.facility_j() == doctest::Approx(1.5 * it).epsilon(1e-12));
  // Cost: capex (devices, host, switch, NIC cables) amortised over a year, electricity at the
  // facility, hosting of the provisioned IT power (TDPs, the host at full, switch, NICs).
  const double capex = 2 * 1000 + 500 + 2000 + 2 * 100;
  const double full_kw = (2 * 700 + 1000 + 300 + 2 * 20) / 1e3;
  const double usd = capex * T / kYear + 1.5 * it / 3.6e6 * 0.1 + full_kw * 100 * T / kMonth;
  CHECK(L.cost_usd() == doctest::Approx(usd).epsilon(1e-12));
  Json w;
  L.report_world(w);
  CHECK(w["energy"]["hosts_J"].get<double>() == doctest::Approx(host_j).epsilon(1e-12));
  CHECK(w["energy"]["provisioned_power_W"].get<double>() == doctest::Approx(full_kw * 1e3 * 1.5).epsilon(1e-12));
  CHECK(w["energy"]["components"]["nics"].get<int>() == 2);
  CHECK(w["cost"]["usd"].get<double>() == doctest::Approx(usd).epsilon(1e-12));
  CHECK(w["carbon"]["kg"].get<double>() == doctest::Approx(1.5 * it / 3.6e6 * 400 / 1e3).epsilon(1e-12));
  // A workload holding g0 alone: its device and half of everything shared.
  Json m;
  L.report_workload(m, {0}, {{"output_token", 100}});
  const double share_j = (host_j + switch_j + nics_j) / 2;
  CHECK(m["energy"]["devices_J"].get<double>() == doctest::Approx(3100).epsilon(1e-12));
  CHECK(m["energy"]["shared_J"].get<double>() == doctest::Approx(share_j).epsilon(1e-12));
  CHECK(m["energy"]["J_per_output_token"].get<double>() == doctest::Approx(1.5 * (3100 + share_j) / 100).epsilon(1e-12));
  const double wl_usd = (1000 + (capex - 2000) / 2) * T / kYear + 1.5 * (3100 + share_j) / 3.6e6 * 0.1 +
                        (700 + (1000 + 300 + 40) / 2.0) / 1e3 * 100 * T / kMonth;
  CHECK(m["cost"]["usd"].get<double>() == doctest::Approx(wl_usd).epsilon(1e-12));
  CHECK(m["cost"]["usd_per_million_output_tokens"].get<double>() == doctest::Approx(wl_usd / 100 * 1e6).epsilon(1e-12));
  // A device without power figures: nothing reported, the summary says which.
  const HardwareSpec bare = sluice::testing::round_device();
  const EnergyLedger U(t, {&hw, &bare}, {DeviceActivity{}, DeviceActivity{}}, T, e);
  CHECK_FALSE(U.known());
  Json u;
  U.report_world(u);
  CHECK_FALSE(u.contains("energy"));
  CHECK(U.world_summary().find("round") != std::string::npos);
}

namespace {
const std::string kServed = sluice::testing::llama3_8b_on_h200("t", 60, "{kind: closed_loop, clients: 8}");
}  // namespace

TEST_CASE("energy: a served run's devices draw what their busy time and FLOPs say, and its figures divide by its tokens") {
  for (const int pp : {1, 2}) {
    CAPTURE(pp);
    const Json m = run_text(kServed, {fmt::format("deployment.pipeline_parallel={}", pp)});
    const Json& w = m["world"];
    const Json& s = m["serving"];
    const double T = w["simulated_s"].get<double>();
    REQUIRE(w["devices"].get<int>() == 8);  // the implicit cluster: one server of 8, `pp` of them serving
    // Each stage's devices are busy for the replica's busy time (utilization: its first
    // stage's), not 1/pp of it.
    const double busy = s["batching"]["utilization"].get<double>() * T;
    // The compute-bound share from the FLOPs MFU counts (2 per non-embedding parameter per
    // computed token), less the first output token of each request (its prefill computed it,
    // MFU counts it once more as an output token), at the H200's sustained GEMM ceiling, split
    // over the replica's devices.
    const double mfu_flops = s["batching"]["mfu"].get<double>() * busy * pp * 989e12;
    const double per_token = mfu_flops / (s["throughput"]["input_tokens"].get<double>() + s["throughput"]["output_tokens"].get<double>());
    const double flops = mfu_flops - per_token * s["requests"]["completed"].get<double>();
    const double compute = flops / (767.32e12 * 0.87);
    const double mine = pp * (75 * T + (450 - 75) * busy) + (700 - 450) * compute;
    CHECK(s["energy"]["devices_J"].get<double>() == doctest::Approx(mine).epsilon(1e-5));
    CHECK(w["energy"]["devices_J"].get<double>() == doctest::Approx(mine + (8 - pp) * 75 * T).epsilon(1e-5));
    CHECK(s["energy"]["J_per_output_token"].get<double>() ==
          doctest::Approx(s["energy"]["facility_J"].get<double>() / s["throughput"]["output_tokens"].get<double>()).epsilon(1e-12));
    CHECK(s["cost"]["capex_usd"].get<double>() == doctest::Approx(32000.0 * pp).epsilon(1e-12));  // H200s at their catalog price
  }
  const Json m = run_text(kServed);
  const Json& s = m["serving"];
  // A dearer grid and price move only what they should.
  const Json m2 = run_text(kServed, {"economics.electricity_price=0.16", "economics.grid_intensity=740"});
  CHECK(m2["serving"]["cost"]["electricity_usd"].get<double>() == doctest::Approx(2 * s["cost"]["electricity_usd"].get<double>()).epsilon(1e-9));
  CHECK(m2["serving"]["cost"]["capex_amortised_usd"].get<double>() == s["cost"]["capex_amortised_usd"].get<double>());
  CHECK(m2["serving"]["carbon"]["kg"].get<double>() == doctest::Approx(2 * s["carbon"]["kg"].get<double>()).epsilon(1e-9));
}

TEST_CASE("energy: a training job's hot spares draw idle power, charged to the job, not its busy power") {
  // No fault fires before the job ends, so both runs have the same timeline; the spare
  // server's eight H100s idle either way (held by the job, or by nobody).
  auto job = [](int spares) {
    return "name: sp\nseed: 1\ncluster: {topology: {catalog: fat-tree, servers: 4}, hardware: h100-sxm}\n"
           "workloads:\n  - name: j\n    kind: training\n    model: tinyllama-1.1b\n    cost_tables: none\n"
           "    parallel: {tp: 8, pp: 1, dp: 2, micro_batches: 2}\n    sequence: 512\n    iterations: 50\n"
           "    place: {servers: [0-1]}\n    recovery: {checkpoint_interval: 0s, restart: 5s, spare_servers: " +
           std::to_string(spares) + "}\nfaults:\n  - {kind: trace, events: [\"100000s chip:gpu3.0 down\"]}\n";
  };
  const Json with = run_text(job(1)), without = run_text(job(0));
  const double T = with["world"]["simulated_s"].get<double>();
  REQUIRE(T == without["world"]["simulated_s"].get<double>());
  CHECK(with["world"]["energy"]["devices_J"].get<double>() == doctest::Approx(without["world"]["energy"]["devices_J"].get<double>()).epsilon(1e-12));
  const Json& tw = with["training"];
  const Json& to = without["training"];
  CHECK(tw["energy"]["devices_J"].get<double>() - to["energy"]["devices_J"].get<double>() == doctest::Approx(8 * 70 * T).epsilon(1e-9));
}

TEST_CASE("energy: an autoscaled replica draws nothing while it is off") {
  // Four replicas, never more than one wanted: the autoscaler keeps three off all the run, so
  // the deployment draws what one replica alone draws; four fixed replicas draw their idle power too.
  const std::string yaml = kServed + "autoscaling: {policy: queue, min_replicas: 1, target: 1000, interval: 1s}\n";
  const Json one = run_text(kServed);
  const Json scaled = run_text(yaml, {"deployment.replicas=4"});
  const Json fixed = run_text(yaml, {"deployment.replicas=4", "autoscaling.policy=none"});
  CHECK(scaled["serving"]["autoscaling"]["replicas_most"].get<double>() == 1);
  const double one_j = one["serving"]["energy"]["devices_J"].get<double>();
  CHECK(scaled["serving"]["energy"]["devices_J"].get<double>() == doctest::Approx(one_j).epsilon(1e-3));
  const double T = fixed["world"]["simulated_s"].get<double>();
  CHECK(fixed["serving"]["energy"]["devices_J"].get<double>() > one_j + 0.9 * 3 * 75 * T);
  // The world holds the same eight devices either way: the off ones draw nothing.
  CHECK(scaled["world"]["energy"]["devices_J"].get<double>() < fixed["world"]["energy"]["devices_J"].get<double>());
}

TEST_CASE("energy: bad power and economics input is refused at its key") {
  auto refused = [](const std::vector<std::string>& sets, const std::string& expect) {
    std::string msg;
    try {
      run_text(kServed, sets);
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find(expect) != std::string::npos);
  };
  refused({"hardware={catalog: h200, idle_power: 800W}"}, "idle_power");
  refused({"hardware={catalog: h200, memory_bound_power: 50W}"}, "memory_bound_power");
  refused({"economics.host_idle_power=3kW"}, "host_idle_power");
  refused({"economics.pue=0.5"}, "pue");
  refused({"economics.switch_power=12"}, "switch_power");  // no unit
  refused({"hardware={catalog: h200, host_power: 400W}"}, "host_idle_power");  // one without the other
  refused({"hardware={catalog: h200, host_power: 400W, host_idle_power: 500W}"}, "host_idle_power");
}

TEST_CASE("energy: a busy profile keeps every busy nanosecond and unit of work as its windows widen") {
  BusyProfile p;
  p.add(500'000'000, 2'500'000'000);  // 0.5 s .. 2.5 s: half of window 0, all of 1, half of 2
  p.work(1'200'000'000, 7);
  CHECK(p.width_ns() == 1'000'000'000);
  CHECK(p.busy_ns(0) == doctest::Approx(5e8));
  CHECK(p.busy_ns(1) == doctest::Approx(1e9));
  CHECK(p.busy_ns(2) == doctest::Approx(5e8));
  CHECK(p.work_in(1) == 7);
  // A stretch past the last of 1024 one-second windows doubles them (twice, for 3000 s).
  p.add(2'999'000'000'000, 3'000'000'000'000, 0.5);
  CHECK(p.width_ns() == 4'000'000'000);
  CHECK(p.busy_ns(0) == doctest::Approx(2e9));
  CHECK(p.work_in(0) == 7);
  CHECK(p.total_busy_ns() == doctest::Approx(2e9 + 0.5e9));
  // Merging a finer profile brings it to the coarser width first.
  BusyProfile q;
  q.add(5'000'000'000, 6'000'000'000);
  p.merge(q);
  CHECK(p.width_ns() == 4'000'000'000);
  CHECK(p.busy_ns(1) == doctest::Approx(1e9));
  CHECK(p.total_busy_ns() == doctest::Approx(3.5e9));
  // Repeated stretches are the same, bit for bit, as adding each (across a widening too).
  BusyProfile one, many;
  for (int64_t i = 0; i < 5000; ++i) one.add(700'000'000 + i * 333'333'333, 700'000'000 + (i + 1) * 333'333'333, 0.37);
  many.add_repeated(700'000'000, 333'333'333, 5000, 0.37);
  REQUIRE(one.width_ns() == many.width_ns());
  CHECK(one.width_ns() == 2'000'000'000);
  for (size_t k = 0; k < 1024; ++k) CHECK(one.busy_ns(k) == many.busy_ns(k));
}

TEST_CASE("energy: peak power is the busiest second's, from when the devices were busy, by hand") {
  const net::Topology t = two_gpus();
  HardwareSpec hw = powered(700, 100, 400);
  Economics e;
  e.pue = 1.5;
  e.host_w = 1000;
  e.host_idle_w = 200;
  e.switch_w = 300;
  e.nic_w = 20;
  // g0 busy for the first second of four, its FLOPs (0.5 s compute-bound) there too; g1 idle.
  auto prof = std::make_shared<BusyProfile>();
  prof->add(0, 1'000'000'000);
  prof->work(500'000'000, 1);
  const EnergyLedger L(t, {&hw, &hw}, {DeviceActivity{1, 0.5, 0, prof}, DeviceActivity{}}, 4, e);
  // Second 0: g0 100 + 300 + 300 x 0.5, g1 100, the host at the server's busy fraction 0.5
  // (200 + 800 x 0.5), the switch and two NICs; x PUE.
  const double peak_it = (100 + 300 + 150) + 100 + (200 + 800 * 0.5) + 300 + 40;
  CHECK(L.peak_power_w() == doctest::Approx(1.5 * peak_it).epsilon(1e-12));
  CHECK(L.peak_window_s() == 1);
  // The workload holding g0: its device and half of the shared part, in that same second.
  CHECK(L.peak_power_w({0}) == doctest::Approx(1.5 * (550 + (600 + 340) / 2.0)).epsilon(1e-12));
  Json w;
  L.report_world(w);
  CHECK(w["energy"]["peak_power_W"].get<double>() == doctest::Approx(1.5 * peak_it).epsilon(1e-12));
  CHECK(w["energy"]["peak_power_W"].get<double>() > w["energy"]["average_power_W"].get<double>());
  // The energy is the same as with no profile; without one the peak is the average.
  const EnergyLedger flat(t, {&hw, &hw}, {DeviceActivity{1, 0.5, 0}, DeviceActivity{}}, 4, e);
  CHECK(flat.it_j() == doctest::Approx(L.it_j()).epsilon(1e-12));
  CHECK(flat.peak_power_w() == doctest::Approx(flat.facility_j() / 4).epsilon(1e-12));
  // A last window under half a second is read with the one before it: busy only in the last
  // 0.2 s of 4.2 s, the peak is over 1.2 s.
  auto late = std::make_shared<BusyProfile>();
  late->add(4'000'000'000, 4'200'000'000);
  const EnergyLedger tail(t, {&hw, &hw}, {DeviceActivity{0.2, 0, 0, late}, DeviceActivity{}}, 4.2, e);
  const double frac = 0.2 / 1.2;
  CHECK(tail.peak_power_w() == doctest::Approx(1.5 * ((100 + 300 * frac) + 100 + (200 + 800 * frac / 2) + 340)).epsilon(1e-12));
  // Three hours: windows widen to 16 s, so at most 1024 of them.
  const EnergyLedger longer(t, {&hw, &hw}, {DeviceActivity{1, 0.5, 0, prof}, DeviceActivity{}}, 3 * 3600, e);
  CHECK(longer.peak_window_s() == 16);
  // A host's power: the device catalog's when the scenario sets none, the scenario's when it does.
  hw.host_w = 400;
  hw.host_idle_w = 150;
  const EnergyLedger own(t, {&hw, &hw}, {DeviceActivity{}, DeviceActivity{}}, 4, e);
  Json o;
  own.report_world(o);
  CHECK(o["energy"]["hosts_J"].get<double>() == doctest::Approx(150 * 4).epsilon(1e-12));
  CHECK(o["energy"]["provisioned_power_W"].get<double>() == doctest::Approx(1.5 * (1400 + 400 + 340)).epsilon(1e-12));
  e.host_given = true;
  const EnergyLedger set(t, {&hw, &hw}, {DeviceActivity{}, DeviceActivity{}}, 4, e);
  Json sj;
  set.report_world(sj);
  CHECK(sj["energy"]["hosts_J"].get<double>() == doctest::Approx(200 * 4).epsilon(1e-12));
}

TEST_CASE("energy: a run's peak power lies between its average and its provisioned power, higher when its load comes in bursts") {
  // A closed loop keeps the replica busy all run: its peak is its average, within a window's noise.
  const Json steady = run_text(kServed);
  const Json& se = steady["serving"]["energy"];
  CHECK(se["peak_power_W"].get<double>() >= se["average_power_W"].get<double>());
  CHECK(se["peak_power_W"].get<double>() < 1.05 * se["average_power_W"].get<double>());
  CHECK(se["peak_power_W"].get<double>() <= se["provisioned_power_W"].get<double>());
  CHECK(steady["world"]["energy"]["peak_power_window_s"].get<double>() == 1);
  // Sparse arrivals leave it idle between requests: the busiest second draws well above the mean.
  const Json sparse = run_text(sluice::testing::llama3_8b_on_h200("t", 30, "{kind: poisson, rate: 0.2/s}"));
  const Json& pe = sparse["serving"]["energy"];
  CAPTURE(pe.dump());
  CHECK(pe["peak_power_W"].get<double>() > 1.3 * pe["average_power_W"].get<double>());
  CHECK(pe["peak_power_W"].get<double>() <= pe["provisioned_power_W"].get<double>());
  // The TPU v4 catalog's hosts (400 W / 150 W) are far below the GPU-server default.
  const HardwareSpec tpu = load_hardware("tpu-v4");
  CHECK(tpu.host_w == 400);
  CHECK(tpu.host_idle_w == 150);
}
