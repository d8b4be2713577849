// Hostile input: what a planner can type by mistake (or an attacker on purpose) must end in a
// clear ConfigError before anything is simulated or much memory is allocated (issue 9).
#include <doctest/doctest.h>

#include "test_support.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "config/node.h"
#include "run/runner.h"
#include "config/units.h"
#include "hardware/spec.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

using sluice::testing::registry;

// A scratch file that disappears with the test.
struct TempFile {
  fs::path path;
  TempFile(const std::string& name, const std::string& content) {
    path = fs::temp_directory_path() / fmt_name(name);
    std::ofstream(path, std::ios::binary) << content;
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  static std::string fmt_name(const std::string& name) { return "sluice-hostile-" + std::to_string(::getpid()) + "-" + name; }
};

// The message of the ConfigError that loading `text` as a scenario raises ("" if none).
std::string scenario_error(const std::string& text, const std::vector<std::string>& sets = {}) {
  try {
    load_scenario_text(text, "hostile.yaml", sets, registry());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string file_error(const std::string& file, const std::vector<std::string>& sets = {}) {
  try {
    load_scenario(file, sets, registry());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The error of parsing `text` as YAML only (no schema), "" if none.
std::string load_error_of_yaml(const std::string& text) {
  try {
    load_yaml_string(text, "hostile.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a YAML alias bomb is refused before its expansion is allocated") {
  std::string bomb = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  const std::string names = "abcdefghi";
  for (size_t i = 1; i < names.size(); ++i) {
    const std::string x(1, names[i]), y(1, names[i - 1]);
    bomb += x + ": &" + x + " [";
    for (int k = 0; k < 9; ++k) bomb += (k ? ", *" : "*") + y;
    bomb += "]\n";
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = scenario_error(bomb);
  CAPTURE(msg);
  CHECK(msg.find("hostile.yaml:") != std::string::npos);
  CHECK(msg.find("expands to more than") != std::string::npos);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
}

TEST_CASE("YAML nested far too deep is refused (100 and 100000 levels)") {
  for (int depth : {100, 100000}) {
    CAPTURE(depth);
    const std::string msg = scenario_error("x: " + std::string(depth, '[') + std::string(depth, ']') + "\n");
    CAPTURE(msg);
    CHECK(msg.find("hostile.yaml:1:") != std::string::npos);
  }
  CHECK(scenario_error("x: " + std::string(100, '[') + std::string(100, ']') + "\n").find("nests more than") != std::string::npos);
}

TEST_CASE("a device, a FIFO, a directory or a huge file is not read as a scenario") {
  for (const char* p : {"/dev/zero", "/dev/null", "/"}) {
    CAPTURE(p);
    const std::string msg = file_error(p);
    CHECK(msg.find("not a regular file") != std::string::npos);
  }
  const fs::path fifo = fs::temp_directory_path() / TempFile::fmt_name("fifo.yaml");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(file_error(fifo.string()).find("not a regular file") != std::string::npos);  // and does not block
  fs::remove(fifo);
  TempFile big("big.yaml", "# " + std::string(kMaxYamlFileBytes, 'x') + "\n");
  CHECK(file_error(big.path.string()).find("may be at most") != std::string::npos);
}

TEST_CASE("the duplicate-key check is not quadratic: 100000 keys parse in seconds, not the 32 s they took") {
  std::string text = "model: llama3-8b\nzz: 1\n";
  for (int i = 0; i < 100000; ++i) text.append("k").append(std::to_string(i)).append(": 1\n");
  text += "k5: 2\n";
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = load_error_of_yaml(text);
  CAPTURE(msg);
  CHECK(msg.find("appears twice") != std::string::npos);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);  // about 0.5 s; quadratic was 32 s
}

TEST_CASE("a second YAML document is refused, not ignored") {
  const std::string msg = scenario_error("model: llama3-8b\n---\nseed: 3\n");
  CAPTURE(msg);
  CHECK(msg.find("hostile.yaml:2:1:") != std::string::npos);
  CHECK(msg.find("second YAML document") != std::string::npos);
}

TEST_CASE("numbers: '_' is not 0, '1e+3ms' is a time, an exponent typo is refused with its range") {
  CHECK(!parse_int("_"));
  CHECK(!parse_int("1__0"));
  CHECK(!parse_int("_1"));
  CHECK(parse_int("1_000") == 1000);
  CHECK(scenario_error("model: llama3-8b\nseed: _\n").find("seed = '_': not an integer") != std::string::npos);
  REQUIRE(parse_time("1e+3ms"));
  CHECK(parse_time("1e+3ms")->count_ns() == 1'000'000'000);
  std::string why;
  CHECK(!parse_quantity("1e10GB/s", UnitKind::Bandwidth, &why));
  CHECK(why.find("above the range") != std::string::npos);
  CHECK(!parse_quantity("1e30TB", UnitKind::Bytes));
  CHECK(!parse_quantity("1e30/s", UnitKind::Rate));
  CHECK(!parse_quantity("1e-30/s", UnitKind::Rate));
  CHECK(parse_quantity("0/s", UnitKind::Rate));  // zero is a parameter's range to refuse
  const std::string msg = scenario_error("model: llama3-8b\nhardware: {catalog: h200, hbm_capacity: 1e30TB}\n");
  CAPTURE(msg);
  CHECK(msg.find("hostile.yaml:2:") != std::string::npos);
  CHECK(msg.find("hbm_capacity") != std::string::npos);
}

TEST_CASE("a scenario name cannot write outside results/") {
  for (const char* name : {"..", ".", ".hidden"}) {
    CAPTURE(name);
    const std::string msg = scenario_error(std::string("model: llama3-8b\nname: '") + name + "'\n");
    CAPTURE(msg);
    CHECK(msg.find("hostile.yaml:2:") != std::string::npos);
    CHECK(msg.find("outside results/") != std::string::npos);
  }
}

TEST_CASE("stale staging directories: only sluice's own, of dead processes, are removed") {
  const fs::path tmp = fs::temp_directory_path() / TempFile::fmt_name("stale");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  auto make = [&](const std::string& name, bool marked) {
    fs::create_directories(tmp / name);
    std::ofstream(tmp / name / (marked ? OutputDir::kPartialMarker : "user-file")) << "x";
  };
  make(".run.partial.999999999", true);   // no such process: removed
  make(".run.partial.999999998", false);  // not marked by sluice: kept
  make(".run.partial." + std::to_string(::getpid()), true);  // a live process (this one): kept
  make("run", false);
  CHECK(OutputDir::remove_stale(tmp) == 1);
  CHECK_FALSE(fs::exists(tmp / ".run.partial.999999999"));
  CHECK(fs::exists(tmp / ".run.partial.999999998"));
  CHECK(fs::exists(tmp / std::string(".run.partial.").append(std::to_string(::getpid()))));
  CHECK_THROWS_AS(OutputDir((tmp / "run").string(), true), OutputError);  // a user's directory
  {
    OutputDir out((tmp / "fresh").string(), false);
    CHECK(fs::exists(out.staging() / OutputDir::kPartialMarker));
  }  // not committed: the staging directory goes with it
  CHECK_FALSE(fs::exists(tmp / "fresh"));
  CHECK_FALSE(fs::exists(tmp / (".fresh.partial." + std::to_string(::getpid()))));
  fs::remove_all(tmp);
}

namespace {
// A copy of the shipped h200 tables with one line of one file replaced; removed with the test.
struct TableCopy {
  fs::path dir;
  TableCopy(const std::string& file, int line_no, const std::string& line) {
    dir = fs::temp_directory_path() / TempFile::fmt_name("tables-" + file);
    fs::remove_all(dir);
    fs::copy(fs::path(SLUICE_TESTS_DIR).parent_path() / "results" / "calibration" / "h200-torch", dir);
    std::ifstream in(dir / file);
    std::string text, l;
    for (int n = 1; std::getline(in, l); ++n) text += (n == line_no ? line : l) + "\n";
    in.close();
    std::ofstream(dir / file) << text;
  }
  ~TableCopy() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};
}  // namespace

TEST_CASE("cost tables: shapes cast to int, absurd times, hex floats and conflicting rows are refused at file:line") {
  const std::string q = (fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "quickstart.yaml").string();
  struct Case { const char* file; int line; const char* text; const char* expect; };
  const Case cases[] = {
      {"attention_decode.csv", 2, "32,32,1e100,1,256,0.006288", "column 'head_dim' is 1e100, but must be a whole number"},
      {"attention_decode.csv", 2, "32,32,128,1.5,256,0.006288", "column 'batch' is 1.5"},
      {"attention_decode.csv", 2, "32,32,128,1,256,1e300", "more than an hour for one kernel"},
      {"attention_decode.csv", 2, "32,32,128,1,256,0x1p-3", "not a number"},
      {"gemm.csv", 3, "llama7b.qkv,1,4096,12288,0.5", "the same point as line 2 with a different timing"},
      {"d2h.csv", 5, "=,pinned,11.6,25.9", "column 'batch' is '=', not a number"},  // fuzz finding: escaped as a raw error
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    TableCopy t(c.file, c.line, c.text);
    const std::string msg = file_error(q, {"deployment.cost_tables=" + t.dir.string()});
    CAPTURE(msg);
    CHECK(msg.find("deployment.cost_tables") != std::string::npos);
    CHECK(msg.find(std::string(c.file) + ":" + std::to_string(c.line)) != std::string::npos);
    CHECK(msg.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("an out-of-memory deployment names the scenario file, not ': error:'") {
  const std::string msg = scenario_error("model: llama2-70b\nhardware: {catalog: h200, hbm_capacity: 10GB, runtime_capacity: 10GB}\n");
  CAPTURE(msg);
  CHECK(msg.rfind("hostile.yaml:1:1: error: deployment:", 0) == 0);
  CHECK(msg.find("does not fit") != std::string::npos);
}

TEST_CASE("--set of a component's kind drops the old kind's keys from the file") {
  const std::string q = (fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "quickstart.yaml").string();
  CHECK(file_error(q, {"workload.arrival.kind=poisson", "workload.arrival.rate=20/s"}).empty());
  CHECK(file_error(q, {"workload.arrival.rate=20/s", "workload.arrival.kind=poisson"}).empty());
  // Keys given on the command line are kept, so a wrong one is still refused.
  CHECK(file_error(q, {"workload.arrival.rate=20/s", "workload.arrival.kind=closed_loop"}).find("unknown key") != std::string::npos);
}

TEST_CASE("requests longer than the context are truncated, counted, and the run warns (stderr and metrics.json)") {
  const fs::path tmp = fs::temp_directory_path() / TempFile::fmt_name("warn");
  fs::remove_all(tmp);
  TempFile trace("long.csv", "arrival_s,input_tokens,output_tokens\n0,100000,10\n1,10,10\n2,20000,10\n");
  Scenario sc = load_scenario((fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "trace-replay.yaml").string(),
                              {"workload.file=" + trace.path.string()}, registry());
  Recorder rec;
  const Json header = run_into(sc, rec, {});
  REQUIRE(rec.warnings().size() == 1);
  CHECK(rec.warnings()[0].find("2 of 3 trace requests were longer than the model's context") != std::string::npos);
  // Counted as a figure too, beside rejected_too_long (which stays 0: they were served).
  CHECK(rec.metrics()["serving"]["requests"]["truncated_to_context"].get<int64_t>() == 2);
  CHECK(rec.metrics()["serving"]["requests"]["rejected_too_long"].get<int64_t>() == 0);
  rec.write_atomically((tmp / "run").string(), header);
  std::ifstream in(tmp / "run" / "metrics.json");
  const Json doc = Json::parse(in);
  REQUIRE(doc.contains("warnings"));
  CHECK(doc["warnings"][0].get<std::string>() == rec.warnings()[0]);
  fs::remove_all(tmp);
}

TEST_CASE("a UTF-8 byte-order mark does not hide the CSV trace header") {
  TempFile trace("bom.csv", "\xEF\xBB\xBF" "arrival_s,input_tokens,output_tokens\n0,100,10\n");
  CHECK(file_error((fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "trace-replay.yaml").string(),
                   {"workload.file=" + trace.path.string()}) == "");
}

TEST_CASE("topologies and job streams are bounded before they are built") {
  const std::string torus = scenario_error("model: llama3-8b\ntopology: {catalog: torus-3d, dims: [256, 256, 256]}\n");
  CAPTURE(torus);
  CHECK(torus.find("hostile.yaml:2:") != std::string::npos);
  CHECK(torus.find("at most 65536") != std::string::npos);
  const fs::path pod = fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "tpu-v4-ocs-vs-static.yaml";
  const std::string jobs = file_error(pod.string(), {"jobs.rate=1e6/s"});
  CAPTURE(jobs);
  CHECK(jobs.find("jobs.rate") != std::string::npos);
  CHECK(jobs.find("at most 1000000 are simulated") != std::string::npos);
}

TEST_CASE("sample_interval=1ns keeps memory bounded: the time series is thinned and the run says so") {
  Scenario sc = load_scenario((fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "quickstart.yaml").string(),
                              {"outputs.sample_interval=1ns"}, registry());
  Recorder rec;
  run_into(sc, rec, {});
  size_t rows = 0;
  for (const auto& [name, content] : rec.files())
    if (name == "timeseries.csv") rows = static_cast<size_t>(std::count(content.begin(), content.end(), '\n'));
  CHECK(rows > 1000);
  CHECK(rows <= 100'001);
  REQUIRE(!rec.warnings().empty());
  CHECK(rec.warnings()[0].find("thinned") != std::string::npos);
}

TEST_CASE("a run cut inside its first iteration reads weights only for the part of it that ran") {
  // The quickstart's first iteration is a prefill of tens of milliseconds. Cut inside it, the
  // part that ran read that share of the weights in that time, so the rate is the iteration's
  // own (weights / its length) wherever the cut falls. Counting the whole iteration's reads
  // over the clipped busy time gave weights / 1 ms = 16 TB/s at a 1 ms cut, past any HBM.
  const auto root = fs::path(SLUICE_TESTS_DIR).parent_path();
  auto cut_at = [&](const std::string& t) {
    Scenario sc = load_scenario((root / "scenarios" / "quickstart.yaml").string(), {"max_sim_time=" + t}, registry());
    Recorder rec;
    run_into(sc, rec, {});
    const Json& b = rec.metrics()["serving"]["batching"];
    REQUIRE(b["iterations"].get<int>() == 1);  // still inside the first iteration
    return b["hbm_weight_read_Bps_per_gpu"].get<double>();
  };
  const double early = cut_at("1ms"), later = cut_at("10ms");
  CHECK(early > 0);
  CHECK(early == doctest::Approx(later).epsilon(1e-9));
  CHECK(early < load_hardware("h200").hbm_bandwidth_Bps);
}

TEST_CASE("arrivals far beyond capacity warn that the run is overloaded") {
  Scenario sc = load_scenario((fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "quickstart.yaml").string(),
                              {"workload.arrival={kind: poisson, rate: 200/s}", "workload.requests=1000"}, registry());
  Recorder rec;
  run_into(sc, rec, {});
  bool overloaded = false;
  for (const auto& w : rec.warnings()) overloaded |= w.find("overloaded") != std::string::npos;
  CHECK(overloaded);
  Scenario calm = load_scenario((fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "quickstart.yaml").string(),
                                {"workload.arrival={kind: poisson, rate: 1/s}", "workload.requests=200"}, registry());
  Recorder rec2;
  run_into(calm, rec2, {});
  CHECK(rec2.warnings().empty());
}

TEST_CASE("frictions: the summary says replicas and GPUs apart, defines utilization, and single-token TPOT is empty, not 0") {
  Scenario sc = load_scenario((fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "quickstart.yaml").string(),
                              {"deployment.tensor_parallel=4", "workload.output_tokens={mean: 1, sd: 0}", "workload.requests=20"},
                              registry());
  Recorder rec;
  const Json header = run_into(sc, rec, {});
  std::string summary;
  for (const auto& l : rec.summary_lines()) summary += l + "\n";
  CAPTURE(summary);
  CHECK(summary.find("on 1 replica × 4 h200 GPUs (tp 4, pp 1) = 4 GPUs") != std::string::npos);
  CHECK(summary.find("(of the time replicas run an iteration)") != std::string::npos);
  CHECK(summary.find("single output token") != std::string::npos);
  std::string csv;
  for (const auto& [name, content] : rec.files())
    if (name == "requests.csv") csv = content;
  const auto row = csv.substr(csv.find('\n') + 1, csv.find('\n', csv.find('\n') + 1) - csv.find('\n') - 1);
  CAPTURE(row);
  // tpot_ms is the 13th column: empty for a single-token request.
  size_t pos = 0;
  for (int i = 0; i < 12; ++i) pos = row.find(',', pos) + 1;
  CHECK(row[pos] == ',');
  // The resolved scenario keeps numbers and booleans typed.
  const Json& resolved = header["scenario"]["resolved"];
  CHECK(resolved["seed"].is_number_integer());
  CHECK(resolved["deployment"]["tensor_parallel"] == 4);
  CHECK(resolved["deployment"]["prefix_reuse"].is_boolean());
  CHECK(resolved["deployment"]["gpu_memory_utilization"].is_number_float());
  CHECK(resolved["name"].is_string());
  CHECK(resolved["workload"]["arrival"]["kind"] == "closed_loop");
}

TEST_CASE("a huge MTBF or repair time in the pod study is a failure that never comes, not a clock overflow") {
  const fs::path pod = fs::path(SLUICE_TESTS_DIR).parent_path() / "scenarios" / "tpu-v4-ocs-vs-static.yaml";
  Scenario sc = load_scenario(pod.string(), {"failures.host_mtbf=100000d", "failures.host_repair=100000d"}, registry());
  Recorder rec;
  REQUIRE_NOTHROW(run_into(sc, rec, {}));
  // Over the study's horizon no host fails: nothing is interrupted, no work is lost, every
  // cube stays healthy, and jobs still run.
  const Json& variants = rec.metrics()["variants"];
  REQUIRE(variants.size() >= 2);
  for (const auto& v : variants) {
    CAPTURE(v["variant"].get<std::string>());
    CHECK(v["host_failures"].get<int64_t>() == 0);
    CHECK(v["interruptions"].get<int64_t>() == 0);
    CHECK(v["healthy_fraction"].get<double>() == 1.0);
    CHECK(v["completed"].get<int64_t>() > 0);
    for (const auto& c : v["classes"]) CHECK(c["lost_iterations"].get<double>() == 0);
  }
}

TEST_CASE("a --set key path thousands of keys deep is refused") {
  std::string path = "a";
  for (int i = 0; i < 5000; ++i) path += ".a";
  const std::string msg = scenario_error("model: llama3-8b\n", {path + "=1"});
  CHECK(msg.find("more than 64 keys deep") != std::string::npos);
}

TEST_CASE("fuzz finding: input on which YAML::LoadAll loops allocating without end is refused at once") {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = scenario_error("  ,2T1,[]\n[,2T1,[]\n");
  CHECK(!msg.empty());
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5.0);
  CHECK(scenario_error("---\nmodel: llama3-8b\n").empty());  // a leading document marker is fine
}

TEST_CASE("a metric outside what its name allows stops the run, named") {
  // Purpose-built bad states: each is what a broken study could report.
  const auto bad = [](const char* text) { return Json::parse(text); };
  CHECK_THROWS_WITH_AS(check_metric_invariants(bad(R"({"pod": {"probe_availability": {"8x8x8": 1.0000000000000002}}})")),
                       doctest::Contains("pod.probe_availability.8x8x8"), std::logic_error);
  CHECK_THROWS_WITH_AS(check_metric_invariants(bad(R"({"variants": [{"queue_delay_h": {"min": -1.3e-13}}]})")),
                       doctest::Contains("queue_delay_h.min"), std::logic_error);
  CHECK_THROWS_WITH_AS(check_metric_invariants(bad(R"({"serving": {"ttft_ms": {"p50": -0.5}}})")), doctest::Contains("negative"),
                       std::logic_error);
  CHECK_THROWS_AS(check_metric_invariants(bad(R"({"serving": {"utilization": -0.01}})")), std::logic_error);
  Json nan = Json::object();
  nan["training"]["mfu"] = std::nan("");
  CHECK_THROWS_AS(check_metric_invariants(nan), std::logic_error);
  // What may be negative or above 1 by its nature passes: gaps to published figures, ratios, gains.
  CHECK_NOTHROW(check_metric_invariants(bad(R"({"rows": [{"gap_vs_published": -0.158, "gain": 1.6, "tpot_ratio": 2.5}], "utilization": 1, "availability": 0})")));
}

TEST_CASE("every shipped scenario's figures keep their invariants (checked as each run ends)") {
  // run_into checks the metrics of every run, and the golden test runs every shipped scenario
  // and holds its metrics equal to tests/golden/<name>.json: so each shipped scenario's metrics
  // are its golden, and every golden must pass the check (one per shipped scenario, none missed).
  const fs::path root = fs::path(SLUICE_TESTS_DIR).parent_path();
  size_t scenarios = 0, checked = 0;
  for (const auto& e : fs::directory_iterator(root / "scenarios")) {
    if (e.path().extension() != ".yaml") continue;
    ++scenarios;
    const fs::path golden = root / "tests" / "golden" / (e.path().stem().string() + ".json");
    CAPTURE(golden.string());
    REQUIRE(fs::exists(golden));
    const Json m = Json::parse(testing::slurp(golden));
    CHECK_NOTHROW(check_metric_invariants(m));
    ++checked;
  }
  CHECK(scenarios >= 40);
  CHECK(checked == scenarios);
  // And the check is on in a run: a run's metrics pass it as they are.
  const Json m = testing::run_text("study: serving\nname: t\nmodel: llama3-8b\nhardware: h200\nworkload: {kind: llmperf, requests: 20, arrival: {kind: closed_loop, clients: 2}}\n");
  CHECK_NOTHROW(check_metric_invariants(m));
}
