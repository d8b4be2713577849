// Formats a serving deployment's results into metrics.json sections, requests.csv,
// timeseries.csv and the human summary (llmperf's metric definitions). The per-request
// records stream in while the run goes (ServingRecords); the rest comes at the end
// (ServingResults). Nothing here knows the serving simulation's types.
#pragma once
#include <cstdint>
#include <deque>
#include <string>

#include "recorder/quantiles.h"
#include "recorder/recorder.h"
#include "recorder/serving_results.h"

namespace sluice {

// Output tokens as llmperf counts them: it re-tokenizes the returned text with the Llama-2
// tokenizer, so `model_tokens` of a model whose tokenizer yields `model_per_llama` tokens per
// Llama token read as model_tokens / model_per_llama (Llama-3, 0.87: 150 tokens read as 172).
int64_t llmperf_counted_tokens(int64_t model_tokens, double model_per_llama);

// The recorder's side of a deployment's requests: each record, as its request ends, goes
// into the latency summaries (StreamingSummary: exact up to 2^20 requests, a 0.1% sketch
// beyond) and, formatted with fmt, into requests.csv through a RecordStream. Rows keep the
// order of request ids: a record that ends before an earlier id waits in a reorder buffer
// (its size is the spread of ids in flight, not the run's length; reorder_high_water()).
class ServingRecords final : public RequestSink {
 public:
  // `csv_name` empty: no requests.csv. `model_tokens_per_llama`: llmperf's token counting.
  ServingRecords(Recorder* rec, const std::string& csv_name, double model_tokens_per_llama);
  void answered(const ServingRequestRecord& r) override;
  void ended(uint32_t id, int32_t class_id) override;
  // Request classes: their objectives, for per-class attainment (set before the run).
  void set_classes(std::vector<ServingClass> classes) {
    classes_ = std::move(classes);
    per_class.assign(classes_.size(), ClassCounts{});
  }
  struct ClassCounts {
    int64_t ended = 0, answered = 0, met = 0;
    StreamingSummary ttft, tpot;
  };
  std::vector<ClassCounts> per_class;
  // Writes the rows still waiting (ids after one that never ended: in flight at the end) and
  // closes requests.csv. Called once, by report_serving.
  void close();
  size_t reorder_high_water() const { return reorder_high_water_; }

  // Service-level objectives (0: none): an answered request meets them when its TTFT and its
  // TPOT are each within their bound; goodput counts those (DistServe's definition).
  void set_slo(int64_t ttft_ns, int64_t tpot_ns) {
    slo_ttft_ns = ttft_ns;
    slo_tpot_ns = tpot_ns;
  }
  int64_t slo_ttft_ns = 0, slo_tpot_ns = 0;
  int64_t slo_met = 0, slo_ttft_met = 0, slo_tpot_met = 0;
  StreamingSummary ttft, e2e, tpot, itl, queue, max_gap, itl_lc, tpot_lc;
  int64_t answered_count = 0, out_tokens = 0, in_tokens = 0, preemptions = 0, cached_in = 0, out_tokens_lc = 0;
  int64_t later_prompt = 0, reused = 0, later_turns = 0, later_hits = 0;
  // Shared prefixes: answered requests whose first turn starts with one, those that found it
  // cached (their cached tokens came from it), and its tokens they did not compute.
  int64_t prefix_requests = 0, prefix_hits = 0, prefix_tokens = 0, prefix_tokens_saved = 0;

 private:
  void row(const ServingRequestRecord& r);
  Recorder* rec_;
  RecordStream* csv_ = nullptr;
  double per_llama_;
  // Reorder buffer: slot k holds id next_id_ + k (state 0: not ended, 1: row waiting, 2: no row).
  uint32_t next_id_ = 0;
  std::deque<uint8_t> state_;
  std::deque<ServingRequestRecord> waiting_;
  size_t reorder_high_water_ = 0;
  void drain();
  bool closed_ = false;
  std::vector<ServingClass> classes_;
};

// `scope` empty: metrics under "serving", files requests.csv and timeseries.csv; otherwise
// metrics under workloads.<scope>, files <scope>.requests.csv ..., summary lines tagged.
void report_serving(const ServingResults& res, ServingRecords& records, const std::string& workload_description,
                    Recorder& rec, bool timeseries_csv, const std::string& scope = "");

}  // namespace sluice
