// Lifetime and repair-time distributions for fault processes: exponential (MTBF), Weibull
// (shape, scale), fixed, lognormal (mean and sigma of the underlying normal's log). Draws come
// from the caller's RngStream, so each process (and each component of it) keeps its own stream.
#pragma once
#include <memory>
#include <string>

#include "config/schema.h"
#include "engine/rng.h"

namespace sluice::faults {

enum class DistKind { Fixed, Exponential, Weibull, Lognormal };

struct Distribution {
  DistKind kind = DistKind::Exponential;
  double mean_s = 0;   // fixed: the value; exponential: the mean; lognormal: the mean
  double shape = 1;    // Weibull k
  double scale_s = 0;  // Weibull lambda
  double sigma = 0.5;  // lognormal: sd of log(x)
  // One draw in seconds (>= 0).
  double draw(RngStream& rng) const;
  // The distribution's mean in seconds (Weibull: scale·Γ(1 + 1/k)).
  double mean() const;
  // Its variance in s² (for moment tests and availability figures).
  double variance() const;
  std::string describe() const;
};

// {dist: exponential|weibull|fixed|lognormal, mean, shape, scale, sigma}; `lifetime` picks
// the default kind (exponential) and the docs.
std::shared_ptr<Schema> distribution_schema(bool lifetime);
// Every key a validated distribution section holds (given or defaulted), in its field; a
// field whose key is absent keeps Distribution's default. Checks nothing.
Distribution distribution_fields(const Params& p);
// Reads a validated distribution section; fails at its keys when the kind's parameters are missing.
Distribution distribution_from_params(const Params& p);

}  // namespace sluice::faults
