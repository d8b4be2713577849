#include "world/energy.h"

#include <algorithm>
#include <map>
#include <tuple>

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
  e.host_given = p.given("host_power") || p.given("host_idle_power");
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
  std::map<int, const HardwareSpec*> group_hw;        // server: its first device's hardware
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
    group_hw.emplace(t.node(devs[d]).group, &h);
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
        const auto gh = group_hw.find(node.group);
        const auto [full, idle] = host_power(gh != group_hw.end() ? gh->second : nullptr);
        hosts_j_ += (idle + (full - idle) * load) * span_s;
        shared_full_w_ += full;
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
    const auto [full, idle] = host_power(n > 0 ? hw_[0] : nullptr);
    hosts_ += static_cast<int>(x.count);
    hosts_j_ += static_cast<double>(x.count) * (idle + (full - idle) * load) * span_s;
    shared_full_w_ += static_cast<double>(x.count) * full;
  }
  shared_usd_ = net::capex(t).total_usd() - device_node_usd;
  build_windows(t, activity);
}

std::pair<double, double> EnergyLedger::host_power(const HardwareSpec* h) const {
  if (!econ_.host_given && h && h->host_w > 0) return {h->host_w, h->host_idle_w};
  return {econ_.host_w, econ_.host_idle_w};
}

// Power over time. Devices alike (the same hardware, activity and profile: a replica's, a
// job's) form one class, priced once per window; a server's hosts draw by its devices' mean busy
// fraction in each window, as over the whole run; the fabric's parts draw a constant power. Each
// window's energies sum to the run's (but for an autoscaled replica, on in a window it was busy).
void EnergyLedger::build_windows(const net::Topology& t, const std::vector<DeviceActivity>& activity) {
  const size_t n = hw_.size();
  const auto span_ns = static_cast<int64_t>(span_s_ * 1e9);
  for (const auto& a : activity)
    if (a.profile) window_ns_ = std::max(window_ns_, a.profile->width_ns());
  while (span_ns / window_ns_ >= static_cast<int64_t>(BusyProfile::kMaxWindows)) window_ns_ *= 2;
  const size_t K = span_ns > 0 ? static_cast<size_t>((span_ns + window_ns_ - 1) / window_ns_) : 1;
  window_s_.assign(K, 0);
  for (size_t k = 0; k < K; ++k)
    window_s_[k] = span_ns > 0 ? static_cast<double>(std::min(window_ns_, span_ns - static_cast<int64_t>(k) * window_ns_)) / 1e9 : 0.0;
  // Classes.
  std::map<std::tuple<const HardwareSpec*, const BusyProfile*, double, double, double>, int> ids;
  std::vector<std::vector<double>> class_busy;  // per class and window: busy fraction
  dev_class_.assign(n, 0);
  for (size_t d = 0; d < n; ++d) {
    const DeviceActivity& a = activity[d];
    const auto key = std::make_tuple(hw_[d], a.profile.get(), a.busy_s, a.compute_s, a.off_s);
    const auto [it, fresh] = ids.emplace(key, static_cast<int>(class_j_.size()));
    dev_class_[d] = it->second;
    if (!fresh) continue;
    const HardwareSpec& h = *hw_[d];
    const double on = std::max(0.0, span_s_ - a.off_s), busy = std::clamp(a.busy_s, 0.0, on), compute = std::clamp(a.compute_s, 0.0, busy);
    BusyProfile p;
    if (a.profile) {
      p = *a.profile;
      p.coarsen_to(window_ns_);
    }
    const double p_busy = p.total_busy_ns(), p_work = p.total_work();
    std::vector<double> j(K), frac(K);
    for (size_t k = 0; k < K; ++k) {
      const double len = window_s_[k];
      if (len <= 0) continue;
      double b = p_busy > 0 ? std::min(len, p.busy_ns(k) / p_busy * busy) : busy * len / span_s_;
      const double o = std::max(on * len / span_s_, b);
      double c = p_work > 0 ? compute * p.work_in(k) / p_work : busy > 0 ? compute * b / busy : 0.0;
      c = std::min(c, b);
      b = std::min(b, o);
      j[k] = h.tdp_w > 0 ? h.idle_w * o + (h.memory_bound_w - h.idle_w) * b + (h.tdp_w - h.memory_bound_w) * c : 0.0;
      frac[k] = b / len;
    }
    class_j_.push_back(std::move(j));
    class_busy.push_back(std::move(frac));
  }
  // The shared part: hosts by their servers' busy fractions, the fabric constant.
  shared_window_j_.assign(K, 0);
  const double fabric_w = econ_.switch_w * switches_ + econ_.nic_w * nics_ + econ_.optics_w * optics_ + econ_.ocs_w * ocs_;
  for (size_t k = 0; k < K; ++k) shared_window_j_[k] = fabric_w * window_s_[k];
  const auto& devs = t.devices();
  std::map<int, std::map<int, int>> server_classes;  // server: class -> its devices there
  std::map<int, const HardwareSpec*> server_hw;
  for (size_t d = 0; d < n; ++d) {
    const int g = t.node(devs[d]).group;
    ++server_classes[g][dev_class_[d]];
    server_hw.emplace(g, hw_[d]);
  }
  auto host_draw = [&](const std::map<int, int>* classes, const HardwareSpec* h, double count) {
    const auto [full, idle] = host_power(h);
    int devices = 0;
    if (classes)
      for (const auto& [c, m] : *classes) devices += m;
    for (size_t k = 0; k < K; ++k) {
      double load = 0;
      if (classes && devices > 0) {
        for (const auto& [c, m] : *classes) load += class_busy[static_cast<size_t>(c)][k] * m;
        load /= devices;
      }
      shared_window_j_[k] += count * (idle + (full - idle) * load) * window_s_[k];
    }
  };
  bool host_nodes = false;
  for (int v = 0; v < t.node_count(); ++v) {
    const auto& node = t.node(v);
    if (node.kind != net::NodeKind::Host) continue;
    host_nodes = true;
    const auto it = node.group >= 0 ? server_classes.find(node.group) : server_classes.end();
    const auto hw_it = server_hw.find(node.group);
    host_draw(it != server_classes.end() ? &it->second : nullptr, hw_it != server_hw.end() ? hw_it->second : nullptr, 1);
  }
  if (!host_nodes)
    for (const auto& x : t.extra_capex) {
      if (x.name != "hosts" || x.count <= 0) continue;
      std::map<int, int> all;
      for (size_t d = 0; d < n; ++d) ++all[dev_class_[d]];
      host_draw(&all, n > 0 ? hw_[0] : nullptr, static_cast<double>(x.count));
    }
}

