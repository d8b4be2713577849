// The world's fault layer: components by class (built from the topology), their state, and
// how a change reaches devices, links, the fabric and the workloads.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "world/world.h"

namespace sluice {

namespace {
constexpr const char* kClassNames[kFaultClasses] = {"chip", "host", "node", "rack", "link", "switch", "ocs"};
}

const char* fault_class_name(FaultClass c) { return kClassNames[static_cast<int>(c)]; }

std::optional<FaultClass> parse_fault_class(const std::string& name) {
  for (int i = 0; i < kFaultClasses; ++i)
    if (name == kClassNames[i]) return static_cast<FaultClass>(i);
  return std::nullopt;
}

std::string fault_class_list() {
  std::string s;
  for (int i = 0; i < kFaultClasses; ++i) s += (i ? ", " : "") + std::string(kClassNames[i]);
  return s;
}

const std::vector<FaultComponent>& World::components(FaultClass c) {
  if (!built_[static_cast<size_t>(c)]) build_components(c);
  return comps_[static_cast<size_t>(c)];
}

int World::find_component(FaultClass c, const std::string& name) {
  const auto& v = components(c);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].name == name) return static_cast<int>(i);
  return -1;
}

void World::build_components(FaultClass c) {
  const auto& t = topology();
  auto& out = comps_[static_cast<size_t>(c)];
  built_[static_cast<size_t>(c)] = true;
  // Devices by group (server or cube), in device order.
  std::map<int, std::vector<int>> by_group;
  for (int d = 0; d < device_count(); ++d) by_group[group_of(d)].push_back(d);
  auto add = [&](std::string name, std::vector<int> devs, std::vector<int> links, int node) {
    FaultComponent f;
    f.cls = c;
    f.name = std::move(name);
    f.devices = std::move(devs);
    f.links = std::move(links);
    f.node = node;
    out.push_back(std::move(f));
  };
  switch (c) {
    case FaultClass::Chip:
      for (int d = 0; d < device_count(); ++d) add(t.node(device_node(d)).name, {d}, {}, device_node(d));
      break;
    case FaultClass::Host: {
      int k = 0;
      for (const auto& [g, devs] : by_group) {
        if (g < 0) {  // devices in no server: each its own host
          for (int d : devs) add(fmt::format("host{}", k++), {d}, {}, -1);
          continue;
        }
        const size_t per = slices_.is_pod() ? static_cast<size_t>(std::max(1, cluster_.chips_per_host)) : devs.size();
        for (size_t i = 0; i < devs.size(); i += per)
          add(fmt::format("host{}", k++), std::vector<int>(devs.begin() + static_cast<long>(i), devs.begin() + static_cast<long>(std::min(devs.size(), i + per))), {}, -1);
      }
      break;
    }
    case FaultClass::Node:
      for (const auto& [g, devs] : by_group)
        if (g >= 0) add(fmt::format("{}{}", slices_.is_pod() ? "cube" : "node", g), devs, {}, -1);
      break;
    case FaultClass::Rack: {
      const int per = slices_.is_pod() ? 1 : std::max(1, cluster_.rack_nodes);
      std::map<int, std::vector<int>> racks;
      for (const auto& [g, devs] : by_group)
        if (g >= 0) racks[g / per].insert(racks[g / per].end(), devs.begin(), devs.end());
      for (auto& [r, devs] : racks) add(fmt::format("rack{}", r), std::move(devs), {}, -1);
      break;
    }
    case FaultClass::Link: {
      std::map<std::string, int> seen;
      for (int e = 0; e < t.link_count(); ++e) {
        const auto& l = t.link(e);
        if (l.reverse >= 0 && l.reverse < e) continue;  // one component per physical link
        std::string name = fmt::format("{}~{}", t.node(l.src).name, t.node(l.dst).name);
        if (const int n = ++seen[name]; n > 1) name += fmt::format("#{}", n);
        std::vector<int> links{e};
        if (l.reverse >= 0) links.push_back(l.reverse);
        add(std::move(name), {}, std::move(links), -1);
      }
      break;
    }
    case FaultClass::Switch:
    case FaultClass::Ocs: {
      const auto kind = c == FaultClass::Switch ? net::NodeKind::Switch : net::NodeKind::Ocs;
      for (int v = 0; v < t.node_count(); ++v) {
        if (t.node(v).kind != kind) continue;
        std::vector<int> links;
        if (kind == net::NodeKind::Switch) {
          for (int e : t.out_links(v)) {
            links.push_back(e);
            if (t.link(e).reverse >= 0) links.push_back(t.link(e).reverse);
          }
        }  // an OCS's circuits are found when it fails (slices program new ones)
        add(t.node(v).name, {}, std::move(links), v);
      }
      break;
    }
  }
}

