// The `pod-scheduling` study: one seeded stream of jobs on a TPU v4 pod, placed with OCS (any
// free healthy cubes) or on the static torus (contiguous blocks), first- or best-fit, under
// host failures (pod_stream.h). A job class is a real training job: a catalog model, its
// parallelism (tp x pp x dp = the slice's chips) and its size in iterations or tokens. When a
// job is placed, its iteration time on that placement comes from the training workload run
// for a few iterations in a world on the same pod topology (tpu-v4-pod-ocs or
// tpu-v4-pod-static with this pod's cubes), on a slice formed by the same code as `place:
// {slice: ...}` (SliceManager::form): with OCS the slice's own torus; static, the block on the
// shared torus, which wraps round only along a dimension the block spans entirely. The time is
// cached per (class, geometry): OCS and the slice shape; static and the block's extents per
// dimension (from which its wrap-around follows). Every geometry is measured on a canonical
// placement of it (OCS: the first cubes; static: the block at cube 0), so the cache does not
// depend on which jobs came first. Static blocks of the same extents elsewhere give the same
// time exactly (dimension-order routes are translation-invariant); OCS slices elsewhere give
// it within ~0.02% (equal-cost routes are picked by a hash of node ids). OCS slices are wired
// as regular tori (SliceManager::form without its twist: the jobs here are ring collectives,
// which a twist slows down), so the signature has no twist either.
// Abstract jobs of a duration (the old form) still work.
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/shapes.h"
#include "config/units.h"
#include "hardware/cost_model.h"
#include "network/generators.h"
#include "network/pod.h"
#include "recorder/pod_report.h"
#include "run/scenario.h"
#include "recorder/pod_results.h"
#include "workloads/cluster/pod_stream.h"
#include "workloads/training/training.h"
#include "world/world.h"

