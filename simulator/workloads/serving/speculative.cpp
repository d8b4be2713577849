#include "workloads/serving/speculative.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "config/binding.h"
#include "config/error.h"

namespace sluice::serving {

const char* method_name(SpeculativeConfig::Method m) {
  switch (m) {
    case SpeculativeConfig::Method::None: return "none";
    case SpeculativeConfig::Method::Draft: return "draft";
    case SpeculativeConfig::Method::Mtp: return "mtp";
    case SpeculativeConfig::Method::Eagle: return "eagle";
  }
  return "?";
}

ModelSpec speculative_head(const ModelSpec& target, SpeculativeConfig::Method m) {
  ModelSpec h = target;
  h.name = fmt::format("{} {} head", target.name, method_name(m));
  h.layers = 1;
  h.dense_layers = 0;  // mtp: the module's layer is the target's (an MoE one where the target has experts)
  if (m == SpeculativeConfig::Method::Eagle && h.moe()) {
    // EAGLE's head is a dense decoder layer of the target's width.
    if (h.ffn <= 0) h.ffn = h.expert_ffn;
    h.experts = h.experts_per_token = h.expert_ffn = h.shared_experts = 0;
  }
  return h;
}

ModelSpec speculative_drafter(const SpeculativeConfig& c, const ModelSpec& target) {
  ModelSpec d = c.method == SpeculativeConfig::Method::Draft ? c.draft : speculative_head(target, c.method);
  d.weights = target.weights;
  d.kv_fp8 = target.kv_fp8;
  return d;
}

double speculative_weight_bytes_per_gpu(const SpeculativeConfig& c, const ModelSpec& target, int tp) {
  if (!c.on()) return 0;
  const ModelSpec d = speculative_drafter(c, target);
  const double shared = c.method == SpeculativeConfig::Method::Draft
                            ? 0.0
                            : static_cast<double>(target.vocab) * target.hidden * (target.tied_embeddings ? 1 : 2) * target.dtype_bytes;
  return d.weight_bytes_per_gpu(tp, 1) - shared / tp;
}

double speculative_kv_bytes_per_token_per_gpu(const SpeculativeConfig& c, const ModelSpec& target, int tp) {
  return c.on() ? speculative_drafter(c, target).kv_bytes_per_token_per_gpu(tp, 1) : 0.0;
}

namespace {
CostOptions drafter_options(CostOptions o, const ModelSpec& d) {
  o.comm_on_fabric = false;  // the drafter's own all-reduces are costed analytically (allreduce_ns, else a ring)
  if (!d.moe()) o.moe = MoeOptions{};
  return o;
}
}  // namespace

Speculator::Speculator(const SpeculativeConfig& c, const HardwareSpec& hw, const ModelSpec& target, const CostOptions& opt,
                       uint64_t seed)
    : cfg_(c),
      k_(c.tokens),
      drafter_(speculative_drafter(c, target)),
      cost_(hw, drafter_, drafter_options(opt, drafter_)),
      key_(splitmix64(seed) ^ fnv1a("serving.speculative")) {
  if (k_ < 1) throw std::invalid_argument("speculative decoding proposes at least one token a step");
  if (!c.distribution.empty()) {
    dist_ = c.distribution;
  } else {
    // P(a = j) = c_1 ... c_j (1 - c_{j+1}), with c_{k+1} = 0.
    double reach = 1;
    for (int j = 0; j <= k_; ++j) {
      const double next = j < k_ ? c.curve.at(static_cast<size_t>(j)) : 0.0;
      dist_.push_back(reach * (1 - next));
      reach *= next;
    }
  }
  if (static_cast<int>(dist_.size()) != k_ + 1) throw std::invalid_argument("an acceptance distribution has k + 1 entries");
  double sum = 0;
  for (double p : dist_) cdf_.push_back(sum += p);
  for (double& x : cdf_) x /= sum;
}

int Speculator::draw(uint32_t serial, int32_t position) const {
  const uint64_t x = splitmix64(key_ ^ splitmix64((static_cast<uint64_t>(serial) << 32) | static_cast<uint32_t>(position)));
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
  int a = 0;
  while (a < k_ && u >= cdf_[static_cast<size_t>(a)]) ++a;
  return a;
}

double Speculator::expected_tokens_per_step() const {
  double e = 1;
  for (int j = 0; j <= k_; ++j) e += j * dist_[static_cast<size_t>(j)];
  return e;
}

double Speculator::draft_ns(std::span<const int> contexts, std::span<const SeqWork> chunks) const {
  double t = 0;
  for (int j = 0; j < k_ && (j == 0 ? !contexts.empty() || !chunks.empty() : !contexts.empty()); ++j) {
    work_.clear();
    for (int c : contexts) work_.push_back(SeqWork{1, c + j, true});
    if (j == 0) work_.insert(work_.end(), chunks.begin(), chunks.end());
    t += cost_.iteration_ns(work_);
  }
  return t;
}

double Speculator::gain_at(const CostModel& target, int batch, int context) const {
  const std::vector<SeqWork> plain(static_cast<size_t>(batch), SeqWork{1, context, true});
  std::vector<SeqWork> verify = plain;
  for (SeqWork& s : verify) s.drafts = static_cast<int16_t>(k_);
  const std::vector<int> contexts(static_cast<size_t>(batch), context);
  const double t_plain = target.iteration_ns(plain);
  const double t_spec = target.iteration_ns(verify) + draft_ns(contexts);
  return t_spec > 0 ? expected_tokens_per_step() * t_plain / t_spec : 0;
}

int Speculator::break_even_batch(const CostModel& target, int context, int most) const {
  if (gain_at(target, 1, context) < 1) return 1;
  int lo = 1, hi = 2;  // gain >= 1 at lo
  while (hi <= most && gain_at(target, hi, context) >= 1) {
    lo = hi;
    hi *= 2;
  }
  if (hi > most) {
    if (lo == most || gain_at(target, most, context) >= 1) return 0;
    hi = most;
  }
  while (hi - lo > 1) {  // the gain falls with the batch: bisect between the last that pays and the first that does not
    const int mid = lo + (hi - lo) / 2;
    (gain_at(target, mid, context) >= 1 ? lo : hi) = mid;
  }
  return hi;
}

namespace {
// The keys, declared once: the schema and the binding that fills a config from it.
struct SpeculativeKeys {
  std::shared_ptr<Schema> schema = std::make_shared<Schema>();
  Binding<SpeculativeConfig> bind{*schema};
};
const SpeculativeKeys& speculative_keys() {
  static const SpeculativeKeys k = [] {
    SpeculativeKeys r;
    using M = SpeculativeConfig::Method;
    r.bind.choice<M>("method", {{"none", M::None}, {"draft", M::Draft}, {"mtp", M::Mtp}, {"eagle", M::Eagle}}, &SpeculativeConfig::method,
                     "none (off: the other keys are then unread, so a sweep can turn speculation off and on); draft (a smaller model of the same vocabulary, draft_model, with its own weights and KV cache); mtp "
                     "(DeepSeek-V3's multi-token prediction: one more decoder layer of the target's shape sharing its embedding "
                     "and LM head); eagle (one dense decoder layer of the target's width on its hidden states, sharing the same)")
        .def("none");
    r.bind.integer("tokens", &SpeculativeConfig::tokens, "drafts proposed per step (k): a step verifies k + 1 tokens and yields 1 to k + 1")
        .def("3")
        .range(1, 16);
    r.schema->add("acceptance", ParamType::Any,
                  "how often drafts are accepted: a number (each draft's chance once those before it were accepted, the same at "
                  "every position) or a list of k such numbers, one per position")
        .optional();
    r.schema->add("accepted_distribution", ParamType::List,
                  "instead of acceptance: k + 1 probabilities, of exactly 0, 1, ..., k drafts accepted in a step (summing to 1)")
        .optional();
    r.schema->ref("draft_model", {"models/llm"}, model_schema(), "method draft: the draft model (a catalog name or an inline shape; unread by mtp and eagle, which draft with a head of the target's shape)")
        .optional();
    return r;
  }();
  return k;
}
}  // namespace

std::shared_ptr<Schema> speculative_schema() { return speculative_keys().schema; }

namespace {
double probability(const Node& n, const std::string& path, const char* what) {
  char* end = nullptr;
  const double v = n.is_scalar() ? std::strtod(n.scalar.c_str(), &end) : -1;
  if (!n.is_scalar() || end == n.scalar.c_str() || *end != '\0' || !(v >= 0 && v <= 1))
    throw ConfigError(n.origin, path, n.is_scalar() ? n.scalar : n.kind_name(), fmt::format("{} is not a probability", what),
                      "a number in [0, 1]");
  return v;
}
}  // namespace

SpeculativeConfig speculative_from_params(const Params& s, const ModelSpec& target, int tp, int pp) {
  SpeculativeConfig c;
  using M = SpeculativeConfig::Method;
  speculative_keys().bind.fill(s, c);
  // A method leaves the keys it does not use unread (none: all of them; mtp and eagle:
  // draft_model), so one section can be swept across methods; the results name the drafter
  // that ran (serving.speculative.drafter).
  if (!c.on()) return c;
  if (pp > 1) s.fail("method", "speculative decoding runs on single-stage replicas here", "pipeline_parallel: 1, or method: none");
  const int k = c.tokens;
  if (s.given("acceptance") == s.given("accepted_distribution"))
    s.fail(s.given("acceptance") ? "accepted_distribution" : "method",
           s.given("acceptance") ? "says the same as acceptance" : "speculative decoding needs to know how often drafts are accepted",
           "acceptance (a rate, or one per position) or accepted_distribution, not both");
  if (s.given("acceptance")) {
    const Node& n = s.node("acceptance");
    const std::string path = s.path() + ".acceptance";
    if (n.is_seq()) {
      if (static_cast<int>(n.seq.size()) != k)
        s.fail("acceptance", fmt::format("a curve of {} positions for {} drafts a step", n.seq.size(), k), fmt::format("{} numbers in [0, 1], or one", k));
      for (size_t j = 0; j < n.seq.size(); ++j) c.curve.push_back(probability(n.seq[j], fmt::format("{}[{}]", path, j), "an acceptance rate"));
    } else {
      c.curve.assign(static_cast<size_t>(k), probability(n, path, "an acceptance rate"));
    }
  } else {
    const Node& n = s.node("accepted_distribution");
    const std::string path = s.path() + ".accepted_distribution";
    if (static_cast<int>(n.seq.size()) != k + 1)
      s.fail("accepted_distribution", fmt::format("{} entries for {} drafts a step", n.seq.size(), k),
             fmt::format("{} probabilities, of 0 to {} drafts accepted", k + 1, k));
    double sum = 0;
    for (size_t j = 0; j < n.seq.size(); ++j) sum += c.distribution.emplace_back(probability(n.seq[j], fmt::format("{}[{}]", path, j), "a share of steps"));
    if (std::abs(sum - 1) > 1e-6) s.fail("accepted_distribution", fmt::format("sums to {:.6g}", sum), "probabilities summing to 1");
  }
  if (c.method == M::Draft) {
    if (!s.given("draft_model")) s.fail("method", "a draft model proposes the tokens, and none is named", "draft_model: a catalog name (e.g. llama3.2-1b)");
    c.draft = model_from_params(s.section("draft_model"));
    const ModelSpec& d = c.draft;
    if (d.parameters() >= target.parameters())
      s.fail("draft_model", fmt::format("{} ({:.3g}B parameters) is not smaller than its target {} ({:.3g}B)", d.name, d.parameters() / 1e9,
                                        target.name, target.parameters() / 1e9),
             "a smaller model of the same vocabulary");
    if (d.vocab != target.vocab || d.tokenizer != target.tokenizer)
      s.fail("draft_model", fmt::format("{} has a vocabulary of {} tokens ({} tokenizer), {} of {} ({}): its drafts could not be verified",
                                        d.name, d.vocab, d.tokenizer, target.name, target.vocab, target.tokenizer),
             "a model of the target's tokenizer and vocabulary");
    if (d.max_context < target.max_context)
      s.fail("draft_model", fmt::format("{} holds {} tokens of context, fewer than {}'s {}: longer sequences could not be drafted", d.name,
                                        d.max_context, target.name, target.max_context),
             "a draft model of at least the target's context (or a model override of the target's max_context)");
    if (d.heads % tp != 0 || (d.kv_heads % tp != 0 && tp % d.kv_heads != 0))
      s.fail("draft_model", fmt::format("{} has {} heads and {} KV heads, which tensor parallelism {} does not split evenly", d.name, d.heads,
                                        d.kv_heads, tp),
             "a draft model whose heads divide by tensor_parallel");
    if (d.moe()) s.fail("draft_model", fmt::format("{} is a mixture of experts; drafts come from dense models here", d.name), "a dense model");
  }
  return c;
}

}  // namespace sluice::serving
