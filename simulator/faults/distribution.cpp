#include "faults/distribution.h"

#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "config/binding.h"

namespace sluice::faults {

double Distribution::draw(RngStream& rng) const {
  switch (kind) {
    case DistKind::Fixed: return mean_s;
    case DistKind::Exponential: return rng.exponential(mean_s);
    case DistKind::Weibull: {
      // Inverse CDF: lambda · (−ln(1−u))^(1/k).
      const double u = rng.uniform();
      return scale_s * std::pow(-std::log1p(-u), 1.0 / shape);
    }
    case DistKind::Lognormal: {
      // mean = exp(mu + sigma²/2), so mu = ln(mean) − sigma²/2.
      const double mu = std::log(mean_s) - sigma * sigma / 2;
      return std::exp(mu + sigma * rng.normal());
    }
  }
  return mean_s;
}

double Distribution::mean() const {
  if (kind == DistKind::Weibull) return scale_s * std::tgamma(1 + 1 / shape);
  return mean_s;
}

double Distribution::variance() const {
  switch (kind) {
    case DistKind::Fixed: return 0;
    case DistKind::Exponential: return mean_s * mean_s;
    case DistKind::Weibull: {
      const double g1 = std::tgamma(1 + 1 / shape), g2 = std::tgamma(1 + 2 / shape);
      return scale_s * scale_s * (g2 - g1 * g1);
    }
    case DistKind::Lognormal: return (std::exp(sigma * sigma) - 1) * mean_s * mean_s;
  }
  return 0;
}

std::string Distribution::describe() const {
  switch (kind) {
    case DistKind::Fixed: return fmt::format("fixed {:.4g} s", mean_s);
    case DistKind::Exponential: return fmt::format("exponential, mean {:.4g} s", mean_s);
    case DistKind::Weibull: return fmt::format("Weibull k={:.3g}, scale {:.4g} s", shape, scale_s);
    case DistKind::Lognormal: return fmt::format("lognormal, mean {:.4g} s, sigma {:.3g}", mean_s, sigma);
  }
  return "";
}

namespace {

// A distribution section's keys, declared on `s` with the fields they fill. `kinds` are the
// choices of `dist`; `lifetime` picks its default and the docs.
Binding<Distribution> distribution_keys(Schema& s, bool lifetime, std::vector<std::pair<std::string, DistKind>> kinds) {
  using D = Distribution;
  Binding<D> b(s);
  b.choice<DistKind>("dist", std::move(kinds), &D::kind,
                     lifetime ? "time to failure: exponential (mean = MTBF), Weibull (shape, scale) or fixed" : "repair time: fixed, exponential or lognormal")
      .def(lifetime ? "exponential" : "fixed");
  b.seconds("mean", &D::mean_s, lifetime ? "mean time to failure (MTBF) for exponential; the value for fixed" : "mean repair time (MTTR); the value for fixed")
      .optional()
      .positive();
  b.real("shape", &D::shape, "Weibull shape k (1: exponential; >1: wear-out; <1: infant mortality)").def("1").range(0.05, 20);
  b.seconds("scale", &D::scale_s, "Weibull scale (the 63rd percentile lifetime)").optional().positive();
  b.real("sigma", &D::sigma, "lognormal: standard deviation of log(repair time)").def("0.5").range(0, 5);
  return b;
}

}  // namespace

std::shared_ptr<Schema> distribution_schema(bool lifetime) {
  auto s = std::make_shared<Schema>();
  if (lifetime)
    (void)distribution_keys(*s, true, {{"exponential", DistKind::Exponential}, {"weibull", DistKind::Weibull}, {"fixed", DistKind::Fixed}});
  else
    (void)distribution_keys(*s, false, {{"fixed", DistKind::Fixed}, {"exponential", DistKind::Exponential}, {"lognormal", DistKind::Lognormal}});
  return s;
}

Distribution distribution_fields(const Params& p) {
  // One binding reads a section of either schema: its `dist` knows every kind's name (the
  // schema it was declared on is a scratch one; the sections were validated by their own).
  static Schema every_kind;
  static const Binding<Distribution> keys = distribution_keys(
      every_kind, true,
      {{"fixed", DistKind::Fixed}, {"exponential", DistKind::Exponential}, {"weibull", DistKind::Weibull}, {"lognormal", DistKind::Lognormal}});
  return keys.make(p);
}

Distribution distribution_from_params(const Params& p) {
  const Distribution d = distribution_fields(p);
  // The parameters a kind needs are optional keys: which ones must be there is logic.
  if (d.kind == DistKind::Weibull) {
    if (!p.has("scale")) p.fail("scale", "a Weibull distribution needs its scale", "a time, e.g. scale: 5000h");
  } else if (!p.has("mean")) {
    p.fail("mean", fmt::format("a {} distribution needs its mean", p.str("dist")), "a time, e.g. mean: 2000h");
  }
  return d;
}

}  // namespace sluice::faults