void World::set_slowdown(const std::vector<int>& devices, double factor) {
  if (dev_slow_.empty()) {
    dev_slow_.assign(static_cast<size_t>(device_count()), 1.0);
    dev_slow_since_.assign(static_cast<size_t>(device_count()), 0);
  }
  const int64_t now = engine_.now().count_ns();
  for (int d : devices) {
    double& f = dev_slow_[static_cast<size_t>(d)];
    if (f == 1.0 && factor != 1.0) {
      ++slowdowns_;
      dev_slow_since_[static_cast<size_t>(d)] = now;
    } else if (f != 1.0 && factor == 1.0) {
      slow_device_s_ += static_cast<double>(now - dev_slow_since_[static_cast<size_t>(d)]) / 1e9;
    }
    f = factor;
  }
}

void World::release(const std::vector<int>& devices) {
  for (int d : devices) owner_[static_cast<size_t>(d)].clear();
}

// Links added since the fault state was last sized: up, held by no fault.
void World::grow_link_state() {
  const auto n = static_cast<size_t>(cluster_.topology->link_count());
  if (link_down_.size() >= n) return;
  link_down_.resize(n, 0);
  link_was_up_.resize(n, 1);
}

// Circuits a slice just programmed: one through an OCS that is down, or at a chip that is down,
// is down from the start, held by those faults as if it had existed when they struck (their
// repairs, which find an OCS's circuits and a chip's links anew, bring it up).
void World::circuits_added(int first, int end) {
  if (dev_down_.empty() && link_down_.empty()) return;  // no fault yet: nothing is down
  auto& t = *cluster_.topology;
  grow_link_state();
  std::vector<int> down_at(static_cast<size_t>(t.node_count()), 0);  // failed devices at each node
  for (size_t d = 0; d < dev_down_.size(); ++d)
    if (dev_down_[d] > 0) ++down_at[static_cast<size_t>(device_node(static_cast<int>(d)))];
  for (int e = first; e < end; ++e) {
    auto& l = t.mutable_link(e);
    int n = down_at[static_cast<size_t>(l.src)] + down_at[static_cast<size_t>(l.dst)];
    if (l.ocs >= 0 && built_[static_cast<size_t>(FaultClass::Ocs)])
      for (const FaultComponent& o : comps_[static_cast<size_t>(FaultClass::Ocs)]) n += o.node == l.ocs && o.down > 0;
    link_down_[static_cast<size_t>(e)] = n;
    if (n == 0) continue;
    link_was_up_[static_cast<size_t>(e)] = l.up;
    l.up = false;
    flows_.set_link_capacity(e, 0);
  }
}

void World::circuit_torn(int link) {
  if (static_cast<size_t>(link) < link_down_.size() && link_down_[static_cast<size_t>(link)] > 0) link_was_up_[static_cast<size_t>(link)] = 0;
}

std::vector<int> World::devices_failing(FaultClass c, int index) {
  if (!built_[static_cast<size_t>(c)]) build_components(c);
  const auto& comp = comps_[static_cast<size_t>(c)].at(static_cast<size_t>(index));
  std::vector<int> out;
  if (comp.down > 0) return out;
  for (int d : comp.devices)
    if (device_up(d)) out.push_back(d);
  return out;
}

