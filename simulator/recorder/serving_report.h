// Formats a finished serving simulation into metrics.json sections, requests.csv,
// timeseries.csv and the human summary (llmperf's metric definitions).
#pragma once
#include <string>

#include "recorder/recorder.h"

namespace sluice::serving {
class ServingSim;
}

namespace sluice {

// Output tokens as llmperf counts them: it re-tokenizes the returned text with the Llama-2
// tokenizer, so `model_tokens` of a model whose tokenizer yields `model_per_llama` tokens per
// Llama token read as model_tokens / model_per_llama (Llama-3, 0.87: 150 tokens read as 172).
int64_t llmperf_counted_tokens(int64_t model_tokens, double model_per_llama);

// `scope` empty: metrics under "serving", files requests.csv and timeseries.csv; otherwise
// metrics under workloads.<scope>, files <scope>.requests.csv ..., summary lines tagged.
void report_serving(const serving::ServingSim& sim, const std::string& workload_description, Recorder& rec,
                    bool requests_csv, bool timeseries_csv, const std::string& scope = "");

}  // namespace sluice