double EnergyLedger::peak_of(const std::vector<double>& window_j) const {
  // A last window shorter than half of one is read with the one before it (a few busy
  // milliseconds at the very end are not a peak of the run).
  double peak = 0;
  const size_t K = window_j.size();
  for (size_t k = 0; k < K; ++k) {
    double j = window_j[k], len = window_s_[k];
    if (k + 2 == K && window_s_[K - 1] < 0.5 * static_cast<double>(window_ns_) / 1e9) {
      j += window_j[K - 1];
      len += window_s_[K - 1];
      ++k;
    }
    if (len > 0) peak = std::max(peak, j / len);
  }
  return peak;
}

double EnergyLedger::peak_power_w() const {
  std::vector<int> all(hw_.size());
  for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int>(d);
  return peak_power_w(all);
}

double EnergyLedger::peak_power_w(const std::vector<int>& devices) const {
  if (hw_.empty()) return 0;
  std::map<int, int> classes;
  for (int d : devices) ++classes[dev_class_[static_cast<size_t>(d)]];
  const double frac = static_cast<double>(devices.size()) / static_cast<double>(hw_.size());
  std::vector<double> j(window_s_.size());
  for (size_t k = 0; k < j.size(); ++k) {
    j[k] = frac * shared_window_j_[k];
    for (const auto& [c, m] : classes) j[k] += m * class_j_[static_cast<size_t>(c)][k];
  }
  return peak_of(j) * econ_.pue;
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
                     {"peak_power_W", peak_power_w()},
                     {"peak_power_window_s", peak_window_s()},
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
  return fmt::format("energy: {} at the facility (PUE {:.2f}; devices {:.0f}%), {:.2f} kW on average, {:.2f} kW at peak; cost {} over the "
                     "run (capex {} amortised, electricity {}, hosting {}); {:.3g} kg CO2e",
                     energy_text(fac), econ_.pue, it_j() > 0 ? 100 * devices_j_ / it_j() : 0.0, span_s_ > 0 ? fac / span_s_ / 1e3 : 0.0,
                     peak_power_w() / 1e3,
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
  return fmt::format("energy {} per {} ({:.2f} kW on average, {:.2f} kW at peak, with its share of hosts and fabric); cost {} for the run, "
                     "{} per million {}s",
                     energy_text(it * econ_.pue / n), unit, span_s_ > 0 ? it * econ_.pue / span_s_ / 1e3 : 0.0, peak_power_w(devices) / 1e3,
                     money_text(usd),
                     money_text(usd / n * 1e6), unit);
}

void EnergyLedger::report_workload(Json& m, const std::vector<int>& devices, const WorkUnits& units) const {
  if (!known() || devices.empty()) return;
  const Share s = share_of(devices);
  const double it = s.devices_j + s.shared_j, fac = it * econ_.pue;
  Json e{{"facility_J", fac}, {"devices_J", s.devices_j}, {"shared_J", s.shared_j},
         {"average_power_W", span_s_ > 0 ? fac / span_s_ : 0.0}, {"peak_power_W", peak_power_w(devices)},
         {"provisioned_power_W", s.it_w_full * econ_.pue}};
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
