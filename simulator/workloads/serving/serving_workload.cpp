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
void warn_near_capacity(const ServingSim& sim, double prompt_tokens, double cached_tokens, double output_tokens, Recorder& rec);

namespace {

// Replica r's tensor parallelism: the prefill pool's own, or the deployment's.
int replica_tp(const ServingConfig& c, int r) {
  return c.prefill_pool && r < c.prefill_replicas ? c.prefill_pool->tensor_parallel : c.tensor_parallel;
}

class ServingWorkload final : public Workload {
 public:
  ServingWorkload(std::string name, ServingConfig cfg, World& world, const std::vector<int>& devices, std::string desc,
                  const Params& outputs)
      : Workload(std::move(name)),
        desc_(std::move(desc)),
        requests_csv_(outputs.flag("requests_csv")),
        timeseries_(outputs.flag("timeseries")),
        sample_interval_ns_(outputs.time("sample_interval").count_ns()) {
    const int pp = cfg.pipeline_parallel;
    // Each replica's devices: [start_[r], start_[r + 1]) of `devices` (a prefill pool of its own
    // parallelism has replicas of another size).
    for (int r = 0; r <= cfg.replicas; ++r) start_.push_back(r == 0 ? 0 : start_.back() + static_cast<size_t>(replica_tp(cfg, r - 1) * pp));
    if (start_.back() != devices.size()) throw std::logic_error("internal: a serving placement of the wrong size");
    const bool any_tp = replica_tp(cfg, 0) > 1 || cfg.tensor_parallel > 1;
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
    // A remote KV pool lives in the servers' host memory: its fetches are flows from a host to devices.
    const bool remote = cfg.kv_remote_cache_bytes > 0;
    if (remote && host_of.size() != devices.size())
      throw std::runtime_error(fmt::format("deployment.kv_remote_cache: the remote pool lives in the servers' host memory, and the "
                                           "topology ({}) gives {} of these {} devices no host", world.topology().name(),
                                           devices.size() - host_of.size(), devices.size()));
    if (cfg.prefill_replicas > 0) {
      // Disaggregated: each replica's devices, where its KV cache leaves from or lands.
      fabric.flows = &world.fabric();
      for (int r = 0; r < cfg.replicas; ++r) {
        auto& nodes = fabric.replica_nodes.emplace_back();
        for (size_t k = start_[static_cast<size_t>(r)]; k < start_[static_cast<size_t>(r) + 1]; ++k) nodes.push_back(world.device_node(devices[k]));
      }
    }
    if (any_tp || pp > 1 || swaps || remote) {
      fabric.flows = &world.fabric();
      if (swaps || remote)
        for (int r = 0; r < cfg.replicas; ++r)
          fabric.host_links.emplace_back(host_of.begin() + static_cast<long>(start_[static_cast<size_t>(r)]),
                                         host_of.begin() + static_cast<long>(start_[static_cast<size_t>(r) + 1]));
      size_t i = 0;
      for (int r = 0; r < cfg.replicas; ++r) {
        auto& stages = fabric.stage_nodes.emplace_back();
        for (int s = 0; s < pp; ++s) {
          auto& nodes = stages.emplace_back();
          for (int k = 0; k < replica_tp(cfg, r); ++k) nodes.push_back(world.device_node(devices[i++]));
        }
      }
    }
    if (any_tp && cfg.tp_algorithm == net::CollectiveKind::AllReduceNvls)
      for (const auto& stages : fabric.stage_nodes)
        for (const auto& nodes : stages)
          if (nodes.size() > 1) net::require_nvls(world.topology(), nodes, "deployment.tp_algorithm");
    if (cfg.moe.hierarchical_alltoall)  // (the decode pool's replicas and the colocated ones: those that dispatch)
      for (const auto& stages : fabric.stage_nodes)
        for (const auto& nodes : stages)
          if (nodes.size() > 1) net::require_even_servers(world.topology(), nodes, "deployment.moe.alltoall_algorithm");
    devices_ = devices;
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
    if (w.can_fail()) sim_->enable_faults();
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
      if (it != devices_.end())
        touched.push_back(static_cast<int>(std::upper_bound(start_.begin(), start_.end(), static_cast<size_t>(it - devices_.begin())) - start_.begin()) - 1);
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (int r : touched) {
      if (!up) {
        sim_->replica_down(r);
        continue;
      }
      bool all = true;
      for (size_t k = start_[static_cast<size_t>(r)]; k < start_[static_cast<size_t>(r) + 1]; ++k) all &= w.device_up(devices_[k]);
      if (all) sim_->replica_repaired(r);
    }
  }
  void finish(World& w) override {
    sim_->finish();
    // What each device did, for the world's energy ledger: a replica's devices were busy while
    // its engines ran iterations (with pipeline parallelism, each virtual engine's busy time is
    // its batches' time on the first stage, so their sum is a stage's busy time, taken for every
    // stage) and compute-bound for the FLOPs of the tokens they computed (2 per active
    // non-embedding parameter, attention left out, as MFU counts them) at the sustained GEMM
    // ceiling; an autoscaled replica is off while it is not paid.
    const ServingConfig& c = sim_->config();
    const auto& stats = sim_->replica_stats();
    const int pp = c.pipeline_parallel;
    const double nonembed = c.model.active_parameters() - static_cast<double>(c.model.vocab) * c.model.hidden;
    const auto& on_s = sim_->scale_record().replica_on_s;
    for (int r = 0; r < c.replicas; ++r) {
      const bool own = c.prefill_pool && r < c.prefill_replicas;
      const HardwareSpec& hw = own ? c.prefill_pool->hardware : c.hardware;
      const double gpus = static_cast<double>(replica_tp(c, r)) * pp;
      const double ceiling = hw.effective_flops(c.model.weights) * hw.sustained_clock;
      DeviceActivity a;
      auto profile = std::make_shared<BusyProfile>();  // when it was busy and computed its tokens: peak power
      for (int v = 0; v < pp; ++v) {
        const ReplicaStats& st = stats[static_cast<size_t>(r * pp + v)];
        a.busy_s += static_cast<double>(st.busy_ns) / 1e9;
        if (ceiling > 0) a.compute_s += 2 * nonembed * static_cast<double>(st.tokens_processed) / gpus / ceiling;
        profile->merge(st.profile);
      }
      a.profile = std::move(profile);
      // Off: the part of the autoscaler's accounted span it was not paid (after that span, a
      // replica stays as it was: the pool's fewest are on, as a fixed pool's are).
      if (static_cast<size_t>(r) < on_s.size())
        a.off_s = std::max(0.0, sim_->scale_record().accounted_s - on_s[static_cast<size_t>(r)]);
      for (size_t k = start_[static_cast<size_t>(r)]; k < start_[static_cast<size_t>(r) + 1]; ++k) w.add_activity(devices_[k], a, &hw);
    }
    // A prefill pool of another device type has servers of its own: the ones of its devices
    // no replica holds are that type too (idle), not the cluster's.
    if (c.prefill_pool && c.prefill_pool->hardware.name != c.hardware.name && c.prefill_replicas > 0) {
      std::set<int> servers;
      for (size_t k = 0; k < start_[static_cast<size_t>(c.prefill_replicas)]; ++k) servers.insert(w.group_of(devices_[k]));
      for (int d = 0; d < w.device_count(); ++d)
        if (w.holder(d).empty() && servers.count(w.group_of(d))) w.add_activity(d, DeviceActivity{}, &c.prefill_pool->hardware);
    }
  }
  std::string metrics_key() const override { return "serving"; }
  WorkUnits work_done() const override {
    return {{"output_token", static_cast<double>(records_->out_tokens)},
            {"token", static_cast<double>(records_->out_tokens + records_->in_tokens)},
            {"request", static_cast<double>(records_->answered_count)}};
  }
  void report(Recorder& rec, bool scoped) const override {
    const std::string tag = scoped ? fmt::format("{}: ", name()) : "";
    Recorder notes;
    for (const auto& w : sim_->config().workload->warnings()) notes.warn(w);
    warn_about_run(*sim_, sample_interval_ns_, notes);
    if (!records_) throw std::logic_error("internal: a serving workload reported before it started");
    if (records_->answered_count > 0) {
      const auto n = static_cast<double>(records_->answered_count);
      warn_near_capacity(*sim_, static_cast<double>(records_->in_tokens) / n, static_cast<double>(records_->cached_in) / n,
                         static_cast<double>(records_->out_tokens) / n, notes);
    }
    for (const auto& w : notes.warnings()) rec.warn(tag + w);
    report_serving(sim_->results(), *records_, desc_, rec, timeseries_, scoped ? name() : std::string());
  }

