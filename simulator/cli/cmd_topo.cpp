// `sluice topo NAME`: describe a catalog topology (counts, diameter, bisection, capex) and
// write it as a Graphviz DOT file.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <fmt/format.h>

#include "cli/commands.h"
#include "run/scenario.h"
#include "network/generators.h"
#include "recorder/recorder.h"

namespace sluice::cli {

// The first line of every DOT file sluice writes: only such a file is ever replaced.
static const std::string kDotMarker = "// written by sluice topo\n";

// Refuses a --dot path that holds anything but an earlier sluice DOT file (with --force).
static void check_dot_path(const std::string& path, bool force) {
  std::error_code ec;
  const auto st = std::filesystem::symlink_status(path, ec);
  if (ec || !std::filesystem::exists(st)) return;
  if (!std::filesystem::is_regular_file(st))
    throw OutputError(fmt::format("--dot '{}' exists and is not a regular file; sluice does not replace it", path));
  std::ifstream in(path, std::ios::binary);
  std::string first(kDotMarker.size(), '\0');
  in.read(first.data(), static_cast<std::streamsize>(first.size()));
  if (first != kDotMarker)
    throw OutputError(fmt::format("--dot '{}' exists and was not written by sluice; sluice never replaces it", path));
  if (!force) throw OutputError(fmt::format("--dot '{}' holds an earlier sluice DOT file; --force replaces it", path));
}

void add_topo(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("topo", "Describe a topology from topologies/: counts, diameter, bisection, capex; write a DOT file");
  struct Opts {
    std::string name, dot;
    std::vector<std::string> sets;
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("name", o->name, "catalog topology, e.g. tpu-v4-pod-ocs (see topologies/)")->required();
  cmd->add_option("--dot", o->dot, "write the topology as a Graphviz file (new, or an earlier sluice DOT file with --force)");
  cmd->add_flag("--force", o->force, "replace an earlier DOT file that sluice wrote at --dot (never anything else)");
  cmd->add_option("--set", o->sets, "override a generator parameter, e.g. --set servers=64")->take_all();
  cmd->callback([o, &ctx] {
    ctx.action = [o, &ctx]() -> int {
      using namespace sluice::net;
      Node spec;
      spec.kind = Node::Kind::Map;
      spec.origin = Origin{"(command line)", 0, 0};
      spec.set("catalog", Node::scalar_node(o->name, spec.origin), spec.origin);
      for (const auto& s : o->sets) apply_override(spec, s);
      if (!o->dot.empty()) check_dot_path(o->dot, o->force);  // before building anything
      const Topology t = load_topology(spec, ctx.registry, "topology");
      int devices = 0, switches = 0, hosts = 0, ocs = 0;
      for (int v = 0; v < t.node_count(); ++v) switch (t.node(v).kind) {
          case NodeKind::Device: ++devices; break;
          case NodeKind::Switch: ++switches; break;
          case NodeKind::Host: ++hosts; break;
          case NodeKind::Ocs: ++ocs; break;
        }
      std::map<std::string, std::pair<int, double>> by_label;
      int optical = 0;
      for (int e = 0; e < t.link_count(); e += 2) {
        auto& x = by_label[t.link(e).label.empty() ? "link" : t.link(e).label];
        ++x.first;
        x.second = t.link(e).bandwidth_Bps;
        optical += t.link(e).optical;
      }
      std::cout << fmt::format("topology {} ({})\n", t.name(), t.family);
      std::cout << fmt::format("  devices {}   switches {}   hosts {}   OCS {}\n", devices, switches, hosts, ocs);
      std::cout << fmt::format("  links {} full-duplex ({} optical):", t.link_count() / 2, optical);
      for (const auto& [l, x] : by_label) std::cout << fmt::format(" {} x{} @ {}/dir;", l, x.first, format_bandwidth(x.second));
      std::cout << "\n";
      if (t.torus)
        std::cout << fmt::format("  torus {}x{}x{}{}{}\n", t.torus->dims[0], t.torus->dims[1], t.torus->dims[2], t.torus->twisted ? " twisted" : "",
                                 t.torus->wrap ? "" : " (mesh)");
      std::cout << fmt::format("  diameter {} hops (BFS between devices{})\n", diameter_hops(t), t.torus ? ", from one device: a torus is vertex-transitive" : "");
      // The max-flow bisection grows faster than n^2 (4096 fat-tree servers: 150 s; 100000 would
      // take days): beyond 8192 devices it is not computed, and says so.
      constexpr int kMaxBisectionDevices = 8192;
      if (devices > kMaxBisectionDevices) {
        std::cout << fmt::format("  bisection not computed: {} devices, more than the {} a max-flow cut is run for\n", devices,
                                 kMaxBisectionDevices);
      } else {
        const Bisection b = bisection_bandwidth(t);
        std::cout << fmt::format("  bisection {} one way ({})\n", format_bandwidth(b.bandwidth_Bps), b.method);
      }
      const Capex c = capex(t);
      std::cout << fmt::format("  capex ${:.2f}M: devices ${:.2f}M, switches ${:.2f}M, hosts ${:.2f}M, OCS ${:.2f}M, electrical links ${:.2f}M, optics ${:.2f}M, other ${:.2f}M\n",
                               c.total_usd() / 1e6, c.devices_usd / 1e6, c.switches_usd / 1e6, c.hosts_usd / 1e6, c.ocs_usd / 1e6,
                               c.electrical_links_usd / 1e6, c.optical_links_usd / 1e6, c.extra_usd / 1e6);
      for (const auto& x : t.extra_capex)
        std::cout << fmt::format("    other: {} x {} at ${:.0f}\n", x.name, x.count, x.unit_usd);
      if (c.total_usd() > 0 && (c.ocs_usd + c.optical_links_usd) > 0)
        std::cout << fmt::format("  OCS + optics share of capex: {:.1f}%\n", 100 * (c.ocs_usd + c.optical_links_usd) / c.total_usd());
      if (o->dot.empty()) {
        std::cout << "  (--dot FILE writes it as a Graphviz file)\n";
        return 0;
      }
      write_file_atomically(o->dot, kDotMarker + to_dot(t));
      std::cout << fmt::format("  wrote {}\n", o->dot);
      return 0;
    };
  });
}

}  // namespace sluice::cli