namespace sluice::cluster {

namespace {


struct JobClass {
  std::string name;
  net::CubeShape shape;
  double weight = 1;
  bool training = false;
  training::TrainingConfig cfg;  // training classes
  double iterations = 0;         // mean size
  training::TrainingMemory memory;
};

// The schema of a training job class in `jobs.shapes`, with the bindings of its keys and of
// its `parallel` section. Logic reads the rest: name (its default follows from the model and
// shape), shape (a list in chips, checked against the cube edge), model (a catalog
// reference), iterations and tokens (exactly one of them; tokens become iterations).
struct JobClassKeys {
  std::shared_ptr<Schema> schema;
  Binding<JobClass> top, parallel;
};

JobClassKeys job_class_keys() {
  using T = training::TrainingConfig;
  auto s = std::make_shared<Schema>();
  Binding<JobClass> keys(*s);
  Binding<T> cfg(*s);
  s->add("name", ParamType::String, "the class's name in the report (default: model and shape)").optional();
  s->add("shape", ParamType::List, "the slice in chips, e.g. [4, 4, 8]");
  keys.real("weight", &JobClass::weight, "relative share of arrivals").def("1").positive();
  s->ref("model", {"models/llm"}, model_schema(), "the model: a catalog name (gpt3-13b) or an inline shape");
  auto par = std::make_shared<Schema>();
  Binding<T> par_cfg(*par);
  par_cfg.integer("tp", &T::tp, "tensor parallel ranks per stage (inside one cube, a divisor of its edge)").def("1").range(1, 64);
  par_cfg.integer("pp", &T::pp, "pipeline stages").def("1").range(1, 512);
  par_cfg.integer("dp", &T::dp, "data-parallel replicas").def("1").range(1, 65536);
  par_cfg.choice<training::Schedule>("schedule", {{"1f1b", training::Schedule::OneFOneB}, {"gpipe", training::Schedule::GPipe}}, &T::schedule,
                                     "pipeline schedule")
      .def("1f1b");
  par_cfg.integer("micro_batches", &T::micro_batches, "micro-batches per replica per iteration").def("8").range(1, 65536);
  par_cfg.integer("micro_batch_size", &T::micro_batch_size, "sequences per micro-batch").def("1").range(1, 65536);
  Binding<JobClass> par_keys(*par);
  par_keys.nest(&JobClass::cfg, par_cfg);
  s->section("parallel", par, "tp x pp x dp, which must equal the slice's chips");
  cfg.integer("sequence", &T::sequence, "tokens per sequence").def("2048").range(1, 1 << 20);
  cfg.flag("recompute", &T::recompute, "full activation recomputation").def("false");
  keys.nest(&JobClass::cfg, cfg);
  s->add("iterations", ParamType::Real, "mean job size in iterations (or give tokens)").optional().range(1, 1e12);
  s->add("tokens", ParamType::Real, "mean job size in training tokens (or give iterations)").optional().range(1, 1e18);
  return {std::move(s), std::move(keys), std::move(par_keys)};
}

// What the study's own keys fill. Logic reads the rest: pod.cubes, probes, variants and
// jobs.shapes are lists, checked and converted item by item; the hardware is a catalog reference.
struct PodSettings {
  PodRunConfig run;  // pod.hosts_per_cube, backfill, ocs_reconfig, failures.*, jobs.horizon
  int cube_edge = 4;
  int measure_iterations = 2;
  double rate_per_s = 0;        // jobs.rate
  double duration_mean_ns = 0;  // jobs.duration_mean
  double duration_sigma = 1;    // jobs.duration_sigma
};

// The bindings of the top-level keys and of the `pod`, `jobs` and `failures` sections.
struct PodKeys {
  Binding<PodSettings> top, pod, jobs, failures;
  PodSettings make(const Params& p) const {
    PodSettings st = top.make(p);
    pod.fill(p.section("pod"), st);
    jobs.fill(p.section("jobs"), st);
    failures.fill(p.section("failures"), st);
    return st;
  }
};

// What a world run measured for one (class, geometry).
struct Measured {
  int64_t iteration_ns = 0;
  double tokens_per_iteration = 0, model_flops = 0, peak_flops = 0;
  int devices = 0;
};

class PodStudy final : public Study {
 public:
  PodStudy(const StudyContext& ctx, const PodKeys& keys) : seed_(ctx.seed), reg_(ctx.registry) {
    const Params& p = ctx.params;
    const PodSettings st = keys.make(p);
    cfg_ = st.run;
    edge_ = st.cube_edge;
    measure_iterations_ = st.measure_iterations;
    const Params& pod = p.section("pod");
    const Node cubes = list_param(pod, "cubes", "[4, 4, 4]");
    const auto g = shape_triple(cubes, "pod.cubes");
    if (g[0] * g[1] * g[2] > 64) pod.fail("cubes", "more than 64 cubes", "at most 64 cubes (a TPU v4 pod has 4×4×4)");
    cfg_.grid = g;
    cfg_.chips_per_cube = edge_ * edge_ * edge_;
    const Params& j = p.section("jobs");
    hardware_ = hardware_from_ref(p, "hardware");
    auto shape_of = [&](const Node& n, const std::string& path) {
      const auto s = shape_triple(n, path);
      for (size_t i = 0; i < 3; ++i)
        if (s[i] % edge_ != 0 || s[i] / edge_ > std::max({g[0], g[1], g[2]}))
          throw ConfigError(n.seq[i].origin, fmt::format("{}[{}]", path, i), n.seq[i].brief(),
                            fmt::format("a slice extent must be a multiple of the cube edge ({}) and fit the pod", edge_),
                            fmt::format("one of {}, {}, ... up to {}", edge_, 2 * edge_, edge_ * std::max({g[0], g[1], g[2]})));
      return net::CubeShape{s[0] / edge_, s[1] / edge_, s[2] / edge_};
    };
    const Node& shapes = j.node("shapes");
    const JobClassKeys class_keys = job_class_keys();
    double wsum = 0;
    for (size_t i = 0; i < shapes.seq.size(); ++i) {
      const Node& e = shapes.seq[i];
      const std::string path = fmt::format("jobs.shapes[{}]", i);
      if (!e.is_map() || !e.find("shape"))
        throw ConfigError(e.origin, path, e.brief(), "expected {shape: [x, y, z], weight: w} or a training job class with a model",
                          "e.g. {shape: [4, 4, 8], weight: 2, model: gpt3-13b, parallel: {tp: 4, pp: 4, dp: 8}, iterations: 5000}");
      JobClass jc;
      if (e.find("model")) {
        const Params cp = parse_params(e, *class_keys.schema, path);
        jc = training_class(cp, class_keys, path, shape_of(*e.find("shape"), path + ".shape"), shape_triple(*e.find("shape"), path + ".shape"));
      } else {
        // The old form: an abstract job of the stream's duration.
        for (size_t k = 0; k < e.map.size(); ++k)
          if (e.map[k].first != "shape" && e.map[k].first != "weight")
            throw ConfigError(e.key_origins[k], path + "." + e.map[k].first, "",
                              e.map[k].first == "iterations" || e.map[k].first == "tokens" || e.map[k].first == "parallel"
                                  ? "a training job class needs a model"
                                  : "unknown key",
                              "shape and weight (an abstract job of duration_mean), or a training job class: model, parallel, "
                              "iterations or tokens, ...");
        if (const Node* wn = e.find("weight")) {
          auto v = wn->is_scalar() ? parse_real(wn->scalar) : std::nullopt;
          if (!v || *v <= 0) throw ConfigError(wn->origin, path + ".weight", wn->brief(), "not a positive weight", "a number > 0");
          jc.weight = *v;
        }
        jc.shape = shape_of(*e.find("shape"), path + ".shape");
        jc.name = shape_text(shape_triple(*e.find("shape"), path + ".shape"));
      }
      for (const auto& other : classes_)
        if (other.name == jc.name) {
          if (const Node* nm = e.find("name"))
            throw ConfigError(nm->origin, path + ".name", nm->brief(), fmt::format("two job classes are named '{}'", jc.name),
                              "a name of its own for each class");
          jc.name = fmt::format("{} #{}", jc.name, i);
        }
      wsum += jc.weight;
      classes_.push_back(std::move(jc));
    }
    if (classes_.empty()) j.fail("shapes", "no slice shapes", "a list of {shape: [x, y, z], weight: w, ...}");
    cfg_.classes = static_cast<int>(classes_.size());
    const Node probes = list_param(p, "probes", "[]");
    for (size_t i = 0; i < probes.seq.size(); ++i) {
      cfg_.probes.push_back(shape_of(probes.seq[i], fmt::format("probes[{}]", i)));
      probe_names_.push_back(shape_text(shape_triple(probes.seq[i], "probes")));
    }
    // The job stream: Poisson arrivals, classes by weight, sizes lognormal (or exponential)
    // around the class's mean (training) or duration_mean (abstract jobs).
    RngStream rng(ctx.seed, "pod.jobs");
    const double rate = st.rate_per_s;
    const double mean_ns = st.duration_mean_ns;
    const double sigma = st.duration_sigma;
    const double horizon_s = static_cast<double>(cfg_.horizon_ns) / 1e9;
    // Every job is kept (and indexed by a 32-bit event argument): bound the stream before drawing it.
    constexpr double kMaxJobs = 1e6;
    if (rate * horizon_s > kMaxJobs)
      j.fail("rate", fmt::format("{:.3g} jobs/s over a horizon of {:.3g} s is {:.3g} jobs; at most {:.0f} are simulated", rate,
                                 horizon_s, rate * horizon_s, kMaxJobs),
             "a lower rate or a shorter horizon");
    for (double t = rng.exponential(1.0 / rate); t <= horizon_s; t += rng.exponential(1.0 / rate)) {
      double u = rng.uniform() * wsum;
      size_t k = 0;
      while (k + 1 < classes_.size() && u >= classes_[k].weight) u -= classes_[k++].weight;
      const double factor = sigma > 0 ? std::exp(sigma * rng.normal() - 0.5 * sigma * sigma) : rng.exponential(1.0);
      PodJob job;
      job.arrival_ns = std::min(cfg_.horizon_ns, static_cast<int64_t>(std::llround(t * 1e9)));
      job.shape = classes_[k].shape;
      job.job_class = static_cast<int>(k);
      if (classes_[k].training) job.iterations = std::max<int64_t>(1, std::llround(std::min(1e15, classes_[k].iterations * factor)));
      else job.duration_ns = std::llround(std::min(9e18, mean_ns * factor));
      jobs_.push_back(job);
    }
    const Node& vars = p.node("variants");
    for (size_t i = 0; i < vars.seq.size(); ++i) {
      const Node& v = vars.seq[i];
      const std::string path = fmt::format("variants[{}]", i);
      if (!v.is_map()) throw ConfigError(v.origin, path, v.brief(), "expected a mapping", "{ocs: true, placement: first-fit}");
      Variant var;
      for (size_t k = 0; k < v.map.size(); ++k) {
        const auto& [key, val] = v.map[k];
        if (key == "ocs") {
          if (val.scalar != "true" && val.scalar != "false") throw ConfigError(val.origin, path + ".ocs", val.brief(), "not a boolean", "true or false");
          var.ocs = val.scalar == "true";
        } else if (key == "placement") {
          if (val.scalar == "first-fit") var.placement = net::PlacementPolicy::FirstFit;
          else if (val.scalar == "best-fit") var.placement = net::PlacementPolicy::BestFit;
          else throw ConfigError(val.origin, path + ".placement", val.brief(), "unknown placement policy", "one of: first-fit, best-fit");
        } else {
          throw ConfigError(v.key_origins[k], path + "." + key, "", "unknown key", "one of: ocs, placement");
        }
      }
      variants_.push_back(var);
    }
    if (variants_.empty()) p.fail("variants", "no variants", "a list of {ocs: true|false, placement: first-fit|best-fit}");
    // The pod topologies the worlds are built on: this pod's cubes, OCS or static (built
    // once here, so that a problem shows before the run; each world gets a fresh one).
    bool any_training = false;
    for (const auto& c : classes_) any_training |= c.training;
    if (any_training)
      for (bool ocs : {true, false}) (void)pod_topology(ocs);
  }

