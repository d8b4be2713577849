// sluice-calibrate: checks the harness's CUDA kernels against float64 references, then
// measures them into cost tables (results/calibration/<device>/) that the simulator reads.
// Run it on a GPU machine; tools/calibrate/run_on_device.sh builds and runs it there.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "plan.h"
#include "tables.h"

using namespace sluice::calib;
using namespace sluice::calib::gpu;

namespace {

constexpr const char* kUsage = R"(usage: sluice-calibrate [options]

Checks each CUDA kernel against a float64 CPU reference (random bf16 inputs, output
poisoned with NaN first; relative error <= 1e-2), then times it by CUDA-graph replay and
writes one CSV per operation, meta.json and README.md into the output directory. A table
whose kernel fails its check is not measured, and the exit status is 1.

options:
  --out DIR              output directory (default results/calibration/<device>, e.g. h200)
  --out-root DIR         output directory DIR/<device> instead (e.g. $OUT/calibration)
  --quick                a few points per table (a smoke run of seconds)
  --check-only           run the correctness checks and stop
  --only LIST            comma-separated tables: prefill,slice,decode,elementwise,gemm,d2h,ceilings
  --memory-fraction F    largest working set of a point, as a fraction of device memory (0.45)
  --repeats N            timed graph replays per point (10)
  --graph-ms MS          length of one replay in milliseconds (2)
  --git COMMIT           source commit, recorded in meta.json
  --driver VERSION       driver version to record (default: read from /proc/driver/nvidia/version)
  -h, --help             this text

exit status: 0 all checks passed and tables written; 1 a check failed or a table could not
be measured; 2 bad usage; 3 no usable CUDA device.
)";

struct Options {
  std::string out, out_root, git, driver;
  bool quick = false, check_only = false;
  std::set<std::string> only;
  double memory_fraction = 0.45;
  TimingOptions timing;
};

const std::set<std::string> kTables = {"prefill", "slice", "decode", "elementwise", "gemm", "d2h", "ceilings"};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "sluice-calibrate: %s\n(see --help)\n", msg.c_str());
  std::exit(2);
}

double parse_number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) usage_error(flag + " needs a number, got '" + v + "'");
  return d;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "--out-root") {
      o.out_root = value();
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--check-only") {
      o.check_only = true;
    } else if (a == "--only") {
      std::stringstream ss(value());
      std::string t;
      while (std::getline(ss, t, ',')) {
        if (!kTables.count(t)) usage_error("--only: unknown table '" + t + "'");
        o.only.insert(t);
      }
    } else if (a == "--memory-fraction") {
      o.memory_fraction = parse_number(a, value());
      if (o.memory_fraction <= 0 || o.memory_fraction > 0.9) usage_error("--memory-fraction must be in (0, 0.9]");
    } else if (a == "--repeats") {
      o.timing.repeats = static_cast<int>(parse_number(a, value()));
      if (o.timing.repeats < 1) usage_error("--repeats must be at least 1");
    } else if (a == "--graph-ms") {
      o.timing.graph_target_ms = parse_number(a, value());
      if (o.timing.graph_target_ms <= 0) usage_error("--graph-ms must be positive");
    } else if (a == "--git") {
      o.git = value();
    } else if (a == "--driver") {
      o.driver = value();
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  return o;
}

std::string driver_from_proc() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(in, line)) return "unknown";
  // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..."
  const auto k = line.find("Kernel Module");
  if (k == std::string::npos) return "unknown";
  std::stringstream ss(line.substr(k + 13));
  std::string v;
  ss >> v;
  return v.empty() ? "unknown" : v;
}

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