void World::set_component(FaultClass c, int index, bool down, const std::string& cause) {
  auto& v = comps_[static_cast<size_t>(c)];
  if (!built_[static_cast<size_t>(c)]) build_components(c);
  auto& comp = v.at(static_cast<size_t>(index));
  const int64_t now = engine_.now().count_ns();
  auto& t = *cluster_.topology;
  if (dev_down_.empty()) dev_down_.assign(static_cast<size_t>(device_count()), 0);
  grow_link_state();
  if (down) {
    if (comp.down++ > 0) return;  // already down: another process holds it
    comp.down_since_ns = now;
    ++comp.failures;
    ++fstats_.failures;
  } else {
    if (comp.down == 0 || --comp.down > 0) return;
    comp.down_ns += now - comp.down_since_ns;
    ++fstats_.repairs;
  }
  const int step = down ? 1 : -1;
  std::vector<int> devs_changed, links_changed;
  auto touch_link = [&](int e) {
    int& n = link_down_[static_cast<size_t>(e)];
    const bool was = n > 0;
    n += step;
    if ((n > 0) != was) links_changed.push_back(e);
  };
  for (int d : comp.devices) {
    int& n = dev_down_[static_cast<size_t>(d)];
    const bool was = n > 0;
    n += step;
    if ((n > 0) == was) continue;
    devs_changed.push_back(d);
    // A dead chip forwards nothing: the links at it go too (torus routes transit chips).
    const int node = device_node(d);
    for (int e : t.out_links(node)) {
      touch_link(e);
      if (t.link(e).reverse >= 0) touch_link(t.link(e).reverse);
    }
  }
  // Each workload holding changed devices hears of them (and of the cause: fault_cause()).
  auto tell = [&](auto&& hear) {
    if (devs_changed.empty()) return;
    fault_cause_ = cause;
    for (const auto& w : workloads_) {
      std::vector<int> mine;
      for (int d : devs_changed)
        if (owner_[static_cast<size_t>(d)] == w->name()) mine.push_back(d);
      if (!mine.empty()) hear(*w, mine);
    }
    fault_cause_.clear();
  };
  // Failing: first, before the fabric reacts, so a job that stops lets go of its transfers
  // (they are not moved onto the links left).
  if (down) tell([&](Workload& w, const std::vector<int>& mine) { w.before_devices_fail(*this, mine); });
  std::vector<int> links = comp.links;
  if (c == FaultClass::Ocs)
    for (int e = 0; e < t.link_count(); ++e)
      if (t.link(e).ocs == comp.node) links.push_back(e);
  for (int e : links) touch_link(e);
  // The links that changed: failed ones carry nothing and routes avoid them.
  if (!links_changed.empty()) {
    std::sort(links_changed.begin(), links_changed.end());
    links_changed.erase(std::unique(links_changed.begin(), links_changed.end()), links_changed.end());
    std::vector<int> failed;
    for (int e : links_changed) {
      auto& l = t.mutable_link(e);
      if (down) {
        link_was_up_[static_cast<size_t>(e)] = l.up;
        l.up = false;
        flows_.set_link_capacity(e, 0);
        failed.push_back(e);
      } else if (link_was_up_[static_cast<size_t>(e)]) {
        l.up = true;
        // (A circuit still being programmed stays empty: its reconfiguration's end gives it its
        // bandwidth, now that it is up.)
        if (flows_.ready_ns(e) <= now) flows_.set_link_capacity(e, l.bandwidth_Bps);
      }
    }
    router_.invalidate();
    if (!failed.empty()) {
      const auto [moved, stalled] = flows_.reroute(failed, cluster_.reroute_penalty_ns);
      fstats_.flows_rerouted += moved;
      fstats_.flows_stalled += stalled;
    }
  }
  tell([&](Workload& w, const std::vector<int>& mine) { w.on_devices_changed(*this, mine, !down); });
  if (after_fault) after_fault(*this);
}

}  // namespace sluice
