// `sluice sweep SCENARIO [--grid key=v1,v2] [--zip key=v1,v2] [-j N]`: run a grid or zip of
// points (with replications) over the machine's cores, and under `mpirun -np N` over ranks;
// rank 0 writes the combined sweep.csv / sweep.json and prints the best point per objective.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <fmt/format.h>


#include "cli/commands.h"
#include "cli/mpi_session.h"
#include "config/error.h"
#include "engine/run_control.h"
#include "recorder/output_dir.h"
#include "run/scenario.h"
#include "run/sweep.h"

namespace sluice::cli {

// How many ranks the launcher started (1 without mpirun), from the environment it sets.
int launcher_ranks() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

// This process's share of the cores: all of them, split among the ranks on this host.
int default_threads() {
  int local = 1;
  if (const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local = std::max(1, std::atoi(s));
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw / local);
}

namespace {

// Results of one rank as text (index, resumed, metrics), or the error it hit.
std::string encode(const std::vector<PointResult>& rs, const std::string& error, int error_code) {
  Json a = Json::array();
  for (const auto& r : rs) a.push_back(Json{{"index", r.index}, {"resumed", r.resumed}, {"metrics", r.metrics}});
  return Json{{"error", error}, {"code", error_code}, {"results", a}}.dump();
}

struct Opts {
  std::string file, out;
  std::vector<std::string> sets, grid, zip, metrics, objectives, where;
  int replications = 0, threads = 0;
  bool quiet = false;
};

int run_sweep_command(const Opts& o, const Registry& reg) {
  const int launched = launcher_ranks();
#ifdef SLUICE_HAVE_MPI
  MpiSession mpi(launched);
  const int rank = mpi.rank, ranks = mpi.ranks;
#else
  const int rank = 0, ranks = 1;
  if (launched > 1) {
    std::cerr << fmt::format(
        "sluice: started as one of {} ranks, but this sluice was built without MPI; every rank would run the whole sweep. "
        "Install libopenmpi-dev (tools/setup.sh) and rebuild, or run without mpirun.\n",
        launched);
    return 2;
  }
#endif
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  int error_code = 0;
  std::vector<PointResult> mine;
  SweepSpec spec;
  std::vector<SweepPoint> points;
  std::string name, out;
  try {
    SweepFile f = load_sweep_file(o.file);
    spec = f.spec.value_or(SweepSpec{});
    std::vector<SweepAxis> g, z;
    for (const auto& a : o.grid) g.push_back(parse_axis(a, "--grid"));
    for (const auto& a : o.zip) z.push_back(parse_axis(a, "--zip"));
    merge_axes(spec.grid, g);
    if (!z.empty()) spec.zip = z;  // a command-line zip replaces the block's, whose lengths it need not match
    for (const auto& a : spec.zip)
      if (a.values.size() != spec.zip.front().values.size())
        throw ConfigError(a.origin, a.key, fmt::format("{} values", a.values.size()), "zipped axes go in lockstep", "lists of equal length");
    if (o.replications > 0) spec.replications = o.replications;
    if (!o.metrics.empty()) spec.metrics = o.metrics;
    if (!o.objectives.empty()) spec.objectives = o.objectives;
    if (!o.where.empty()) spec.where = o.where;
    check_sweep_spec_form(spec);  // a malformed --where or --objective fails now, not after every point ran
    if (spec.grid.empty() && spec.zip.empty() && spec.replications == 1)
      throw ConfigError(Origin{o.file, 0, 0}, "sweep", "", "nothing to sweep",
                        "a `sweep:` block in the scenario, --grid key=v1,v2, --zip key=v1,v2 or --replications N");
    Scenario base = load_scenario_tree(f.scenario, o.file, o.sets, reg);
    name = base.name;
    out = o.out.empty() ? fmt::format("results/{}/sweep", name) : o.out;
    points = expand_sweep(spec, base.seed, o.sets);
    SweepOptions opt;
    opt.out_dir = out;
    opt.threads = o.threads > 0 ? o.threads : default_threads();
    opt.rank = rank;
    opt.ranks = ranks;
    const bool tty = !o.quiet && ::isatty(STDERR_FILENO) && rank == 0;
    if (tty)
      opt.progress = [](size_t done, size_t total) {
        std::fprintf(stderr, "\r  %zu/%zu points ", done, total);
        std::fflush(stderr);
      };
    mine = run_sweep_points(f, o.file, points, reg, opt);
    if (tty) std::fprintf(stderr, "\r%40s\r", "");
  } catch (const ConfigError& e) {
    error = e.what();
    error_code = 2;
  } catch (const OutputError& e) {  // an output directory refused: bad input, as for `run --out`
    error = e.what();
    error_code = 2;
  } catch (const RunStopped& e) {  // a signal or a budget: the README's exit codes
    error = std::string(e.what()) + "; the points finished so far are kept and resume";
    error_code = e.why() == RunStopped::Why::Interrupted ? 128 + e.signal_number() : 3;
  } catch (const std::exception& e) {
    error = e.what();
    error_code = 1;
  }

  // Rank 0 gathers every rank's results (or errors) and writes the combined table.
  std::vector<std::string> parts{encode(mine, error, error_code)};
#ifdef SLUICE_HAVE_MPI
  if (mpi.on) {
    const std::string& s = parts.front();
    int len = static_cast<int>(s.size());
    std::vector<int> lens(static_cast<size_t>(ranks)), offs(static_cast<size_t>(ranks));
    MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string all;
    if (rank == 0) {
      long total = 0;
      for (int r = 0; r < ranks; ++r) {
        offs[static_cast<size_t>(r)] = static_cast<int>(total);
        total += lens[static_cast<size_t>(r)];
      }
      all.resize(static_cast<size_t>(total));
    }
    MPI_Gatherv(s.data(), len, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank != 0) return error_code;
    parts.clear();
    for (int r = 0; r < ranks; ++r) parts.push_back(all.substr(static_cast<size_t>(offs[static_cast<size_t>(r)]), static_cast<size_t>(lens[static_cast<size_t>(r)])));
  }
#endif
  std::vector<PointResult> results;
  size_t resumed = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    Json doc = Json::parse(parts[r]);
    if (doc["code"].get<int>() != 0) {
      std::cerr << "sluice: " << (ranks > 1 ? fmt::format("rank {}: ", r) : "") << doc["error"].get<std::string>() << "\n";
      return doc["code"].get<int>();
    }
    for (auto& x : doc["results"]) {
      PointResult pr;
      pr.index = x["index"].get<size_t>();
      pr.resumed = x["resumed"].get<bool>();
      pr.metrics = std::move(x["metrics"]);
      resumed += pr.resumed;
      results.push_back(std::move(pr));
    }
  }
  std::sort(results.begin(), results.end(), [](const PointResult& a, const PointResult& b) { return a.index < b.index; });
  try {
    SweepTable t = combine_sweep(name, spec, points, results);
    write_file_atomically(out + "/sweep.csv", t.csv);
    write_file_atomically(out + "/sweep.json", t.json.dump(1) + "\n");
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& l : t.summary) std::cout << l << "\n";
    std::cout << fmt::format("  {} points run, {} resumed; {:.2f} s wall on {} rank{} × {} thread{}; results in {}/ (sweep.csv, sweep.json, points/)\n",
                             results.size() - resumed, resumed, wall, ranks, ranks == 1 ? "" : "s",
                             o.threads > 0 ? o.threads : default_threads(), (o.threads > 0 ? o.threads : default_threads()) == 1 ? "" : "s", out);
  } catch (const std::exception& e) {
    return report_error(e);
  }
  return 0;
}

}  // namespace

