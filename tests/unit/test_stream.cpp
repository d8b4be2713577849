// Records streamed to disk, bounded memory: the percentile sketch past 2^20 values, the
// reorder buffer that keeps requests.csv in id order, streams that reach the staging
// directory as the run goes (and the result only at commit), request slots that are reused
// (the slots in use do not grow with the run's length), and the overload bound.
#include <doctest/doctest.h>

#include "test_support.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>

#include "config/node.h"
#include "engine/rng.h"
#include "recorder/csv_format.h"
#include "recorder/output_dir.h"
#include "recorder/quantiles.h"
#include "recorder/serving_report.h"
#include "recorder/sort_values.h"
#include "registry/registry.h"
#include "run/runner.h"
#include "workloads/serving/serving_sim.h"

using namespace sluice;
using namespace sluice::serving;
namespace fs = std::filesystem;
using sluice::testing::registry;

using sluice::testing::slurp;

TEST_CASE("streamed percentiles: exact up to 2^20 values, a 0.1% sketch beyond, and the summary says which") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> lat(3.0, 1.2);
  std::vector<double> values;
  StreamingSummary s;
  for (int i = 0; i < 1000; ++i) {
    values.push_back(lat(rng));
    s.add(values.back());
  }
  values.push_back(0.0);  // a zero (a request that never queued)
  s.add(0.0);
  CHECK(s.exact());
  CHECK(s.json() == summarize(values));  // bit-identical while exact
  const size_t n = StreamingSummary::kExactLimit + 200'000;
  while (values.size() < n) {
    values.push_back(lat(rng));
    s.add(values.back());
  }
  REQUIRE_FALSE(s.exact());
  const Json got = s.json(), want = summarize(values);
  CHECK(got.contains("method"));
  CHECK(got["count"] == want["count"]);
  CHECK(got["min"].get<double>() == want["min"].get<double>());
  CHECK(got["max"].get<double>() == want["max"].get<double>());
  CHECK(got["mean"].get<double>() == doctest::Approx(want["mean"].get<double>()).epsilon(1e-9));
  CHECK(got["stddev"].get<double>() == doctest::Approx(want["stddev"].get<double>()).epsilon(1e-6));
  for (const char* k : {"p25", "p50", "p75", "p90", "p95", "p99"}) {
    CAPTURE(k);
    const double a = got[k].get<double>(), b = want[k].get<double>();
    CHECK(std::fabs(a - b) <= StreamingSummary::kRelativeError * b * 1.0001);
  }
}

TEST_CASE("requests.csv rows keep id order when requests end out of order") {
  Recorder rec;  // not streaming: the text becomes one of files() when closed
  ServingRecords r(&rec, "requests.csv", 1.0);
  auto record = [](uint32_t id) {
    ServingRequestRecord q;
    q.id = id;
    q.arrival_ns = id * 1000;
    q.first_scheduled_ns = q.arrival_ns;
    q.first_token_ns = q.arrival_ns + 10;
    q.last_token_ns = q.arrival_ns + 20;
    q.input_tokens = 5;
    q.output_tokens = 2;
    return q;
  };
  r.answered(record(2));
  r.ended(1, -1);  // rejected: no row
  r.answered(record(4));
  r.answered(record(0));
  r.answered(record(3));
  r.answered(record(6));  // 5 never ends (in flight at the end): 6 is still written, after 4
  r.close();
  CHECK(r.reorder_high_water() >= 3);
  std::string csv;
  for (const auto& [name, content] : rec.files())
    if (name == "requests.csv") csv = content;
  std::vector<std::string> ids;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) ids.push_back(line.substr(0, line.find(',')));
  CHECK(ids == std::vector<std::string>{"0", "2", "3", "4", "6"});
  CHECK(r.answered_count == 5);
}

