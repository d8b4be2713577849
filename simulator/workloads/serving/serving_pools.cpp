// Disaggregation's prefill pool on devices, parallelism or a scheduler of its own
// (`deployment.prefill_pool`): its keys, and the checks that it can run before anything does.
//
// Splitwise (Patel et al., ISCA 2024) prefills on H100s and decodes on A100s, since prefill is
// bound by compute and decode by memory; DistServe (Zhong et al., OSDI 2024) chooses each
// phase's parallelism apart. The deployment's own keys (hardware, tensor_parallel, scheduler,
// cost_tables) describe the decode pool; what prefill_pool leaves out is the same as theirs.
#include <fmt/format.h>

#include "hardware/cost_band.h"
#include "hardware/cost_source.h"
#include "hardware/spec.h"
#include "workloads/serving/serving_sim.h"

namespace sluice::serving {

std::shared_ptr<Schema> prefill_pool_schema(const Registry& reg, bool short_form) {
  auto s = std::make_shared<Schema>();
  s->ref("hardware", {"models/hardware"}, hardware_schema(),
         "the prefill pool's accelerator (a catalog name or {catalog: NAME, ...}); in the short form its replicas get "
         "servers of their own, joined to the decode pool's by the cluster switch, so KV copies cross the NICs "
         "(default: the deployment's)")
      .optional();
  s->add("tensor_parallel", ParamType::Int, "the prefill pool's tensor parallelism (default: the deployment's)").optional().range(1, 1024);
  s->component("scheduler", &reg, "scheduler", "", "the prefill pool's batching scheduler (default: the deployment's)").optional();
  s->add("cost_tables", ParamType::String,
         "the prefill pool's cost source, as deployment.cost_tables (default: the deployment's when the hardware is the "
         "same, auto when it is not)")
      .optional();
  s->add("data_parallel_attention", ParamType::Bool,
         "each prefill device prefills its own prompts whole, an MoE model's routed experts expert-parallel over the "
         "same devices and reached by all-to-all (DeepSeek's prefill deployment; needs deployment.moe.expert_parallel with "
         "dispatch: alltoall and tensor_parallel >= 2 here); default false: tensor-parallel")
      .optional();
  if (short_form)
    s->add("nodes", ParamType::Int,
           "servers of the prefill pool's own hardware (default: as few as hold its replicas at gpus_per_node GPUs each); "
           "deployment.nodes then counts the decode pool's")
        .optional()
        .range(1, 1e6);
  return s;
}

void read_prefill_pool(ServingConfig& c, const Params& d, const Registry& reg, const HardwareSpec* cluster_hardware,
                       const std::string& deployment_scheduler) {
  const Params& pp = d.section("prefill_pool");
  std::string first;
  // (Any key given makes a pool of its own, as the deployment's own value would: data_parallel_attention:
  // false too, which says the prefill engines are tensor-parallel where the decode engines are not.)
  for (const char* k : {"hardware", "tensor_parallel", "scheduler", "cost_tables", "nodes", "data_parallel_attention"})
    if (first.empty() && pp.values.count(k) && pp.given(k)) first = k;
  if (first.empty()) return;
  if (c.prefill_replicas <= 0)
    pp.fail(first, "is the prefill pool's, and this deployment has none", "deployment.prefill_replicas > 0, or leave prefill_pool out");
  PoolSpec pool;
  pool.hardware = c.hardware;
  if (pp.given("hardware")) {
    if (cluster_hardware)
      pp.fail("hardware", fmt::format("a world's cluster has one kind of device (cluster.hardware: {})", cluster_hardware->name),
              "leave it out, or the serving short form, whose cluster is built around the deployment");
    pool.hardware = hardware_from_ref(pp, "hardware");
    if (!pool.hardware.supports(c.precision))
      pp.fail("hardware", fmt::format("{} has no {} tensor cores", pool.hardware.name, precision_name(c.precision)),
              fmt::format("hardware that runs deployment.precision {}", precision_name(c.precision)));
    if ((c.kv_host_cache_bytes > 0 || c.kv_ssd_cache_bytes > 0 || c.preemption == PreemptionMode::Swap) && pool.hardware.pcie_Bps <= 0)
      pp.fail("hardware", fmt::format("the deployment's KV tiers or swaps use the host link, and {} has no pcie_bandwidth", pool.hardware.name),
              "hardware with pcie_bandwidth > 0");
    if (c.kv_ssd_cache_bytes > 0 && pool.hardware.ssd_read_Bps <= 0)
      pp.fail("hardware", fmt::format("the deployment has an SSD tier, and {} has no ssd_read_bandwidth", pool.hardware.name),
              "hardware with ssd_read_bandwidth > 0");
  }
  pool.tensor_parallel = pp.given("tensor_parallel") ? static_cast<int>(pp.integer("tensor_parallel")) : c.tensor_parallel;
  const ModelSpec& m = c.model;
  pool.data_parallel_attention = pp.given("data_parallel_attention") && pp.flag("data_parallel_attention");
  if (pool.data_parallel_attention && !m.moe())
    pp.fail("data_parallel_attention", fmt::format("splits an MoE model's attention from its experts, and {} is dense", m.name),
            "an MoE model, or leave it out");
  // (Under data-parallel attention every device runs all the heads of its own prompts.)
  if (!pool.data_parallel_attention && (m.heads % pool.tensor_parallel != 0 || (m.kv_heads % pool.tensor_parallel != 0 && pool.tensor_parallel % m.kv_heads != 0)))
    pp.fail("tensor_parallel", fmt::format("{} has {} heads and {} KV heads; tensor parallelism must split them evenly", m.name, m.heads, m.kv_heads),
            "a divisor of the head count");
  if (m.moe()) {
    MoeOptions own = c.moe;
    own.data_parallel_attention = pool.data_parallel_attention;  // (deployment.moe's is the decode engines')
    if (const auto problem = moe_problem(m, own, pool.tensor_parallel))
      pp.fail(pool.data_parallel_attention && problem->key == "data_parallel_attention" ? "data_parallel_attention" : "tensor_parallel",
              problem->problem, problem->valid);
  }
  if (c.speculative.on())
    pp.fail(first, "speculative decoding's drafter runs on the deployment's devices and parallelism; a prefill pool of its own is not modelled with it",
            "leave prefill_pool out, or deployment.speculative");
  {
    // Unless given: the deployment's choice where it is one for any device (auto, none,
    // derived), auto where it names a directory of another device's tables.
    const bool same = pool.hardware.name == c.hardware.name;
    const std::string& dep = d.str("cost_tables");
    const bool any_device = dep == "auto" || dep == "none" || dep == "derived";
    const std::string value = pp.given("cost_tables") ? pp.str("cost_tables") : same || any_device ? dep : "auto";
    const CostSource src = pp.given("cost_tables") ? resolve_cost_source(value, pool.hardware, pp, "cost_tables")
                                                   : resolve_cost_source(value, pool.hardware, d, "cost_tables");
    pool.tables_dir = src.tables_dir;
    pool.tables_device = src.tables_device;
    pool.cost_time_scale = band_time_scale(src, pool.hardware);
    pool.cost_source = src.describe(pool.hardware);
  }
  pool.scheduler = pp.given("scheduler") ? pp.str("scheduler") : deployment_scheduler;
  if (pp.given("scheduler")) {
    auto params = std::make_shared<Params>(pp.section("scheduler"));
    const auto& factory = reg.factory<SchedulerFactory>(*reg.find("scheduler", pp.str("scheduler")));
    pool.make_scheduler = [params, factory] { return factory(*params); };
  } else {
    pool.make_scheduler = c.make_scheduler;
  }
  if (pp.values.count("nodes") && pp.given("nodes")) {
    if (pool.hardware.name == c.hardware.name)
      pp.fail("nodes", "counts servers of the prefill pool's own hardware, and it has none of its own", "leave it out, or prefill_pool.hardware");
    pool.nodes = static_cast<int>(pp.integer("nodes"));
  }
  c.prefill_pool = std::move(pool);
}

}  // namespace sluice::serving