  std::unique_ptr<net::Topology> pod_topology(bool ocs) const {
    const auto g = cfg_.grid;
    const std::string text = fmt::format("{{catalog: {}, cubes: [{}, {}, {}], cube_edge: {}}}", ocs ? "tpu-v4-pod-ocs" : "tpu-v4-pod-static",
                                         g[0], g[1], g[2], edge_);
    return std::make_unique<net::Topology>(net::load_topology(load_yaml_string(text, "(pod-scheduling)"), reg_, "pod"));
  }

  // Measures (once) the iteration time of class `k` on a slice of this geometry.
  int64_t iteration_ns(int k, uint64_t mask, bool ocs) {
    const JobClass& jc = classes_[static_cast<size_t>(k)];
    const net::PodAllocator alloc(cfg_.grid, ocs, net::PlacementPolicy::FirstFit);
    // The geometry: OCS wires the slice as its own torus of the requested shape (every
    // dimension wraps, no twist), whichever cubes it has; static, the block's extents per
    // dimension on the shared torus (it wraps along a dimension it spans entirely).
    const std::array<int, 3> dims = ocs ? std::array<int, 3>{jc.shape.x, jc.shape.y, jc.shape.z} : alloc.extents(mask);
    const Key key{k, ocs, dims};
    if (auto it = cache_.find(key); it != cache_.end()) return it->second.iteration_ns;
    const uint64_t canon = ocs ? (jc.shape.cubes() == 64 ? ~uint64_t{0} : (uint64_t{1} << jc.shape.cubes()) - 1) : alloc.block_at_origin(dims);
    const Measured m = measure(jc, canon, ocs);
    cache_.emplace(key, m);
    std::string wraps;
    for (int d = 0; d < 3; ++d)
      if (dims[static_cast<size_t>(d)] == cfg_.grid[static_cast<size_t>(d)]) wraps += "xyz"[d];
    const std::array<int, 3> chips{dims[0] * edge_, dims[1] * edge_, dims[2] * edge_};
    geometries_.push_back(PodGeometry{
        .job_class = jc.name,
        .geometry = ocs ? fmt::format("ocs {} torus", shape_text(chips))
                        : fmt::format("static {} {}", shape_text(chips), wraps.empty() ? std::string("no wrap") : "wraps " + wraps),
        .model = jc.cfg.model.name,
        .tp = jc.cfg.tp,
        .pp = jc.cfg.pp,
        .dp = jc.cfg.dp,
        .chips = m.devices,
        .iteration_s = static_cast<double>(m.iteration_ns) / 1e9,
        .tokens_per_iteration = m.tokens_per_iteration,
        .mfu = m.model_flops / (static_cast<double>(m.iteration_ns) / 1e9 * m.devices * m.peak_flops),
        .memory_bytes = jc.memory.total()});
    return m.iteration_ns;
  }