bool all_pass(const std::vector<CheckResult>& r) {
  for (const auto& c : r)
    if (!c.pass) return false;
  return !r.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = parse(argc, argv);
  auto want = [&](const char* t) { return opt.only.empty() || opt.only.count(t); };

  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::fprintf(stderr,
                 "sluice-calibrate: no usable CUDA GPU here (%s). The harness measures kernels on a GPU: run it\n"
                 "on a GPU machine, e.g. with tools/calibrate/run_on_device.sh.\n",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no device found");
    return 3;
  }
  try {
    CAL_CUDA(cudaSetDevice(0));
    cudaDeviceProp prop{};
    CAL_CUDA(cudaGetDeviceProperties(&prop, 0));
    if (prop.major < 8) {
      std::fprintf(stderr, "sluice-calibrate: %s is compute capability %d.%d; the kernels need 8.0 or newer\n",
                   prop.name, prop.major, prop.minor);
      return 3;
    }
    Metadata meta;
    meta.device_name = prop.name;
    meta.sm_count = prop.multiProcessorCount;
    meta.cc_major = prop.major;
    meta.cc_minor = prop.minor;
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0) == cudaSuccess) meta.sm_clock_mhz = khz / 1000;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess) meta.mem_clock_mhz = khz / 1000;
    meta.memory_bytes = double(prop.totalGlobalMem);
    meta.l2_bytes = double(prop.l2CacheSize);
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    meta.driver_version = (opt.driver.empty() ? driver_from_proc() : opt.driver) + " (CUDA " + version_string(drv) + ")";
    meta.cuda_runtime_version = version_string(rt);
    meta.cublaslt_version = Gemm::version();
    meta.date_utc = utc_now_iso8601();
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    meta.host = host;
    meta.git_commit = opt.git;
    for (int i = 0; i < argc; ++i) meta.command += (i ? " " : "") + std::string(argv[i]);
    meta.graph_target_us = static_cast<int>(opt.timing.graph_target_ms * 1000);
    meta.repeats = opt.timing.repeats;
    meta.warmup_replays = opt.timing.warmup;
    const std::string out = !opt.out.empty()        ? opt.out
                            : !opt.out_root.empty() ? opt.out_root + "/" + device_slug(prop.name)
                                                    : "results/calibration/" + device_slug(prop.name);

    std::printf("sluice-calibrate on %s: %d SMs, cc %d.%d, %.1f GB, L2 %.0f MB, SM clock %d MHz, driver %s, runtime %s\n",
                prop.name, meta.sm_count, prop.major, prop.minor, meta.memory_bytes / 1e9, meta.l2_bytes / 1e6,
                meta.sm_clock_mhz, meta.driver_version.c_str(), meta.cuda_runtime_version.c_str());
    std::fflush(stdout);

    cudaStream_t s;
    CAL_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Gemm gemm;

    // 1. Correctness, before any timing.
    std::printf("checks (tolerance %.0e):\n", kTolerance);
    std::map<std::string, bool> ok;
    auto run_checks = [&](const std::string& family, auto fn) {
      std::vector<CheckResult> r;
      try {
        r = fn();
      } catch (const std::exception& ex) {
        std::printf("  check %s threw: %s\n", family.c_str(), ex.what());
        r.push_back({family, "exception", INFINITY, false});
        cudaGetLastError();  // clear a sticky launch error, if it is not fatal
      }
      for (const auto& c : r)
        meta.checks.push_back({{"kernel", c.kernel}, {"shape", c.shape}, {"rel_error", std::to_string(c.rel_error)},
                               {"pass", c.pass ? "true" : "false"}});
      ok[family] = all_pass(r);
    };
    if (want("prefill") || want("slice")) run_checks("prefill", [&] { return check_prefill(s); });
    if (want("decode")) run_checks("decode", [&] { return check_decode(meta.sm_count, s); });
    if (want("elementwise")) run_checks("elementwise", [&] { return check_elementwise(s); });
    if (want("gemm") || want("ceilings")) run_checks("gemm", [&] { return check_gemm(gemm, s); });
    if (want("d2h")) run_checks("d2h", [&] { return check_d2h(s); });
    bool failed = false;
    for (const auto& [f, good] : ok) {
      if (!good) std::printf("FAILED checks: %s (its tables will not be measured)\n", f.c_str());
      failed |= !good;
    }
    if (opt.check_only) {
      std::printf(failed ? "checks FAILED\n" : "all checks passed\n");
      return failed ? 1 : 0;
    }

    // 2. The sweep.
    PlanOptions po;
    po.quick = opt.quick;
    po.memory_budget_bytes = opt.memory_fraction * meta.memory_bytes;
    const Plan plan = make_plan(po);
    for (const auto& sk : plan.skipped) std::printf("skipped %s\n", sk.c_str());
    std::vector<std::pair<std::string, CsvTable>> tables;
    Summary& sum = meta.summary;
    auto measure = [&](const char* name, const std::string& family, auto fn) {
      if (!want(name)) return;
      if (!ok[family]) {
        std::printf("not measuring %s: the %s checks failed\n", name, family.c_str());
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      try {
        tables.push_back(fn());
      } catch (const std::exception& ex) {
        std::printf("measuring %s failed: %s\n", name, ex.what());
        failed = true;
        return;
      }
      std::printf("%s: %zu rows in %.1f s\n", tables.back().first.c_str(), tables.back().second.rows.size(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::fflush(stdout);
    };
    measure("ceilings", "gemm", [&] { return std::pair{std::string("ceilings.csv"), measure_ceilings(gemm, opt.timing, s, sum)}; });
    measure("decode", "decode", [&] { return std::pair{std::string("attention_decode.csv"), sweep_decode(plan.decode, meta.sm_count, opt.timing, s, sum)}; });
    measure("prefill", "prefill", [&] { return std::pair{std::string("attention_prefill.csv"), sweep_prefill(plan.prefill, opt.timing, s, sum)}; });
    measure("slice", "prefill", [&] { return std::pair{std::string("attention_slice.csv"), sweep_slice(plan.slice, opt.timing, s, sum)}; });
    measure("elementwise", "elementwise", [&] { return std::pair{std::string("elementwise.csv"), sweep_elementwise(plan.elementwise, opt.timing, s, sum)}; });
    measure("gemm", "gemm", [&] { return std::pair{std::string("gemm.csv"), sweep_gemm(plan.gemm, gemm, opt.timing, s, sum)}; });
    measure("d2h", "d2h", [&] { return std::pair{std::string("d2h.csv"), sweep_d2h(plan.d2h, s)}; });

    if (sum.count("copy_TBps") && sum.count("decode_TBps_max"))
      sum["decode_TBps_max_over_copy"] = sum["decode_TBps_max"] / sum["copy_TBps"];
    if (sum.count("copy_TBps") && sum.count("decode_TBps_min_at_batch_x_len_ge_1M"))
      sum["decode_TBps_large_over_copy"] = sum["decode_TBps_min_at_batch_x_len_ge_1M"] / sum["copy_TBps"];
    if (tables.empty()) {
      std::printf("no table measured; nothing written\n");
      return 1;
    }
    write_tables_dir(out, tables, meta);
    std::printf("\nwrote %zu tables, meta.json and README.md to %s\nsummary:\n", tables.size(), out.c_str());
    for (const auto& [k, v] : sum) std::printf("  %-44s %.4g\n", k.c_str(), v);
    std::printf("targets: decode >= 0.8 x copy ceiling at large batch x length; causal prefill at 16k >= 315 TFLOP/s\n");
    cudaStreamDestroy(s);
    return failed ? 1 : 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "sluice-calibrate: %s\n", ex.what());
    return 1;
  }
}
