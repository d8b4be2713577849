// The metrics glossary covers every key the shipped scenarios write (their golden metrics and a
// run's header), and every entry is a key some shipped scenario writes.
#include <doctest/doctest.h>

#include "run/bands.h"

#include "test_support.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "recorder/glossary.h"

using namespace sluice;
namespace fs = std::filesystem;
using sluice::testing::registry;
using sluice::testing::slurp;

namespace {

// Every leaf key path of `j` (array elements written `[]`), with where it was first seen.
void leaves(const Json& j, const std::string& path, std::map<std::string, std::string>& out, const std::string& where,
            const std::string& stop_at = "") {
  if (!stop_at.empty() && path == stop_at) {
    out.emplace(path, where);
    return;
  }
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) leaves(v, path.empty() ? k : path + "." + k, out, where, stop_at);
  } else if (j.is_array()) {
    for (const auto& v : j) leaves(v, path + "[]", out, where, stop_at);
  } else {
    out.emplace(path, where);
  }
}

}  // namespace

TEST_CASE("the metrics glossary defines every key the shipped scenarios write, and nothing else") {
  const fs::path root = fs::path(SLUICE_TESTS_DIR).parent_path();
  // Every golden's leaf keys. A world's workload is looked up among its own kind's entries only
  // (its kind from what its report holds), so each key is kept with that kind.
  std::map<std::pair<std::string, std::string>, std::string> keys;  // (path, kind) -> the golden that has it
  size_t goldens = 0;
  for (const auto& e : fs::directory_iterator(root / "tests" / "golden")) {
    if (e.path().extension() != ".json") continue;
    ++goldens;
    const std::string file = e.path().filename().string();
    const Json g = Json::parse(slurp(e.path()));
    std::map<std::string, std::string> kind_of;  // workload name -> kind
    if (g.contains("workloads"))
      for (const auto& [name, w] : g["workloads"].items()) {
        const std::string kind = w.contains("deployment")                              ? "serving"
                                 : w.contains("job") && w["job"].contains("strategy") ? "diffusion"
                                 : w.contains("job")                                  ? "training"
                                                                                      : "";
        REQUIRE_MESSAGE(!kind.empty(), file << ": workload " << name << " is of no kind the glossary knows");
        kind_of[name] = kind;
      }
    std::map<std::string, std::string> mine;
    leaves(g, "", mine, file);
    for (const auto& [path, where] : mine) {
      std::string kind;
      if (path.rfind("workloads.", 0) == 0) kind = kind_of.at(path.substr(10, path.find('.', 10) - 10));
      keys.emplace(std::make_pair(path, kind), where);
    }
  }
  REQUIRE(goldens >= 50);
  REQUIRE(keys.size() > 500);

  std::set<const MetricDef*> used;
  std::string missing;
  for (const auto& [pk, where] : keys) {
    const MetricDef* d = find_metric(pk.first, false, pk.second);
    if (!d)
      missing += pk.first + (pk.second.empty() ? "" : " [" + pk.second + "]") + " (" + where + ")\n";
    else
      used.insert(d);
  }
  CHECK_MESSAGE(missing.empty(), "keys without a glossary entry:\n" << missing);

  // The header of a run (the same for every study): everything but the resolved scenario itself.
  Scenario sc = load_scenario((root / "scenarios" / "quickstart.yaml").string(), {}, registry());
  Recorder rec;
  Json header = run_into(sc, rec, {});
  REQUIRE(sc.band_replications >= 0);  // the quickstart asks for error bands: their keys are the header's too
  std::vector<std::string> band_warnings;
  header["bands"] = error_bands(BandRequest{(root / "scenarios" / "quickstart.yaml").string(), {}, sc.seed, sc.band_replications, 0},
                                rec.metrics(), registry(), band_warnings);
  std::map<std::string, std::string> hkeys;
  leaves(header, "", hkeys, "header", "scenario.resolved");
  REQUIRE(hkeys.size() >= 5);
  std::string hmissing;
  for (const auto& [path, where] : hkeys) {
    const MetricDef* d = find_metric(path, true);
    if (!d)
      hmissing += path + "\n";
    else
      used.insert(d);
  }
  CHECK_MESSAGE(hmissing.empty(), "header keys without a glossary entry:\n" << hmissing);

  std::string stale;
  for (const MetricDef& d : metric_glossary())
    if (!used.count(&d)) stale += std::string(d.scope) + ": " + d.path + "\n";
  CHECK_MESSAGE(stale.empty(), "glossary entries no shipped scenario writes:\n" << stale);

  // Each entry says something: a unit and a sentence.
  for (const MetricDef& d : metric_glossary()) {
    CAPTURE(std::string(d.path));
    CHECK(std::string(d.unit).size() > 0);
    CHECK(std::string(d.meaning).size() >= 12);
  }
}

TEST_CASE("the glossary's lookup: a world's workload, a summary's fields, names and arrays") {
  // These paths are written by every serving run and every world.
  const MetricDef* ttft = find_metric("serving.latency_ms.ttft.p99");
  REQUIRE(ttft != nullptr);
  CHECK(ttft == find_metric("workloads.chat.latency_ms.ttft.p50"));
  CHECK(ttft->summary);
  CHECK(std::string(ttft->unit) == "ms");
  CHECK(find_metric("serving.latency_ms.ttft.p42") == nullptr);  // not a summary field
  CHECK(find_metric("serving.no_such_key") == nullptr);
  // A world's training job: its kind picks the training entry, not the serving one of the same name.
  CHECK(std::string(find_metric("workloads.pretrain.faults.availability", false, "training")->scope) == "training");
  CHECK(find_metric("workloads.pretrain.deployment.model", false, "training") == nullptr);
  CHECK(find_metric("serving.replicas[].utilization") != nullptr);
  CHECK(find_metric("serving.replicas.utilization") == nullptr);  // an array needs its []
  CHECK(find_metric("schema_version") == nullptr);                // a header key, not a metric
  CHECK(find_metric("schema_version", true) != nullptr);
  const std::string md = metric_glossary_markdown();
  CHECK(md.find("| `latency_ms.ttft` | ms (summary) |") != std::string::npos);
}
