#include "world/energy.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace sluice {

namespace {
constexpr double kYear_s = 365.25 * 86400;
constexpr double kMonth_s = kYear_s / 12;
constexpr double kJ_per_kWh = 3.6e6;
}  // namespace

namespace {
struct EconomicsKeys {
  std::shared_ptr<Schema> schema = std::make_shared<Schema>();
  Binding<Economics> bind{*schema};
};

const EconomicsKeys& economics_keys() {
  static const EconomicsKeys k = [] {
  EconomicsKeys r;
  auto& b = r.bind;
  using E = Economics;
  b.real("pue", &E::pue, "power usage effectiveness: the facility's power over its IT equipment's (cooling, conversion)")
      .def("1.2")
      .range(1, 5);
  b.quantity("electricity_price", UnitKind::Money, &E::usd_per_kwh, "price of one kWh drawn by the facility").def("0.08").nonneg();
  b.real("lifetime_years", &E::lifetime_years, "years over which capex is amortised (the run pays its span's share)")
      .def("5")
      .range(0.1, 50);
  b.quantity("hosting_per_kw_month", UnitKind::Money, &E::hosting_usd_per_kw_month,
             "colocation rent per kW of provisioned IT power per month (space, power and cooling plant); 0 = owned")
      .def("160")
      .nonneg();
  b.real("grid_intensity", &E::grid_g_per_kwh, "grams of CO2-equivalent per kWh drawn").def("370").range(0, 2000);
  b.quantity("host_power", UnitKind::Power, &E::host_w,
             "a host node at full load with its share of the server: CPU, memory, fans, drives, NVSwitches, power-supply losses")
      .def("1500W")
      .nonneg();
  b.quantity("host_idle_power", UnitKind::Power, &E::host_idle_w, "the same with its server's devices idle").def("500W").nonneg();
  b.quantity("switch_power", UnitKind::Power, &E::switch_w, "a fabric switch (a server's NVSwitch is in host_power)").def("750W").nonneg();
  b.quantity("nic_power", UnitKind::Power, &E::nic_w, "a NIC").def("25W").nonneg();
  b.quantity("optics_power", UnitKind::Power, &E::optics_w, "an optical link's two transceivers").def("12W").nonneg();
  b.quantity("ocs_power", UnitKind::Power, &E::ocs_w, "an optical circuit switch").def("100W").nonneg();
  return r;
  }();
  return k;
}
}  // namespace

std::shared_ptr<Schema> economics_schema() { return economics_keys().schema; }

Economics economics_from_params(const Params& p) {
  Economics e = economics_keys().bind.make(p);
  if (e.host_idle_w > e.host_w) p.fail("host_idle_power", "exceeds host_power", fmt::format("at most {:.0f}W", e.host_w));
  return e;
}

double device_energy_j(const HardwareSpec& hw, double span_s, const DeviceActivity& a) {
  if (hw.tdp_w <= 0) return 0;
  const double on = std::max(0.0, span_s - a.off_s);
  const double busy = std::clamp(a.busy_s, 0.0, on);
  const double compute = std::clamp(a.compute_s, 0.0, busy);
  return hw.idle_w * on + (hw.memory_bound_w - hw.idle_w) * busy + (hw.tdp_w - hw.memory_bound_w) * compute;
}

