// Energy, power, cost and carbon of a world's run: one costing for every device and workload.
//
// Each workload tells the world what its devices did (World::add_activity: busy time, the
// compute-bound share of it, time powered off); the world prices the whole cluster once:
//   * a device (hardware/spec.h: tdp, idle_power, memory_bound_power) draws its idle power
//     whenever it is on, memory-bound power while a step runs, and up to its TDP over the
//     compute-bound share of that step (its FLOPs at the sustained GEMM ceiling):
//       E = idle x on + (memory_bound - idle) x busy + (tdp - memory_bound) x compute
//   * a host node (a server's CPU with its memory, fans, drives, NVSwitches and power-supply
//     losses) draws host_idle_power plus its share of (host_power - host_idle_power) by the mean
//     busy fraction of its server's devices; fabric switches, NICs, optical links and OCSs draw
//     a constant power each;
//   * the facility draws the IT power x PUE;
//   * money over the run: capex amortised over the lifetime, electricity at its price, and
//     hosting per kW of provisioned IT power per month; carbon from the grid's intensity.
// A workload's share: its own devices, plus the shared part (hosts, fabric, their capex) in
// proportion to its devices. Parameters, defaults and sources: docs/ENERGY.md.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/binding.h"
#include "config/json.h"
#include "engine/busy_profile.h"
#include "hardware/spec.h"
#include "network/topology.h"

namespace sluice {

// What one device did over a run, as its workload counts it.
struct DeviceActivity {
  double busy_s = 0;     // a step (kernels) in flight on it
  double compute_s = 0;  // of busy_s, the compute-bound share: its FLOPs at the sustained GEMM ceiling
  double off_s = 0;      // powered off (an autoscaled replica released)
  // When in the run it was busy (null: evenly over the run). Only the shape is read: its busy
  // windows are scaled to busy_s, its work (when it has any) to compute_s, else compute_s
  // follows the busy windows. Devices of one replica or job share one.
  std::shared_ptr<const BusyProfile> profile;
};

// The facility, its prices and the power of what is not a device (scenario key `economics`).
struct Economics {
  double pue = 1.2;
  double usd_per_kwh = 0.08;
  double lifetime_years = 5;
  double hosting_usd_per_kw_month = 160;
  double grid_g_per_kwh = 370;
  double host_w = 1500, host_idle_w = 500;  // per host node
  double switch_w = 750;                    // per fabric switch (not a server's NVSwitch: in host_power)
  double nic_w = 25;                        // per NIC link
  double optics_w = 12;                     // per optical link (both ends)
  double ocs_w = 100;                       // per optical circuit switch
  // host_power / host_idle_power set in the scenario: they override a device catalog's own.
  bool host_given = false;
};
// Its keys (the world study and the serving short form add them as the section `economics`),
// and the struct they fill.
std::shared_ptr<Schema> economics_schema();
Economics economics_from_params(const Params& p);

// One device's energy over `span_s` seconds (J); 0 when its power is unknown (tdp 0).
double device_energy_j(const HardwareSpec& hw, double span_s, const DeviceActivity& a);

// What a workload did, for its per-unit figures: {"output_token", n}, {"request", n}, ...
using WorkUnits = std::vector<std::pair<std::string, double>>;

// The cluster priced over one run.
class EnergyLedger {
 public:
  // `hw[d]` is device d's hardware; `activity[d]` what it did; `span_s` the run's length.
  EnergyLedger(const net::Topology& t, std::vector<const HardwareSpec*> hw, std::vector<DeviceActivity> activity, double span_s,
               const Economics& econ);
  // Every device's power is known (else energy figures are left out and `unknown()` names one).
  bool known() const { return unknown_.empty(); }
  const std::string& unknown() const { return unknown_; }
  // The world's figures: metrics.json's world.energy, world.cost, world.carbon.
  void report_world(Json& world) const;
  // A workload's share (its devices), per unit of its work, into its metrics block.
  void report_workload(Json& m, const std::vector<int>& devices, const WorkUnits& units) const;
  // One summary line each: the cluster's, and a workload's per its first unit of work.
  std::string world_summary() const;
  std::string workload_summary(const std::vector<int>& devices, const WorkUnits& units) const;
  // The world's totals (tests).
  double it_j() const { return devices_j_ + shared_j(); }
  double facility_j() const { return it_j() * econ_.pue; }
  double device_j(int d) const { return dev_j_[static_cast<size_t>(d)]; }
  double cost_usd() const;
  // Power over time: the run cut into windows of peak_window_s() (one second, or wider so that a
  // long run has at most BusyProfile::kMaxWindows), each device drawing by its profile. The
  // highest window's facility power, of the world and of a workload's share.
  double peak_power_w() const;
  double peak_power_w(const std::vector<int>& devices) const;
  double peak_window_s() const { return window_ns_ / 1e9; }

 private:
  struct Share {
    double devices_j = 0, shared_j = 0, it_w_full = 0, capex = 0;
  };
  Share share_of(const std::vector<int>& devices) const;
  double shared_j() const { return hosts_j_ + switches_j_ + nics_j_ + optics_j_ + ocs_j_; }
  double run_cost(double it_j, double it_w_full, double capex) const;
  Json cost_json(double it_j, double it_w_full, double capex) const;

  // Host power of a server whose devices are `h` (the scenario's, else the catalog's, else the default).
  std::pair<double, double> host_power(const HardwareSpec* h) const;
  void build_windows(const net::Topology& t, const std::vector<DeviceActivity>& activity);
  double peak_of(const std::vector<double>& window_j) const;  // highest mean power (W, at the IT level)

  std::vector<const HardwareSpec*> hw_;
  // Windows: their lengths (s), each device's class (devices alike in hardware and activity),
  // each class's energy per window (J), and the shared part's (hosts, fabric) per window.
  int64_t window_ns_ = BusyProfile::kFirstWidth_ns;
  std::vector<double> window_s_;
  std::vector<int> dev_class_;
  std::vector<std::vector<double>> class_j_;
  std::vector<double> shared_window_j_;
  std::vector<double> dev_j_, dev_full_w_, dev_usd_;
  double span_s_ = 0;
  Economics econ_;
  std::string unknown_;
  double devices_j_ = 0, hosts_j_ = 0, switches_j_ = 0, nics_j_ = 0, optics_j_ = 0, ocs_j_ = 0;
  double shared_full_w_ = 0;  // hosts, switches, NICs, optics, OCSs at full power
  double shared_usd_ = 0;     // capex of everything that is not a device
  int hosts_ = 0, switches_ = 0, nics_ = 0, optics_ = 0, ocs_ = 0;
};

}  // namespace sluice
