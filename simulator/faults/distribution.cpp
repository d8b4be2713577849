#include "faults/distribution.h"

#include <cmath>

#include <fmt/format.h>

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

std::shared_ptr<Schema> distribution_schema(bool lifetime) {
  auto s = std::make_shared<Schema>();
  if (lifetime)
    s->enumeration("dist", {"exponential", "weibull", "fixed"}, "time to failure: exponential (mean = MTBF), Weibull (shape, scale) or fixed").def("exponential");
  else
    s->enumeration("dist", {"fixed", "exponential", "lognormal"}, "repair time: fixed, exponential or lognormal").def("fixed");
  s->quantity("mean", UnitKind::Time, lifetime ? "mean time to failure (MTBF) for exponential; the value for fixed" : "mean repair time (MTTR); the value for fixed")
      .optional()
      .positive();
  s->add("shape", ParamType::Real, "Weibull shape k (1: exponential; >1: wear-out; <1: infant mortality)").def("1").range(0.05, 20);
  s->quantity("scale", UnitKind::Time, "Weibull scale (the 63rd percentile lifetime)").optional().positive();
  s->add("sigma", ParamType::Real, "lognormal: standard deviation of log(repair time)").def("0.5").range(0, 5);
  return s;
}

Distribution distribution_from_params(const Params& p) {
  Distribution d;
  const std::string& k = p.str("dist");
  d.kind = k == "fixed" ? DistKind::Fixed : k == "weibull" ? DistKind::Weibull : k == "lognormal" ? DistKind::Lognormal : DistKind::Exponential;
  if (d.kind == DistKind::Weibull) {
    if (!p.has("scale")) p.fail("scale", "a Weibull distribution needs its scale", "a time, e.g. scale: 5000h");
    d.scale_s = p.time("scale").to_seconds();
    d.shape = p.real("shape");
  } else {
    if (!p.has("mean")) p.fail("mean", fmt::format("a {} distribution needs its mean", k), "a time, e.g. mean: 2000h");
    d.mean_s = p.time("mean").to_seconds();
    d.sigma = p.real("sigma");
  }
  return d;
}

}  // namespace sluice::faults