EnergyLedger::EnergyLedger(const net::Topology& t, std::vector<const HardwareSpec*> hw, std::vector<DeviceActivity> activity,
                           double span_s, const Economics& econ)
    : hw_(std::move(hw)), span_s_(span_s), econ_(econ) {
  const auto& devs = t.devices();
  const size_t n = devs.size();
  dev_j_.assign(n, 0);
  dev_full_w_.assign(n, 0);
  dev_usd_.assign(n, 0);
  std::map<int, std::pair<double, int>> group_busy;  // server: busy seconds of its devices (while on), devices
  for (size_t d = 0; d < n; ++d) {
    const HardwareSpec& h = *hw_[d];
    const DeviceActivity& a = activity[d];
    if (h.tdp_w <= 0 && unknown_.empty()) unknown_ = h.name;
    dev_j_[d] = device_energy_j(h, span_s, a);
    dev_full_w_[d] = h.tdp_w;
    devices_j_ += dev_j_[d];
    // A device the topology prices is its price; else the catalog's (an implicit cluster's).
    const double node_usd = t.node(devs[d]).price_usd;
    dev_usd_[d] = node_usd > 0 ? node_usd : h.price_usd;
    auto& g = group_busy[t.node(devs[d]).group];
    g.first += span_s > 0 ? std::clamp(a.busy_s, 0.0, span_s) / span_s : 0.0;
    g.second += 1;
  }
  double device_node_usd = 0;
  for (int v = 0; v < t.node_count(); ++v) {
    const auto& node = t.node(v);
    switch (node.kind) {
      case net::NodeKind::Device: device_node_usd += node.price_usd; break;
      case net::NodeKind::Host: {
        ++hosts_;
        const auto it = group_busy.find(node.group);
        const double load = node.group >= 0 && it != group_busy.end() && it->second.second > 0 ? it->second.first / it->second.second : 0.0;
        hosts_j_ += (econ_.host_idle_w + (econ_.host_w - econ_.host_idle_w) * load) * span_s;
        shared_full_w_ += econ_.host_w;
        break;
      }
      case net::NodeKind::Switch:
        if (node.group < 0) {  // a fabric switch; a server's NVSwitch is in its hosts' power
          ++switches_;
          switches_j_ += econ_.switch_w * span_s;
          shared_full_w_ += econ_.switch_w;
        }
        break;
      case net::NodeKind::Ocs:
        ++ocs_;
        ocs_j_ += econ_.ocs_w * span_s;
        shared_full_w_ += econ_.ocs_w;
        break;
    }
  }
  for (int e = 0; e < t.link_count(); ++e) {
    const auto& l = t.link(e);
    if (l.reverse >= 0 && l.reverse < e) continue;  // one of each full-duplex pair
    if (l.label == "nic") {
      ++nics_;
      nics_j_ += econ_.nic_w * span_s;
      shared_full_w_ += econ_.nic_w;
    }
    // A slice's circuits through the OCS ride the pod's fibres, whose optics are counted once.
    if (l.optical && l.label != "ici-ocs-slice") {
      ++optics_;
      optics_j_ += econ_.optics_w * span_s;
      shared_full_w_ += econ_.optics_w;
    }
  }
  // Hosts a generator counts without nodes (a TPU pod's, one per chips_per_host chips) draw as
  // host nodes do, at the pod's mean busy fraction.
  const bool host_nodes = hosts_ > 0;
  for (const auto& x : t.extra_capex) {
    if (host_nodes || x.name != "hosts" || x.count <= 0) continue;
    double load = 0;
    for (const auto& [g, b] : group_busy) load += b.first;
    load = n > 0 ? load / static_cast<double>(n) : 0.0;
    hosts_ += static_cast<int>(x.count);
    hosts_j_ += static_cast<double>(x.count) * (econ_.host_idle_w + (econ_.host_w - econ_.host_idle_w) * load) * span_s;
    shared_full_w_ += static_cast<double>(x.count) * econ_.host_w;
  }
  shared_usd_ = net::capex(t).total_usd() - device_node_usd;
}

EnergyLedger::Share EnergyLedger::share_of(const std::vector<int>& devices) const {
  Share s;
  for (int d : devices) {
    s.devices_j += dev_j_[static_cast<size_t>(d)];
    s.it_w_full += dev_full_w_[static_cast<size_t>(d)];
    s.capex += dev_usd_[static_cast<size_t>(d)];
  }
  const double frac = dev_j_.empty() ? 0.0 : static_cast<double>(devices.size()) / static_cast<double>(dev_j_.size());
  s.shared_j = shared_j() * frac;
  s.it_w_full += shared_full_w_ * frac;
  s.capex += shared_usd_ * frac;
  return s;
}

// The one cost formula is cost_json's; this is its total.
double EnergyLedger::run_cost(double it_j, double it_w_full, double capex) const {
  return cost_json(it_j, it_w_full, capex)["usd"].get<double>();
}

namespace {
std::vector<int> every_device(size_t n) {
  std::vector<int> all(n);
  for (size_t d = 0; d < n; ++d) all[d] = static_cast<int>(d);
  return all;
}
}  // namespace

double EnergyLedger::cost_usd() const {
  const Share s = share_of(every_device(dev_j_.size()));
  return run_cost(s.devices_j + s.shared_j, s.it_w_full, s.capex);
}

Json EnergyLedger::cost_json(double it_j, double it_w_full, double capex) const {
  const double amortised = capex * span_s_ / (econ_.lifetime_years * kYear_s);
  const double power = it_j * econ_.pue / kJ_per_kWh * econ_.usd_per_kwh;
  const double hosting = it_w_full / 1e3 * econ_.hosting_usd_per_kw_month * span_s_ / kMonth_s;
  return Json{{"capex_usd", capex}, {"capex_amortised_usd", amortised}, {"electricity_usd", power}, {"hosting_usd", hosting},
              {"usd", amortised + power + hosting}};
}