  void run(RunEnv& env) override {
    PodResults res;
    res.cubes = cfg_.grid;
    res.chips_per_cube = cfg_.chips_per_cube;
    res.hosts_per_cube = cfg_.hosts_per_cube;
    res.host_mtbf_s = static_cast<double>(cfg_.host_mtbf_ns) / 1e9;
    res.host_repair_s = static_cast<double>(cfg_.host_repair_ns) / 1e9;
    res.jobs = jobs_.size();
    res.probe_names = probe_names_;
    res.hardware = hardware_.name;
    res.measure_iterations = measure_iterations_;
    for (size_t i = 0; i < variants_.size(); ++i) {
      PodRunConfig c = cfg_;
      c.ocs = variants_[i].ocs;
      c.placement = variants_[i].placement;
      c.iteration_ns = [this, ocs = c.ocs](int k, uint64_t mask) { return iteration_ns(k, mask, ocs); };
      PodRunResult r = run_pod(c, jobs_, seed_);
      PodVariantResult v{.ocs = c.ocs,
                         .placement = net::placement_name(c.placement),
                         .utilization = r.utilization,
                         .healthy_fraction = r.healthy_fraction,
                         .fragmentation = r.fragmentation,
                         .stranded_fraction = r.stranded_fraction,
                         .queue_delay_s = seconds(r.queue_delay_ns),
                         .jobs = r.jobs,
                         .started = r.started,
                         .completed = r.completed,
                         .never_ran = r.never_ran,
                         .rejected = r.rejected,
                         .interruptions = r.interruptions,
                         .host_failures = r.host_failures,
                         .probe_availability = r.probe_availability,
                         .classes = {}};
      for (size_t k = 0; k < classes_.size(); ++k) v.classes.push_back(figures(classes_[k], r.classes[k]));
      res.variants.push_back(std::move(v));
      if (env.progress) env.progress(static_cast<double>(i + 1) / static_cast<double>(variants_.size()));
    }
    res.geometries = geometries_;
    report_pod_scheduling(res, env.recorder);
  }