void add_sweep(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("sweep",
                                 "Run a grid or zip of scenario points (with replications) on all cores, or under mpirun over ranks; "
                                 "writes sweep.csv, sweep.json and one directory per point; resumes an interrupted sweep");
  auto o = std::make_shared<Opts>();
  cmd->add_option("scenario", o->file, "scenario YAML file, with or without a `sweep:` block")->required()->check(CLI::ExistingFile);
  cmd->add_option("--grid", o->grid, "a grid axis, e.g. --grid scheduler.kind=vllm,sarathi (several: cartesian product)")->take_all();
  cmd->add_option("--zip", o->zip, "a lockstep axis, e.g. --zip deployment.replicas=1,2,4 --zip workload.requests=100,200,400")->take_all();
  cmd->add_option("--replications", o->replications, "runs per configuration, each with its own derived seed")->check(CLI::Range(1, 100000));
  cmd->add_option("--set", o->sets, "override applied to every point, e.g. --set workload.requests=200")->take_all();
  cmd->add_option("-j,--jobs", o->threads, "threads per process (default: all cores, shared among local MPI ranks)")->check(CLI::Range(1, 4096));
  cmd->add_option("--out", o->out, "results directory (default results/<scenario>/sweep); an existing one is resumed");
  cmd->add_option("--metric", o->metrics, "metric columns, e.g. ttft.p99 (default: every numeric metric)")->take_all();
  cmd->add_option("--objective", o->objectives, "best point by, e.g. min:ttft.p99 or max:throughput.output_tokens_per_s")->take_all();
  cmd->add_option("--where", o->where, "constraint on the best point, e.g. 'ttft.p99<200ms'")->take_all();
  cmd->add_flag("--no-progress", o->quiet, "never draw the progress counter");
  cmd->callback([o, &ctx] {
    ctx.action = [o, &ctx]() -> int { return run_sweep_command(*o, ctx.registry); };
  });
}

}  // namespace sluice::cli