void EnergyLedger::report_world(Json& w) const {
  if (!known()) return;  // the summary says why
  const double it = it_j();
  double full_w = shared_full_w_;
  for (double f : dev_full_w_) full_w += f;
  double capex = shared_usd_;
  for (double u : dev_usd_) capex += u;
  w["energy"] = Json{{"pue", econ_.pue},
                     {"facility_J", it * econ_.pue},
                     {"it_J", it},
                     {"devices_J", devices_j_},
                     {"hosts_J", hosts_j_},
                     {"switches_J", switches_j_},
                     {"nics_J", nics_j_},
                     {"optics_J", optics_j_ + ocs_j_},
                     {"average_power_W", span_s_ > 0 ? it * econ_.pue / span_s_ : 0.0},
                     {"provisioned_power_W", full_w * econ_.pue},
                     {"components", Json{{"hosts", hosts_}, {"fabric_switches", switches_}, {"nics", nics_}, {"optical_links", optics_}, {"ocs", ocs_}}}};
  w["cost"] = cost_json(it, full_w, capex);
  w["carbon"] = Json{{"kg", it * econ_.pue / kJ_per_kWh * econ_.grid_g_per_kwh / 1e3}, {"grid_g_per_kWh", econ_.grid_g_per_kwh}};
}

namespace {
std::string energy_text(double j) {
  if (j >= 3.6e9) return fmt::format("{:.2f} MWh", j / 3.6e9);
  if (j >= 3.6e6) return fmt::format("{:.2f} kWh", j / 3.6e6);
  if (j >= 3.6e3) return fmt::format("{:.2f} Wh", j / 3.6e3);
  return fmt::format("{:.3g} J", j);
}
std::string money_text(double usd) { return usd >= 100 ? fmt::format("${:.0f}", usd) : fmt::format("${:.3g}", usd); }
}  // namespace

std::string EnergyLedger::world_summary() const {
  if (!known()) return fmt::format("energy: not reported ({} has no power figures: tdp, idle_power, memory_bound_power)", unknown_);
  const double fac = facility_j();
  const Share s = share_of(every_device(dev_j_.size()));
  const Json c = cost_json(it_j(), s.it_w_full, s.capex);
  return fmt::format("energy: {} at the facility (PUE {:.2f}; devices {:.0f}%), {:.2f} kW on average; cost {} over the run (capex {} "
                     "amortised, electricity {}, hosting {}); {:.3g} kg CO2e",
                     energy_text(fac), econ_.pue, it_j() > 0 ? 100 * devices_j_ / it_j() : 0.0, span_s_ > 0 ? fac / span_s_ / 1e3 : 0.0,
                     money_text(c["usd"].get<double>()), money_text(c["capex_amortised_usd"].get<double>()),
                     money_text(c["electricity_usd"].get<double>()), money_text(c["hosting_usd"].get<double>()),
                     fac / kJ_per_kWh * econ_.grid_g_per_kwh / 1e3);
}

std::string EnergyLedger::workload_summary(const std::vector<int>& devices, const WorkUnits& units) const {
  if (!known() || devices.empty() || units.empty() || units.front().second <= 0) return "";
  const Share s = share_of(devices);
  const double it = s.devices_j + s.shared_j;
  const double usd = run_cost(it, s.it_w_full, s.capex), n = units.front().second;
  std::string unit = units.front().first;
  std::replace(unit.begin(), unit.end(), '_', ' ');
  return fmt::format("energy {} per {} ({:.2f} kW on average with its share of hosts and fabric); cost {} for the run, {} per million {}s",
                     energy_text(it * econ_.pue / n), unit, span_s_ > 0 ? it * econ_.pue / span_s_ / 1e3 : 0.0, money_text(usd),
                     money_text(usd / n * 1e6), unit);
}

void EnergyLedger::report_workload(Json& m, const std::vector<int>& devices, const WorkUnits& units) const {
  if (!known() || devices.empty()) return;
  const Share s = share_of(devices);
  const double it = s.devices_j + s.shared_j, fac = it * econ_.pue;
  Json e{{"facility_J", fac}, {"devices_J", s.devices_j}, {"shared_J", s.shared_j},
         {"average_power_W", span_s_ > 0 ? fac / span_s_ : 0.0}, {"provisioned_power_W", s.it_w_full * econ_.pue}};
  Json c = cost_json(it, s.it_w_full, s.capex);
  const double usd = c["usd"].get<double>();
  const double kg = fac / kJ_per_kWh * econ_.grid_g_per_kwh / 1e3;
  Json co{{"kg", kg}};
  for (const auto& [unit, n] : units) {
    if (n <= 0) continue;
    e["J_per_" + unit] = fac / n;
    c["usd_per_million_" + unit + "s"] = usd / n * 1e6;
    co["g_per_" + unit] = kg * 1e3 / n;
  }
  m["energy"] = e;
  m["cost"] = c;
  m["carbon"] = co;
}

}  // namespace sluice