 private:
  struct Variant {
    bool ocs = true;
    net::PlacementPolicy placement = net::PlacementPolicy::FirstFit;
  };
  struct Key {
    int job_class;
    bool ocs;
    std::array<int, 3> dims;  // cubes along x, y, z as placed
    auto operator<=>(const Key&) const = default;
  };

  static std::vector<double> seconds(const std::vector<int64_t>& ns) {
    std::vector<double> out;
    out.reserve(ns.size());
    for (int64_t v : ns) out.push_back(static_cast<double>(v) / 1e9);
    return out;
  }

  JobClass training_class(const Params& cp, const JobClassKeys& keys, const std::string& path, net::CubeShape shape, std::array<int, 3> chips) {
    JobClass jc = keys.top.make(cp);
    const Params& par = cp.section("parallel");
    keys.parallel.fill(par, jc);
    jc.training = true;
    jc.shape = shape;
    training::TrainingConfig& c = jc.cfg;
    c.model = model_from_params(cp.section("model"));
    c.hardware = hardware_;
    c.iterations = measure_iterations_;
    c.tables_dir = default_tables_dir(c.hardware);
    jc.name = cp.given("name") ? cp.str("name") : fmt::format("{} {}", c.model.name, shape_text(chips));
    const int n = chips[0] * chips[1] * chips[2];
    if (job_devices(c) != n)
      cp.fail("parallel", fmt::format("{}: tp {} x pp {} x dp {} = {} chips, but the slice {} has {}", jc.name, c.tp, c.pp, c.dp,
                                      job_devices(c), shape_text(chips), n),
              fmt::format("degrees whose product is {}", n));
    if (edge_ % c.tp != 0)
      par.fail("tp", fmt::format("{}: a tensor-parallel group of {} would span cubes (edge {})", jc.name, c.tp, edge_),
               fmt::format("a divisor of the cube edge {}", edge_));
    training::check_training_shape(c, cp, par);
    jc.memory = training::training_memory(c);
    if (jc.memory.total() > c.hardware.hbm_bytes)
      cp.fail("parallel",
              fmt::format("{}: {} with tp {} x pp {} x dp {} does not fit: each device of the fullest pipeline rank needs {} (weights {}, "
                          "gradients {}, optimizer {}, activations {}) but {} has {}",
                          jc.name, c.model.name, c.tp, c.pp, c.dp, format_bytes(jc.memory.total()), format_bytes(jc.memory.weights),
                          format_bytes(jc.memory.gradients), format_bytes(jc.memory.optimizer), format_bytes(jc.memory.activations),
                          c.hardware.name, format_bytes(c.hardware.hbm_bytes)),
              "more tensor or pipeline parallelism, recompute: true, or smaller micro-batches");
    const bool its = cp.given("iterations"), toks = cp.given("tokens");
    if (its == toks)
      throw ConfigError(cp.origin(), path, "", its ? "gives both iterations and tokens" : "a training job class needs its size",
                        "one of iterations (mean iterations per job) or tokens (mean training tokens per job)");
    const double tokens_per_iteration = static_cast<double>(c.micro_batch_size) * c.sequence * c.micro_batches * c.dp;
    jc.iterations = its ? cp.real("iterations") : std::max(1.0, std::ceil(cp.real("tokens") / tokens_per_iteration));
    return jc;
  }

