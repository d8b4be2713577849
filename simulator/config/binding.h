// Binding: a schema key and the struct field it fills, declared once, together.
//
//   Binding<ClosSpec> b(schema);
//   b.integer("servers", &ClosSpec::servers, "servers in the cluster").def("32").range(1, 65536);
//   b.quantity("nic_bandwidth", UnitKind::Bandwidth, &ClosSpec::nic_Bps, "one NIC, one direction").positive();
//   ...
//   ClosSpec c = b.make(params);   // every bound field, from the validated parameters
//
// The key's type, doc, default and range come from the builder it returns (a ParamSpec, as
// Schema::add gives), so the schema and the copy into the struct can no longer drift apart
// (a key documented but never read, or read under another name). A key that is optional and
// absent leaves its field at the struct's default. The binding is a value: a factory keeps a
// copy and fills from it at build time (it does not refer to the schema after registration).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/schema.h"

namespace sluice {

template <class T>
class Binding {
 public:
  explicit Binding(Schema& s) : s_(&s) {}

  // An Int key into an integral field (int, int64_t, ...).
  template <class F>
    requires(std::is_integral_v<F> && !std::is_same_v<F, bool>)
  ParamSpec& integer(const std::string& key, F T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = static_cast<F>(p.integer(key)); });
    return s_->add(key, ParamType::Int, std::move(doc));
  }
  // A Real key.
  ParamSpec& real(const std::string& key, double T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.real(key); });
    return s_->add(key, ParamType::Real, std::move(doc));
  }
  // A quantity with units, in base units (bytes, B/s, FLOP/s, seconds ...).
  ParamSpec& quantity(const std::string& key, UnitKind u, double T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.real(key); });
    return s_->quantity(key, u, std::move(doc));
  }
  // A time, into an integer field of nanoseconds.
  ParamSpec& time_ns(const std::string& key, int64_t T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.time(key).count_ns(); });
    return s_->quantity(key, UnitKind::Time, std::move(doc));
  }
  // A time, into a double field of nanoseconds.
  ParamSpec& time_ns(const std::string& key, double T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = static_cast<double>(p.time(key).count_ns()); });
    return s_->quantity(key, UnitKind::Time, std::move(doc));
  }
  // A time, into a double field of seconds (SimTime::to_seconds of the parsed nanoseconds).
  ParamSpec& seconds(const std::string& key, double T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.time(key).to_seconds(); });
    return s_->quantity(key, UnitKind::Time, std::move(doc));
  }
  ParamSpec& flag(const std::string& key, bool T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.flag(key); });
    return s_->add(key, ParamType::Bool, std::move(doc));
  }
  // A flag whose absence means "not said" (left empty: the reader derives a default).
  ParamSpec& flag(const std::string& key, std::optional<bool> T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.flag(key); });
    return s_->add(key, ParamType::Bool, std::move(doc));
  }
  ParamSpec& text(const std::string& key, std::string T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.str(key); });
    return s_->add(key, ParamType::String, std::move(doc));
  }
  // One of named choices, into a string field.
  ParamSpec& choice(const std::string& key, std::vector<std::string> choices, std::string T::*field, std::string doc) {
    on(key, [key, field](const Params& p, T& t) { t.*field = p.str(key); });
    return s_->enumeration(key, std::move(choices), std::move(doc));
  }
  // One of named choices, into an enum (or any) field: each name with its value.
  template <class E>
  ParamSpec& choice(const std::string& key, std::vector<std::pair<std::string, E>> choices, E T::*field, std::string doc) {
    std::vector<std::string> names;
    for (const auto& c : choices) names.push_back(c.first);
    on(key, [key, field, choices](const Params& p, T& t) {
      for (const auto& [n, v] : choices)
        if (n == p.str(key)) t.*field = v;
    });
    return s_->enumeration(key, std::move(names), std::move(doc));
  }

  // The keys of `inner` (bound on the same schema) fill the struct member `member`: a server's
  // keys inside a cluster's, say.
  template <class S>
  void nest(S T::*member, const Binding<S>& inner) {
    // (the pair is named, not unpacked: clang before 16 cannot capture a structured binding)
    for (const auto& kf : inner.fills_) on(kf.first, [member, f = kf.second](const Params& p, T& t) { f(p, t.*member); });
  }

  // Fills every bound field that `p` holds (given or defaulted); leaves the others as they are.
  void fill(const Params& p, T& t) const {
    for (const auto& [key, f] : fills_)
      if (p.has(key)) f(p, t);
  }
  T make(const Params& p) const {
    T t{};
    fill(p, t);
    return t;
  }
  size_t size() const { return fills_.size(); }

 private:
  void on(const std::string& key, std::function<void(const Params&, T&)> f) { fills_.emplace_back(key, std::move(f)); }
  template <class>
  friend class Binding;
  Schema* s_;
  std::vector<std::pair<std::string, std::function<void(const Params&, T&)>>> fills_;
};

}  // namespace sluice
