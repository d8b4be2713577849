// The `world` study: `cluster: {topology, hardware}` and `workloads: [{kind: serving, ...},
// {kind: training, ...}]`, all on one engine and one fabric.
#include "world/world_study.h"

#include <fmt/format.h>

#include "config/binding.h"
#include "config/names.h"
#include "network/generators.h"
#include "world/placement.h"

namespace sluice {

std::optional<FaultTargets> WorldStudy::fault_targets() {
  FaultTargets t;
  t.cluster = world_->topology().name();
  for (int c = 0; c < kFaultClasses; ++c) {
    const auto cls = static_cast<FaultClass>(c);
    std::vector<std::string> names;
    for (const auto& comp : world_->components(cls)) names.push_back(comp.name);
    t.classes.emplace_back(fault_class_name(cls), std::move(names));
  }
  return t;
}

void WorldStudy::run(RunEnv& env) {
  world_->progress = env.progress;
  world_->recorder = &env.recorder;
  world_->run(until_.count_ns() > 0 ? until_ : SimTime::max());
  world_->report(env.recorder);
}

void add_faults(World& world, const Params& p, const Registry& reg) {
  if (!p.has("faults")) return;
  int k = 0;
  for (const auto& item : p.items("faults")) {
    const auto& make = reg.factory<FaultProcessFactory>(*reg.find("fault", item->str("kind")));
    world.add_fault(make(*item, world, fmt::format("faults{}", k++)));
  }
}

std::shared_ptr<net::Topology> implicit_cluster(const HardwareSpec& hw, int nodes, int gpus_per_node) {
  return implicit_cluster({{&hw, nodes}}, gpus_per_node);
}

std::shared_ptr<net::Topology> implicit_cluster(const std::vector<std::pair<const HardwareSpec*, int>>& kinds, int gpus_per_node) {
  std::string name;
  int nodes = 0;
  for (const auto& [hw, n] : kinds) {
    name += fmt::format("{}{}x{} {}", name.empty() ? "" : " + ", n, gpus_per_node, hw->name);
    nodes += n;
  }
  auto t = std::make_shared<net::Topology>(name);
  t->family = "implicit";
  std::vector<std::vector<int>> servers;
  for (const auto& [hw, n] : kinds) {
    net::ServerSpec s;
    s.gpus = gpus_per_node;
    s.nvlink_Bps = hw->interconnect_Bps > 0 ? hw->interconnect_Bps : 1e9;
    s.nvlink_latency_ns = static_cast<int64_t>(hw->interconnect_latency_ns);
    s.pcie_Bps = hw->pcie_Bps > 0 ? hw->pcie_Bps : 16e9;
    s.nvls = hw->nvls;
    for (int k = 0; k < n; ++k) servers.push_back(net::add_server(*t, static_cast<int>(servers.size()), s));
  }
  if (nodes > 1) {
    const int sw = t->add_node(net::NodeInfo{"cluster-switch", net::NodeKind::Switch, 0, 0, {-1, -1, -1}, -1});
    for (const auto& devs : servers)
      for (int d : devs) t->add_link(d, sw, 50e9, 500, "nic");
  }
  t->check();
  return t;
}

namespace {

// The cluster's own keys (its topology and hardware are read by their loaders).
Binding<Cluster> cluster_keys(Schema& cluster) {
  Binding<Cluster> b(cluster);
  cluster.add("topology", ParamType::Any, "the fabric: a name in topologies/, {catalog: NAME, ...overrides} or {kind: GENERATOR, ...}");
  cluster.ref("hardware", {"models/hardware"}, hardware_schema(), "the devices' hardware: a catalog name or {catalog: NAME, ...}").def("h200");
  b.integer("rack_nodes", &Cluster::rack_nodes, "servers per rack, for rack faults (a TPU pod's rack is its cube)").def("4").range(1, 4096);
  b.integer("chips_per_host", &Cluster::chips_per_host, "TPU pods: chips per host, for host faults (a GPU server is one host)")
      .def("4")
      .range(1, 64);
  b.time_ns("reroute_penalty", &Cluster::reroute_penalty_ns, "what a flow pays to move off a failed link onto another route").def("1ms").nonneg();
  b.choice<bool>("routing", {{"ecmp", false}, {"adaptive", true}}, &Cluster::adaptive_routing,
                 "how flows use equal-cost paths: ecmp (each flow on one path, chosen by a hash of its ends: luck decides "
                 "collisions) or adaptive (each flow split evenly over them, as InfiniBand adaptive routing and Spectrum-X "
                 "packet spraying do)")
      .def("ecmp");
  b.integer("hash_seed", &Cluster::hash_seed, "ECMP's hash seed (0: the built-in one); sweep it to see how much of a result is luck")
      .def("0")
      .range(0, 9e15);
  b.time_ns("flow_quantum", &Cluster::flow_quantum_ns,
            "every flow's end rounded up to a multiple of this (at most 1ms), so flows ending within it share one rate "
            "recomputation (0ns: exact). A knob trading accuracy for speed where a step starts thousands of flows at once "
            "(a 144-way all-to-all: 20,592 flows): each flow's end moves by less than it, and the flow keeps its share of "
            "its links until then, so flows waiting on one another can be late by several; training's steady-state "
            "fast-forward is off with it")
      .def("0ns")
      .range(0, 1e6);  // at most 1 ms: it is paid per flow
  b.integer("storage_servers", &Cluster::storage_servers,
            "storage servers on the fabric, each linked to a switch of its top tier (training writes checkpoints to them as "
            "flows with recovery.checkpoint_to: storage); 0: none")
      .def("0")
      .range(0, 4096);
  b.quantity("storage_bandwidth", UnitKind::Bandwidth, &Cluster::storage_Bps,
             "a storage server's link to the fabric per direction (what it can write at)")
      .def("50GB/s")
      .positive();
  b.quantity("storage_price", UnitKind::Money, &Cluster::storage_usd, "capex per storage server").def("0").nonneg();
  b.time_ns("ocs_reconfigure", &Cluster::ocs_reconfigure_ns,
            "TPU pods with OCS: a slice re-formed during the run has its circuits after this (an estimate: MEMS mirrors settle "
            "in milliseconds)")
      .def("10ms")
      .nonneg();
  return b;
}

// The world study's schema, with the binding of its cluster keys.
std::pair<Schema, Binding<Cluster>> world_schema(const Registry& reg) {
  Schema s = common_study_schema();
  auto cluster = std::make_shared<Schema>();
  Binding<Cluster> keys = cluster_keys(*cluster);
  s.section("cluster", cluster, "the cluster every workload is placed on");
  s.component_list("workloads", &reg, "workload", "what runs on the cluster: serving deployments, training jobs (see `sluice list workload`)");
  s.component_list("faults", &reg, "fault", "fault processes: random failures by class, or a trace (see `sluice list fault`)").optional();
  s.quantity("max_sim_time", UnitKind::Time, "stop simulating at this time (0s: when every workload is done)").def("0s").nonneg();
  s.section("economics", economics_schema(), "the facility, its prices and the power of hosts and fabric: energy, cost and carbon (docs/ENERGY.md)");
  return {std::move(s), std::move(keys)};
}

}  // namespace

SLUICE_REGISTER(study, world_study) {
  auto [schema, cluster] = world_schema(reg);
  const Binding<Cluster> keys = cluster;
  reg.add("study", "world",
          "a cluster and the workloads placed on it, on one engine: every transfer is a flow on the shared fabric",
          schema, StudyFactory([&reg, keys](const StudyContext& ctx) -> std::unique_ptr<Study> {
            const Params& p = ctx.params;
            const Params& c = p.section("cluster");
            Cluster cl = keys.make(c);
            cl.economics = economics_from_params(p.section("economics"));
            cl.topology = std::make_shared<net::Topology>(net::load_topology(c.node("topology"), reg, "cluster.topology"));
            try {
              cl.storage_nodes = net::add_storage(*cl.topology, cl.storage_servers, cl.storage_Bps, 500, cl.storage_usd);
            } catch (const net::TopologyError& e) {
              c.fail("storage_servers", e.what(), "0, or a switched fabric with free ports on its top tier (oversubscribed, a larger switch_radix, a 3-tier Clos with room)");
            }
            cl.hardware = hardware_from_ref(c, "hardware");
            auto world = std::make_unique<World>(ctx.seed, std::move(cl));
            const auto& items = p.items("workloads");
            if (items.empty()) p.fail("workloads", "no workloads", "a list of {kind: serving|training, name: ..., ...}");
            std::vector<std::string> names;
            for (const auto& item : items) {
              const std::string kind = item->str("kind");
              const std::string name = item->str("name");
              // It names files (<name>.requests.csv) and metric keys (workloads.<name>.…).
              if (const std::string why = name_problem(name, NameUse::MetricKey); !why.empty())
                item->fail("name", why + " (a workload's name names its files and its metrics)", name_rule(NameUse::MetricKey));
              if (std::find(names.begin(), names.end(), name) != names.end())
                item->fail("name", "two workloads have this name", "a name of its own for each workload");
              names.push_back(name);
              const auto& make = reg.factory<WorkloadKindFactory>(*reg.find("workload", kind));
              world->add(make(*item, *world, WorkloadContext{reg, ctx.seed, name}));
            }
            add_faults(*world, p, reg);
            return std::make_unique<WorldStudy>(std::move(world), p.time("max_sim_time"));
          }));
}

}  // namespace sluice