  // A world on this pod's topology with one training job on the slice `mask`: its mean iteration time.
  Measured measure(const JobClass& jc, uint64_t mask, bool ocs) {
    Cluster cl;
    cl.topology = pod_topology(ocs);
    cl.hardware = hardware_;
    cl.chips_per_host = std::max(1, cfg_.chips_per_cube / cfg_.hosts_per_cube);
    World world(seed_, std::move(cl));
    std::vector<int> cubes;
    for (uint64_t r = mask; r; r &= r - 1) cubes.push_back(std::countr_zero(r));
    const auto devs = world.slices().form(cubes, {jc.shape.x, jc.shape.y, jc.shape.z}, /*twist=*/false, jc.name);
    world.claim(devs, jc.name);
    world.add(training::make_training_job(jc.name, jc.cfg, world, devs));
    world.run();
    const auto& r = training::training_results(*world.workloads().front());
    if (r.iteration_s.empty()) throw std::logic_error(fmt::format("pod-scheduling: the world run of '{}' finished no iteration", jc.name));
    double sum = 0;
    for (double s : r.iteration_s) sum += s;
    Measured m;
    m.iteration_ns = std::max<int64_t>(1, std::llround(sum / static_cast<double>(r.iteration_s.size()) * 1e9));
    m.tokens_per_iteration = r.tokens_per_iteration;
    m.model_flops = r.model_flops_per_iteration;
    m.peak_flops = r.peak_flops_per_device;
    m.devices = r.devices;
    return m;
  }

  PodClassFigures figures(const JobClass& jc, const PodClassResult& r) const {
    PodClassFigures f;
    f.name = jc.name;
    f.training = jc.training;
    f.jobs = r.jobs;
    f.started = r.started;
    f.completed = r.completed;
    f.interruptions = r.interruptions;
    f.iterations_done = r.iterations_done;
    f.lost_iterations = r.lost_iterations;
    f.lost_slice_h = static_cast<double>(r.lost_ns) / 3.6e12;
    f.queue_delay_s = seconds(r.queue_delay_ns);
    if (jc.training) {
      f.tokens_per_iteration = static_cast<double>(jc.cfg.micro_batch_size) * jc.cfg.sequence * jc.cfg.micro_batches * jc.cfg.dp;
      if (!r.iteration_ns.empty()) {
        double sum = 0;
        int64_t lo = r.iteration_ns.front(), hi = lo;
        for (int64_t t : r.iteration_ns) sum += static_cast<double>(t), lo = std::min(lo, t), hi = std::max(hi, t);
        f.iteration_s = sum / static_cast<double>(r.iteration_ns.size()) / 1e9;
        f.iteration_s_min = static_cast<double>(lo) / 1e9;
        f.iteration_s_max = static_cast<double>(hi) / 1e9;
        const double flops = f.tokens_per_iteration * training::model_flops_per_token(jc.cfg);
        f.mfu = flops / (f.iteration_s * jc.cfg.tp * jc.cfg.pp * jc.cfg.dp * hardware_.peak_bf16_flops);
      }
    }
    return f;
  }

