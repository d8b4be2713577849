// A serving deployment as a workload of the world (`kind: serving` in `workloads:`), and the
// one-deployment short form, which builds a world around it.
#include <fmt/format.h>

#include "hardware/spec.h"
#include "network/generators.h"
#include "recorder/serving_report.h"
#include "registry/registry.h"
#include "world/placement.h"
#include "world/world_study.h"
#include "workloads/serving/serving_sim.h"

namespace sluice {
namespace serving {

void add_serving_keys(Schema& s, const Registry& reg, bool short_form);
void warn_about_run(const ServingSim& sim, int64_t asked_interval_ns, Recorder& rec);

namespace {

class ServingWorkload final : public Workload {
 public:
  ServingWorkload(std::string name, ServingConfig cfg, World& world, const std::vector<int>& devices, std::string desc,
                  const Params& outputs)
      : Workload(std::move(name)),
        desc_(std::move(desc)),
        requests_csv_(outputs.flag("requests_csv")),
        timeseries_(outputs.flag("timeseries")),
        sample_interval_ns_(outputs.time("sample_interval").count_ns()) {
    const int tp = cfg.tensor_parallel, pp = cfg.pipeline_parallel;
    // A tensor-parallel group may span servers (multi-node tensor parallelism, as vLLM runs
    // it over Ray): its all-reduces then cross the network every layer, as flows on the world's
    // fabric (one channel per NIC), which is exactly what contends with other traffic.
    ServingFabric fabric;
    // Each device's host link (PCIe to a host CPU), where the topology has one: swaps are flows on it.
    std::vector<std::pair<int, int>> host_of;
    for (int d : devices) {
      const int node = world.device_node(d);
      for (int l : world.topology().out_links(node))
        if (world.topology().node(world.topology().link(l).dst).kind == net::NodeKind::Host) {
          host_of.emplace_back(node, world.topology().link(l).dst);
          break;
        }
    }
    const bool swaps = cfg.preemption == PreemptionMode::Swap && host_of.size() == devices.size();
    if (cfg.prefill_replicas > 0) {
      // Disaggregated: each replica's devices, where its KV cache leaves from or lands.
      fabric.flows = &world.fabric();
      for (int r = 0; r < cfg.replicas; ++r) {
        auto& nodes = fabric.replica_nodes.emplace_back();
        for (int k = 0; k < tp * pp; ++k) nodes.push_back(world.device_node(devices[static_cast<size_t>(r * tp * pp + k)]));
      }
    }
    if (tp > 1 || pp > 1 || swaps) {
      fabric.flows = &world.fabric();
      if (swaps) {
        const size_t per = static_cast<size_t>(tp * pp);
        for (int r = 0; r < cfg.replicas; ++r)
          fabric.host_links.emplace_back(host_of.begin() + static_cast<long>(r * per), host_of.begin() + static_cast<long>((r + 1) * per));
      }
      size_t i = 0;
      for (int r = 0; r < cfg.replicas && (tp > 1 || pp > 1 || swaps); ++r) {
        auto& stages = fabric.stage_nodes.emplace_back();
        for (int s = 0; s < pp; ++s) {
          auto& nodes = stages.emplace_back();
          for (int k = 0; k < tp; ++k) nodes.push_back(world.device_node(devices[i++]));
        }
      }
    }
    if (tp > 1 && cfg.tp_algorithm == net::CollectiveKind::AllReduceNvls)
      for (const auto& stages : fabric.stage_nodes)
        for (const auto& nodes : stages) net::require_nvls(world.topology(), nodes, "deployment.tp_algorithm");
    devices_ = devices;
    per_replica_ = static_cast<size_t>(tp * pp);
    cfg.topology_name = world.topology().name();
    cfg.trace_pid = world.trace_pid();
    world.trace_pid();  // the requests' tracks
    world.trace().enable(outputs.flag("trace"));
    sim_ = std::make_unique<ServingSim>(std::move(cfg), world.engine(), &world.trace(), std::move(fabric));
  }
  void start(World& w) override {
    // Records stream to the recorder as requests end (requests.csv into the run's staging
    // directory when `sluice run` streams; in memory otherwise).
    const bool scoped = w.workloads().size() > 1;
    const std::string prefix = scoped ? name() + "." : "";
    records_ = std::make_unique<ServingRecords>(w.recorder, requests_csv_ ? prefix + "requests.csv" : "",
                                                sim_->config().model_tokens_per_llama);
    records_->set_slo(sim_->config().slo_ttft_ns, sim_->config().slo_tpot_ns);
    {
      std::vector<ServingClass> cls;
      for (const auto& c : sim_->config().workload->classes()) cls.push_back(ServingClass{c.name, c.priority, c.ttft_ns, c.tpot_ns});
      records_->set_classes(std::move(cls));
    }
    sim_->set_sink(records_.get());
    done_ = sim_->config().workload->total_requests() == 0;
    if (!w.faults().empty()) sim_->enable_faults();
    sim_->start(w.progress, [this, &w] {
      done_ = true;
      w.workload_done();
    });
  }
  bool holds_world() const override { return !done_; }
  // A replica is down while any of its devices is; it serves again after repair and reload.
  // Once every request has ended the deployment has nothing left to serve: failures after
  // it (the world going on for other workloads) are not its own.
  void on_devices_changed(World& w, const std::vector<int>& devices, bool up) override {
    if (done_) return;
    std::vector<int> touched;
    for (int d : devices) {
      const auto it = std::find(devices_.begin(), devices_.end(), d);
      if (it != devices_.end()) touched.push_back(static_cast<int>(static_cast<size_t>(it - devices_.begin()) / per_replica_));
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (int r : touched) {
      if (!up) {
        sim_->replica_down(r);
        continue;
      }
      bool all = true;
      for (size_t k = 0; k < per_replica_; ++k) all &= w.device_up(devices_[static_cast<size_t>(r) * per_replica_ + k]);
      if (all) sim_->replica_repaired(r);
    }
  }
  void finish(World&) override { sim_->finish(); }
  void report(Recorder& rec, bool scoped) const override {
    const std::string tag = scoped ? fmt::format("{}: ", name()) : "";
    Recorder notes;
    for (const auto& w : sim_->config().workload->warnings()) notes.warn(w);
    warn_about_run(*sim_, sample_interval_ns_, notes);
    for (const auto& w : notes.warnings()) rec.warn(tag + w);
    if (!records_) throw std::logic_error("internal: a serving workload reported before it started");
    report_serving(sim_->results(), *records_, desc_, rec, timeseries_, scoped ? name() : std::string());
  }

 private:
  std::string desc_;
  bool requests_csv_, timeseries_;
  int64_t sample_interval_ns_;
  bool done_ = false;
  std::vector<int> devices_;
  size_t per_replica_ = 1;
  std::unique_ptr<ServingSim> sim_;
  std::unique_ptr<ServingRecords> records_;
};

// Deployment problems (memory, GPU count, placement) are configuration errors: point at the deployment.
// A malformed cost table (its message names the file and line) is reported at cost_tables.
template <class F>
auto at_deployment(const Params& p, const std::string& tables_dir, F&& f) {
  try {
    return f();
  } catch (const ConfigError&) {
    throw;
  } catch (const std::runtime_error& e) {
    Origin at = p.section("deployment").origin();
    if (at.file.empty()) at = p.origin();
    const std::string where = p.path().empty() ? "deployment" : p.path() + ".deployment";
    const std::string what = e.what();
    if (!tables_dir.empty() && what.find(tables_dir) != std::string::npos)
      throw ConfigError(at, where + ".cost_tables", "", what,
                        "a directory of well-formed calibration tables (see results/calibration/h200-torch/README.md)");
    throw ConfigError(at, where, "", what, "a deployment that fits");
  }
}

int devices_needed(const Params& p) {
  const Params& d = p.section("deployment");
  return static_cast<int>(d.integer("replicas") * d.integer("tensor_parallel") * d.integer("pipeline_parallel"));
}

}  // namespace

std::unique_ptr<Study> make_serving_short_form(const StudyContext& ctx, const Registry& reg) {
  const Params& p = ctx.params;
  std::string desc;
  ServingConfig cfg = build_serving_config(p, reg, ctx.seed, &desc, nullptr);
  Cluster cl;
  cl.hardware = cfg.hardware;
  const Params& d = p.section("deployment");
  if (p.has("topology")) {
    for (const char* k : {"nodes", "gpus_per_node"})
      if (d.given(k)) d.fail(k, "is derived from the topology when one is named", "leave it out, or drop `topology`");
    cl.topology = std::make_shared<net::Topology>(net::load_topology(p.node("topology"), reg, "topology"));
  } else {
    cl.topology = implicit_cluster(cfg.hardware, cfg.nodes, cfg.gpus_per_node);
  }
  auto world = std::make_unique<World>(ctx.seed, std::move(cl));
  // The cluster's servers, for the checks that tensor parallelism stays inside one.
  std::map<int, int> per_group;
  for (int i = 0; i < world->device_count(); ++i) ++per_group[world->group_of(i)];
  cfg.nodes = static_cast<int>(per_group.size());
  cfg.gpus_per_node = 0;
  for (const auto& [_, n] : per_group) cfg.gpus_per_node = std::max(cfg.gpus_per_node, n);
  const std::string tables_dir = cfg.tables_dir;
  at_deployment(p, tables_dir, [&] {
    const int need = devices_needed(p);
    if (need > world->device_count())
      throw std::runtime_error(fmt::format("{} replicas × tp {} × pp {} = {} GPUs, but the cluster has {}", cfg.replicas,
                                           cfg.tensor_parallel, cfg.pipeline_parallel, need, world->device_count()));
    if (cfg.tensor_parallel > cfg.gpus_per_node)
      throw std::runtime_error(fmt::format("tensor_parallel {} exceeds the {} GPUs of a node: tensor parallelism stays inside a node",
                                           cfg.tensor_parallel, cfg.gpus_per_node));
    // Replicas on consecutive devices: a tensor-parallel group on consecutive devices of one server.
    std::vector<int> devices;
    for (int i = 0; i < need; ++i) devices.push_back(i);
    world->claim(devices, "serving");
    world->add(std::make_unique<ServingWorkload>("serving", std::move(cfg), *world, devices, desc, p.section("outputs")));
    return 0;
  });
  add_faults(*world, p, reg);
  return std::make_unique<WorldStudy>(std::move(world), p.time("max_sim_time"));
}

SLUICE_REGISTER(workload, serving_workload) {
  Schema s;
  s.add("name", ParamType::String, "the workload's name (metrics under workloads.<name>, files prefixed with it)");
  add_serving_keys(s, reg, false);
  s.section("place", placement_schema(reg), "the devices it runs on: replicas × tensor × pipeline parallel of them, in that order");
  reg.add("workload", "serving", "an LLM serving deployment: replicas behind a router, batching scheduler, KV cache, request load",
          std::move(s), WorkloadKindFactory([&reg](const Params& p, World& world, const WorkloadContext& ctx) -> std::unique_ptr<Workload> {
            std::string desc;
            ServingConfig cfg = build_serving_config(p, reg, ctx.seed, &desc, &world.hardware());
            const std::string tables_dir = cfg.tables_dir;
            return at_deployment(p, tables_dir, [&]() -> std::unique_ptr<Workload> {
              const auto devices = place_devices(world, p.section("place"), devices_needed(p), ctx.name, reg);
              return std::make_unique<ServingWorkload>(ctx.name, std::move(cfg), world, devices, desc, p.section("outputs"));
            });
          }));
}

}  // namespace serving
}  // namespace sluice