TEST_CASE("a stream reaches the staging directory while the run goes, and the result appears only at commit") {
  const fs::path tmp = fs::temp_directory_path() / ("sluice-stream-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  {
    OutputDir out((tmp / "run").string(), false);
    Recorder rec;
    rec.stream_into(out.staging());
    RecordStream& s = rec.stream("rows.csv");
    const std::string row(99, 'x');
    for (int i = 0; i < 30'000; ++i) {
      s.buffer() += row;
      s.buffer() += '\n';
      s.maybe_flush();
    }
    // About 3 MB appended: all but the last partial chunk is on disk already, in staging only.
    CHECK(fs::file_size(out.staging() / "rows.csv") >= 2 * RecordStream::kChunk);
    CHECK(s.buffer().size() < RecordStream::kChunk);
    CHECK_FALSE(fs::exists(tmp / "run"));
    rec.write_into(out, Json::object());
    CHECK(fs::file_size(tmp / "run" / "rows.csv") == 30'000u * 100u);
    CHECK(OutputDir::is_result(tmp / "run"));
  }
  {
    // A run that stops before commit (an exception, a kill) leaves no result.
    OutputDir out((tmp / "broken").string(), false);
    Recorder rec;
    rec.stream_into(out.staging());
    RecordStream& s = rec.stream("rows.csv");
    s.buffer() += std::string(3 * RecordStream::kChunk, 'y');
    s.maybe_flush();
    CHECK(fs::exists(out.staging() / "rows.csv"));
  }
  CHECK_FALSE(fs::exists(tmp / "broken"));
  fs::remove_all(tmp);
}

TEST_CASE("sluice run streams requests.csv: the same bytes as the in-memory path") {
  const fs::path root = fs::path(SLUICE_TESTS_DIR).parent_path();
  const fs::path tmp = fs::temp_directory_path() / ("sluice-stream-run-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const std::vector<std::string> sets{"workload.requests=300", "workload.arrival={kind: poisson, rate: 40/s}"};
  std::string streamed, in_memory;
  {
    Scenario sc = load_scenario((root / "scenarios" / "multiturn-base.yaml").string(), sets, registry());
    OutputDir out((tmp / "streamed").string(), false);
    Recorder rec;
    rec.stream_into(out.staging());
    const Json header = run_into(sc, rec, {});
    rec.write_into(out, header);
  }
  {
    Scenario sc = load_scenario((root / "scenarios" / "multiturn-base.yaml").string(), sets, registry());
    Recorder rec;
    const Json header = run_into(sc, rec, {});
    rec.write_atomically((tmp / "memory").string(), header);
  }
  for (const auto& e : fs::directory_iterator(tmp / "memory")) {
    const std::string name = e.path().filename().string();
    CAPTURE(name);
    REQUIRE(fs::exists(tmp / "streamed" / name));
    CHECK(slurp(e.path()) == slurp(tmp / "streamed" / name));
  }
  fs::remove_all(tmp);
}

namespace {
// A closed loop of `clients` running `requests` multi-turn requests; returns the simulation's
// request-slot high-water mark and the slots of its table (and conversation table).
struct Slots {
  int64_t high_water, table, conversations, completed;
};
Slots run_closed_loop(int requests, int clients) {
  const Node n = load_yaml_string(fmt::format(R"(
model: tinyllama-1.1b
deployment: {{replicas: 2, cost_tables: none}}
workload: {{kind: llmperf, requests: {}, input_tokens: {{mean: 200, sd: 50}}, output_tokens: {{mean: 20, sd: 5}},
           arrival: {{kind: closed_loop, clients: {}}}, conversation: {{turns: 3, think_time: 50ms}}}}
outputs: {{trace: false}}
)", requests, clients), "t.yaml");
  auto parsed = registry().parse(n, "study", "", "serving");
  Engine engine(1);
  ServingSim sim(build_serving_config(parsed.params, registry(), 1, nullptr), engine, nullptr);
  Recorder rec;
  ServingRecords records(&rec, "requests.csv", sim.config().model_tokens_per_llama);
  sim.set_sink(&records);
  sim.run({});
  return {sim.live_high_water(), static_cast<int64_t>(sim.requests().size()), sim.conversation_slots(), sim.completed()};
}
}  // namespace

TEST_CASE("request slots are reused: the requests held at once do not grow with the run's length") {
  const Slots a = run_closed_loop(2'000, 16), b = run_closed_loop(8'000, 16);
  CHECK(a.completed == 2'000);
  CHECK(b.completed == 8'000);
  // A closed loop of 16 clients has one request per client at once (for an instant two: a
  // later turn is made as the previous one is answered, before its slot is given back), at
  // either length; without reuse the table would hold every request of the run.
  CHECK(a.high_water <= 32);
  CHECK(b.high_water <= 32);
  CHECK(b.table <= 32);
  CHECK(b.table == b.high_water);
  CHECK(b.conversations <= 16);
}

TEST_CASE("an overloaded deployment rejects arrivals beyond max_in_flight, keeps in flight bounded, and says so") {
  const fs::path root = fs::path(SLUICE_TESTS_DIR).parent_path();
  Scenario sc = load_scenario((root / "scenarios" / "quickstart.yaml").string(),
                              {"workload.arrival={kind: poisson, rate: 2000/s}", "workload.requests=6000",
                               "deployment.max_in_flight=300", "outputs.trace=false"},
                              registry());
  Recorder rec;
  run_into(sc, rec, {});
  const Json& r = rec.metrics()["serving"]["requests"];
  CAPTURE(r.dump());
  CHECK(r["rejected_overload"].get<int64_t>() > 1000);
  CHECK(r["in_flight_max"].get<int64_t>() <= 301);
  CHECK(r["completed"].get<int64_t>() + r["rejected_overload"].get<int64_t>() + r["rejected_too_long"].get<int64_t>() == 6000);
  bool warned = false;
  for (const auto& w : rec.warnings()) warned |= w.find("deployment.max_in_flight") != std::string::npos;
  CHECK(warned);
  // Without the bound the same load holds far more requests at once.
  Scenario open = load_scenario((root / "scenarios" / "quickstart.yaml").string(),
                                {"workload.arrival={kind: poisson, rate: 2000/s}", "workload.requests=6000",
                                 "deployment.max_in_flight=0", "outputs.trace=false"},
                                registry());
  Recorder rec2;
  run_into(open, rec2, {});
  CHECK(rec2.metrics()["serving"]["requests"]["in_flight_max"].get<int64_t>() > 3000);
  CHECK(rec2.metrics()["serving"]["requests"]["rejected_overload"].get<int64_t>() == 0);
}

TEST_CASE("CSV numbers: put_fixed prints what std::to_chars prints, ties and signs included") {
  auto reference = [](double v, int decimals) {
    char b[400];
    const auto r = std::to_chars(b, b + sizeof b, v, std::chars_format::fixed, decimals);
    return std::string(b, r.ptr);
  };
  auto ours = [](double v, int decimals) {
    std::string s;
    csv::put_fixed(s, v, decimals);
    return s;
  };
  // Hand-checked: ties of exact binary values go to even; negatives that round to zero keep
  // their sign; beyond the fast path's range the digits still match.
  CHECK(ours(0.0078125, 6) == "0.007812");   // exactly halfway: even
  CHECK(ours(0.0078135, 6) == reference(0.0078135, 6));
  // v·10^6 rounds to exactly k + 0.5 while v itself is above or below the tie.
  CHECK(ours(0.0010065, 6) == "0.001007");  // above 1006.5: up, though 1006 is even
  CHECK(ours(0.0010015, 6) == "0.001002");  // above 1001.5
  CHECK(ours(0.0010045, 6) == "0.001004");  // below 1004.5
  for (double v : {0.0010065, 0.0010015, 0.0010045, 0.0010035}) CHECK(ours(v, 6) == reference(v, 6));
  CHECK(ours(2.5, 0) == "2");
  CHECK(ours(3.5, 0) == "4");
  CHECK(ours(-2.5, 0) == "-2");
  CHECK(ours(-1e-9, 6) == "-0.000000");
  CHECK(ours(-0.0, 6) == "-0.000000");
  CHECK(ours(0.0, 6) == "0.000000");
  CHECK(ours(123456.0000005, 6) == reference(123456.0000005, 6));
  CHECK(ours(1e300, 6) == reference(1e300, 6));
  CHECK(ours(9.0e15, 3) == reference(9.0e15, 3));
  // A million values across the magnitudes the outputs hold (times in s and ms, fractions),
  // at every precision the writers use: no string differs.
  RngStream rng(11, "put_fixed");
  int differ = 0;
  std::string first;
  for (int i = 0; i < 1'000'000; ++i) {
    const double mag = std::pow(10.0, rng.uniform() * 16 - 8);
    double v = rng.uniform() * mag * (rng.uniform() < 0.1 ? -1 : 1);
    if (i % 7 == 0) v = std::ldexp(std::floor(v * 1024), -10);  // binary fractions: exact ties happen
    const int decimals = i % 10;
    if (ours(v, decimals) != reference(v, decimals)) {
      if (differ++ == 0) first = fmt::format("{:a} at {} decimals: {} vs {}", v, decimals, ours(v, decimals), reference(v, decimals));
    }
  }
  CHECK_MESSAGE(differ == 0, first);
}

TEST_CASE("trace numbers: put_us and put_shortest print what fmt's {} prints for the same double") {
  auto fmt_of = [](double v) { return fmt::format("{}", v); };
  auto us = [](int64_t ns) {
    std::string s;
    csv::put_us(s, ns);
    return s;
  };
  auto shortest = [](double v) {
    std::string s;
    csv::put_shortest(s, v);
    return s;
  };
  CHECK(us(0) == "0");
  CHECK(us(1) == "0.001");
  CHECK(us(1500) == "1.5");
  CHECK(us(2'000'000) == "2000");
  CHECK(us(123'456'789) == "123456.789");
  CHECK(shortest(3.0) == "3");
  CHECK(shortest(-0.0) == "-0");
  CHECK(shortest(0.25) == "0.25");
  CHECK(shortest(1e-5) == "1e-05");
  CHECK(shortest(1e16) == "1e+16");
  RngStream rng(12, "trace-numbers");
  int differ = 0;
  std::string first;
  for (int i = 0; i < 300'000; ++i) {
    // ns over 1 ns .. 10^16 ns (past the fast path's 10^15), and doubles of every kind.
    const auto ns = static_cast<int64_t>(std::pow(10.0, rng.uniform() * 16));
    if (us(ns) != fmt_of(static_cast<double>(ns) / 1e3) && differ++ == 0) first = fmt::format("ns {}: {} vs {}", ns, us(ns), fmt_of(static_cast<double>(ns) / 1e3));
    double v = std::pow(10.0, rng.uniform() * 40 - 20) * (rng.uniform() < 0.2 ? -1 : 1);
    if (i % 3 == 0) v = std::round(v);
    if (shortest(v) != fmt_of(v) && differ++ == 0) first = fmt::format("{:a}: {} vs {}", v, shortest(v), fmt_of(v));
  }
  CHECK_MESSAGE(differ == 0, first);
}

TEST_CASE("sort_values gives std::sort's sequence, bit for bit, on every kind of input") {
  std::mt19937_64 g(3);
  auto bits = [](const std::vector<double>& v) {
    std::vector<uint64_t> b(v.size());
    if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(double));  // (an empty vector's data() may be null)
    return b;
  };
  auto check = [&](std::vector<double> v) {
    std::vector<double> want = v;
    std::sort(want.begin(), want.end());
    sort_values(v);
    CHECK(bits(v) == bits(want));
  };
  std::vector<double> lat(20000);
  std::lognormal_distribution<double> ln(3.0, 1.0);
  for (auto& x : lat) x = ln(g);
  check(lat);                                         // latencies: the radix path
  for (size_t i = 0; i < lat.size(); i += 7) lat[i] = lat[i / 2];  // repeats
  for (size_t i = 0; i < lat.size(); i += 101) lat[i] = 0.0;      // zeros (+0.0)
  lat[5] = std::numeric_limits<double>::infinity();
  lat[6] = std::numeric_limits<double>::denorm_min();
  lat[7] = std::numeric_limits<double>::max();
  check(lat);
  std::vector<double> same(3000, 41.5);  // every digit the same: no pass moves anything
  check(same);
  std::vector<double> ints(5000);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<double>((i * 7919) % 1000);
  check(ints);
  auto neg = lat;  // a negative value: std::sort itself
  neg[100] = -1.5;
  check(neg);
  auto negzero = lat;  // -0.0 has a sign bit: std::sort itself
  negzero[200] = -0.0;
  check(negzero);
  check({3.0, 1.0, 2.0});  // short: std::sort
  check({});
}