  uint64_t seed_;
  const Registry& reg_;
  PodRunConfig cfg_;
  int edge_ = 4;
  int measure_iterations_ = 2;
  HardwareSpec hardware_;
  std::vector<JobClass> classes_;
  std::vector<PodJob> jobs_;
  std::vector<Variant> variants_;
  std::vector<std::string> probe_names_;
  std::map<Key, Measured> cache_;
  std::vector<PodGeometry> geometries_;
};

// The study's schema, with the bindings of its keys.
std::pair<Schema, PodKeys> pod_study_schema() {
  using S = PodSettings;
  using R = PodRunConfig;
  Schema s = common_study_schema();
  Binding<S> keys(s);
  Binding<R> run(s);
  auto pod = std::make_shared<Schema>();
  Binding<S> pod_keys(*pod);
  Binding<R> pod_run(*pod);
  pod->add("cubes", ParamType::List, "cubes along x, y, z, at most 64 cubes (default [4, 4, 4])").optional();
  pod_keys.integer("cube_edge", &S::cube_edge, "chips along a cube edge").def("4").range(1, 16);
  pod_run.integer("hosts_per_cube", &R::hosts_per_cube, "hosts per cube (TPU v4: 16 hosts of 4 chips)").def("16").range(1, 64);
  pod_keys.nest(&S::run, pod_run);
  s.section("pod", pod, "the pod; training jobs run on the tpu-v4-pod-ocs or tpu-v4-pod-static topology with these cubes");
  s.ref("hardware", {"models/hardware"}, hardware_schema(), "the chips (training jobs' compute and memory)").def("tpu-v4");
  auto jobs = std::make_shared<Schema>();
  Binding<S> job_keys(*jobs);
  Binding<R> job_run(*jobs);
  job_keys.quantity("rate", UnitKind::Rate, &S::rate_per_s, "job arrival rate (Poisson)").def("1/h").positive();
  job_run.time_ns("horizon", &R::horizon_ns, "simulated time (at most 1000 days: cube-time sums are integer nanoseconds)").def("720h").range(1, 8.64e16);
  jobs->add("shapes", ParamType::List,
            "job classes with weights: training jobs {shape: [4, 4, 8], weight: 2, model: gpt3-13b, parallel: {tp, pp, dp, "
            "micro_batches, micro_batch_size, schedule}, sequence, recompute, iterations: N | tokens: T, name}, tp x pp x dp = "
            "the slice's chips; or abstract jobs of duration_mean {shape: [4, 4, 8], weight: 2}");
  job_keys.time_ns("duration_mean", &S::duration_mean_ns, "mean duration of an abstract job (a class without a model)").def("8h").positive();
  job_keys.real("duration_sigma", &S::duration_sigma, "lognormal sigma of job sizes around their mean (0: exponential)").def("1").range(0, 5);
  job_keys
      .integer("measure_iterations", &S::measure_iterations,
               "iterations a world runs per job class and slice geometry to find its iteration time (the mean)")
      .def("2")
      .range(1, 100);
  job_keys.nest(&S::run, job_run);
  s.section("jobs", jobs, "the job stream (seeded: every variant sees the same jobs)");
  auto fail = std::make_shared<Schema>();
  Binding<R> fail_run(*fail);
  fail_run.time_ns("host_mtbf", &R::host_mtbf_ns, "mean time between failures per host (0s: no failures)").def("0s").nonneg();
  fail_run.time_ns("host_repair", &R::host_repair_ns, "mean repair time per host").def("24h").nonneg();
  fail_run.time_ns("restart_penalty", &R::restart_penalty_ns, "work redone after an interrupted slice restarts (time since checkpoint)")
      .def("30min")
      .nonneg();
  Binding<S> fail_keys(*fail);
  fail_keys.nest(&S::run, fail_run);
  s.section("failures", fail, "host failures: a failed host makes its cube unhealthy and interrupts the job on it");
  s.add("variants", ParamType::List, "fabrics and policies to compare: [{ocs: true, placement: first-fit}, ...]");
  run.flag("backfill", &R::backfill, "later jobs may start while the head of the queue waits").def("true");
  run.time_ns("ocs_reconfig", &R::reconfig_ns, "OCS reprogramming before a slice starts (OCS variants)").def("1s").nonneg();
  keys.nest(&S::run, run);
  s.add("probes", ParamType::List, "slice shapes (chips) whose availability on an empty pod is tracked (default none)").optional();
  return {std::move(s), PodKeys{std::move(keys), std::move(pod_keys), std::move(job_keys), std::move(fail_keys)}};
}

}  // namespace

}  // namespace sluice::cluster

namespace sluice {

SLUICE_REGISTER(study, pod_scheduling_study) {
  auto [schema, keys] = cluster::pod_study_schema();
  reg.add("study", "pod-scheduling",
          "a stream of training jobs on a TPU v4 pod: OCS any-cube vs static contiguous placement, first/best fit, host failures; "
          "each job's iteration time from a world run on its slice",
          std::move(schema),
          StudyFactory([keys = std::move(keys)](const StudyContext& c) -> std::unique_ptr<Study> { return std::make_unique<cluster::PodStudy>(c, keys); }));
}

}  // namespace sluice
