// `sluice search SCENARIO`: the cheapest deployment meeting the scenario's SLO over its
// `search:` space, and the Pareto front of its objectives (run/search.h); writes search.csv,
// search.json and a point directory per simulated point, and resumes an interrupted search.
#include <chrono>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/mpi_session.h"

#include "recorder/output_dir.h"
#include "recorder/recorder.h"
#include "run/search.h"

namespace sluice::cli {

namespace {

struct SearchOpts {
  std::string file, out;
  std::vector<std::string> sets;
  int threads = 0;
  bool exhaustive = false;
};

int run_search_command(const SearchOpts& o, const Registry& reg) {
  const auto t0 = std::chrono::steady_clock::now();
  const SearchFile f = load_search_file(o.file);
  SearchOptions opt;
  opt.sets = o.sets;
  opt.prune = !o.exhaustive;
  opt.threads = o.threads > 0 ? o.threads : default_threads();
  std::string name = o.file;
  if (const Node* n = f.scenario.find("name"); n && n->is_scalar()) name = n->scalar;
  opt.out_dir = o.out.empty() ? fmt::format("results/{}/search", name) : o.out;
  // Under mpirun: every rank simulates its share of the points that survive pruning into the
  // search's directory; when all have, rank 0 runs the search again, every point resumed from
  // there (nothing simulated twice), and writes the answer.
  const int launched = launcher_ranks();
#ifdef SLUICE_HAVE_MPI
  MpiSession mpi(launched);
  const int ranks = mpi.ranks;
  if (mpi.on) {
    opt.rank = mpi.rank;
    opt.ranks = ranks;
    opt.share_only = true;
    int failed = 0, any = 0;
    try {
      run_search(f, o.file, reg, opt);
    } catch (const std::exception& e) {
      std::cerr << fmt::format("sluice: rank {}: {}\n", opt.rank, e.what());
      failed = 1;
    }
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) return 1;  // (each failed rank said why)
    if (opt.rank != 0) return 0;
    opt.share_only = false;
    opt.rank = 0, opt.ranks = 1;
  }
#else
  const int ranks = 1;
  if (launched > 1) {
    std::cerr << fmt::format("sluice: started as one of {} ranks, but this sluice was built without MPI; every rank would run the whole "
                             "search. Install libopenmpi-dev (tools/setup.sh) and rebuild, or run without mpirun.\n",
                             launched);
    return 2;
  }
#endif
  const SearchOutcome r = run_search(f, o.file, reg, opt);
  write_file_atomically(opt.out_dir + "/search.csv", r.csv);
  write_file_atomically(opt.out_dir + "/search.json", r.json.dump(1) + "\n");
  for (const auto& l : r.summary) std::cout << l << "\n";
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << fmt::format("  {:.2f} s wall on {}{} thread{}; results in {}/ (search.csv, search.json, points/)\n", wall,
                           ranks > 1 ? fmt::format("{} ranks x ", ranks) : "", opt.threads, opt.threads == 1 ? "" : "s", opt.out_dir);
  return 0;
}

}  // namespace

void add_search(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("search",
                                 "Find the cheapest configuration meeting the SLO over a scenario's `search:` space, and the Pareto front "
                                 "of its objectives: points that cannot fit or cannot meet the SLO are pruned before any is simulated");
  auto o = std::make_shared<SearchOpts>();
  cmd->add_option("scenario", o->file, "scenario YAML file with a `search:` block (grid, zip, slo, objectives)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--set", o->sets, "override applied to every point, e.g. --set workload.requests=500")->take_all();
  cmd->add_option("-j,--jobs", o->threads, "threads (default: all cores)")->check(CLI::Range(1, 4096));
  cmd->add_option("--out", o->out, "results directory (default results/<scenario>/search); an existing one is resumed");
  cmd->add_flag("--exhaustive", o->exhaustive, "simulate every point that builds, without the lower-bound pruning (to check it)");
  cmd->callback([o, &ctx] {
    ctx.action = [o, &ctx]() -> int { return run_search_command(*o, ctx.registry); };
  });
}

}  // namespace sluice::cli