 private:
  std::string desc_;
  bool requests_csv_, timeseries_;
  int64_t sample_interval_ns_;
  bool done_ = false;
  std::vector<int> devices_;
  std::vector<size_t> start_;  // replica r's devices: devices_[start_[r] .. start_[r + 1])
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

int devices_needed(const ServingConfig& c) {
  int n = 0;
  for (int r = 0; r < c.replicas; ++r) n += replica_tp(c, r) * c.pipeline_parallel;
  return n;
}

}  // namespace

std::unique_ptr<Study> make_serving_short_form(const StudyContext& ctx, const Registry& reg) {
  const Params& p = ctx.params;
  std::string desc;
  ServingConfig cfg = build_serving_config(p, reg, ctx.seed, &desc, nullptr);
  Cluster cl;
  cl.hardware = cfg.hardware;
  cl.economics = economics_from_params(p.section("economics"));
  const Params& d = p.section("deployment");
  // A prefill pool of another device type gets servers of its own, ahead of the deployment's.
  const PoolSpec* pool = cfg.prefill_pool ? &*cfg.prefill_pool : nullptr;
  const bool own_servers = pool && pool->hardware.name != cfg.hardware.name;
  int prefill_nodes = 0;
  if (p.has("topology")) {
    for (const char* k : {"nodes", "gpus_per_node"})
      if (d.given(k)) d.fail(k, "is derived from the topology when one is named", "leave it out, or drop `topology`");
    if (own_servers)
      d.section("prefill_pool").fail("hardware", fmt::format("a named topology's devices are all one kind (the deployment's, {})", cfg.hardware.name),
                                     "leave it out, or drop `topology` (the cluster is then built around both pools)");
    cl.topology = std::make_shared<net::Topology>(net::load_topology(p.node("topology"), reg, "topology"));
  } else if (own_servers) {
    const int need = cfg.prefill_replicas * pool->tensor_parallel;
    const int per_server = cfg.gpus_per_node / pool->tensor_parallel * pool->tensor_parallel;
    prefill_nodes = pool->nodes > 0 ? pool->nodes : per_server > 0 ? (need + per_server - 1) / per_server : 1;
    cl.topology = implicit_cluster({{&pool->hardware, prefill_nodes}, {&cfg.hardware, cfg.nodes}}, cfg.gpus_per_node);
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
    const int need = devices_needed(cfg);
    if (need > world->device_count())
      throw std::runtime_error(pool ? fmt::format("{} prefill replicas × tp {} + {} decode replicas × tp {} = {} GPUs, but the cluster has {}",
                                                  cfg.prefill_replicas, pool->tensor_parallel, cfg.replicas - cfg.prefill_replicas,
                                                  cfg.tensor_parallel, need, world->device_count())
                                    : fmt::format("{} replicas × tp {} × pp {} = {} GPUs, but the cluster has {}", cfg.replicas,
                                                  cfg.tensor_parallel, cfg.pipeline_parallel, need, world->device_count()));
    for (const int tp : {cfg.tensor_parallel, pool ? pool->tensor_parallel : 1})
      if (tp > cfg.gpus_per_node)
        throw std::runtime_error(fmt::format("{}tensor_parallel {} exceeds the {} GPUs of a node: tensor parallelism stays inside a node",
                                             tp == cfg.tensor_parallel ? "" : "prefill_pool.", tp, cfg.gpus_per_node));
    std::vector<int> devices;
    if (!pool) {
      // Replicas on consecutive devices: a tensor-parallel group on consecutive devices of one server.
      for (int i = 0; i < need; ++i) devices.push_back(i);
    } else {
      // Replicas of two sizes: each on devices of one server (the next server when the rest of
      // this one is too few), the prefill pool first, on its own servers when it has them.
      const int count = world->device_count();
      int at = 0;
      auto fits = [&](int from, int g) {
        for (int k = 0; k < g; ++k)
          if (from + k >= count || world->group_of(from + k) != world->group_of(from)) return false;
        return true;
      };
      for (int r = 0; r < cfg.replicas; ++r) {
        const int g = replica_tp(cfg, r) * cfg.pipeline_parallel;
        if (own_servers && r == cfg.prefill_replicas) at = std::max(at, prefill_nodes * cfg.gpus_per_node);
        while (at < count && !fits(at, g)) {
          const int server = world->group_of(at);
          while (at < count && world->group_of(at) == server) ++at;
        }
        if (own_servers && r < cfg.prefill_replicas && at + g > prefill_nodes * cfg.gpus_per_node)
          throw std::runtime_error(fmt::format("{} prefill replicas of tp {} do not fit on {} {} server{} of {} GPUs (prefill_pool.nodes)",
                                               cfg.prefill_replicas, pool->tensor_parallel, prefill_nodes, pool->hardware.name,
                                               prefill_nodes == 1 ? "" : "s", cfg.gpus_per_node));
        if (at + g > count)
          throw std::runtime_error(fmt::format("{} replicas do not fit on the cluster's {} servers of {} GPUs with each replica inside "
                                               "one server (more deployment.nodes, or prefill_pool.nodes)", cfg.replicas, cfg.nodes,
                                               cfg.gpus_per_node));
        for (int k = 0; k < g; ++k) devices.push_back(at + k);
        at += g;
      }
    }
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
              const auto devices = place_devices(world, p.section("place"), devices_needed(cfg), ctx.name, reg);
              return std::make_unique<ServingWorkload>(ctx.name, std::move(cfg), world, devices, desc, p.section("outputs"));
            });
          }));
}

}  // namespace serving
}  // namespace sluice
