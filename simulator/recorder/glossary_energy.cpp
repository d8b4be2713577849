// The metrics glossary: a workload's share of the cluster's energy, cost and carbon (written by
// world/energy.cpp into each workload's report), the same keys for every kind of workload, and
// the per-unit keys each kind's work gives. See glossary.h for the path rules.
#include "recorder/glossary.h"

namespace sluice {

// The keys every workload's share has, for one scope.
#define SLUICE_ENERGY_SHARE(scope)                                                                                                      \
  {scope, "energy.facility_J", "J", "The workload's energy at the facility: its devices' and its share of hosts and fabric, x PUE."}, \
      {scope, "energy.devices_J", "J", "Energy of the devices it holds: idle while on, memory-bound while busy, up to TDP while compute-bound."}, \
      {scope, "energy.shared_J", "J", "Its share of the hosts', switches', NICs' and optics' energy, by its part of the cluster's devices."},  \
      {scope, "energy.average_power_W", "W", "facility_J / the world's simulated seconds."},                                                   \
      {scope, "energy.peak_power_W", "W",                                                                                                \
       "Its highest mean power over one window (world.energy.peak_power_window_s): its devices by when they were busy, its share of the rest."}, \
      {scope, "energy.provisioned_power_W", "W", "Its devices at TDP and its share of the rest at full power, x PUE."},                          \
      {scope, "cost.capex_usd", "USD", "Capex of its devices and its share of the rest of the cluster."},                                       \
      {scope, "cost.capex_amortised_usd", "USD", "The run's share of that capex (economics.lifetime_years)."},                                  \
      {scope, "cost.electricity_usd", "USD", "Its facility energy at economics.electricity_price."},                                           \
      {scope, "cost.hosting_usd", "USD", "Colocation rent of its provisioned power over the run (economics.hosting_per_kw_month)."},            \
      {scope, "cost.usd", "USD", "What its part of the run cost: capex amortised + electricity + hosting."},                                    \
      {scope, "carbon.kg", "kg", "CO2-equivalent of its facility energy at economics.grid_intensity."}

std::span<const MetricDef> energy_metric_defs() {
  static const MetricDef kDefs[] = {
      SLUICE_ENERGY_SHARE("serving"),
      {"serving", "energy.J_per_output_token", "J", "Facility energy per output token answered."},
      {"serving", "energy.J_per_token", "J", "Facility energy per token, input and output, of the answered requests."},
      {"serving", "energy.J_per_request", "J", "Facility energy per answered request."},
      {"serving", "cost.usd_per_million_output_tokens", "USD", "cost.usd per million output tokens answered."},
      {"serving", "cost.usd_per_million_tokens", "USD", "cost.usd per million tokens (input and output) of the answered requests."},
      {"serving", "cost.usd_per_million_requests", "USD", "cost.usd per million answered requests."},
      {"serving", "carbon.g_per_output_token", "g", "CO2-equivalent per output token answered."},
      {"serving", "carbon.g_per_token", "g", "CO2-equivalent per token (input and output)."},
      {"serving", "carbon.g_per_request", "g", "CO2-equivalent per answered request."},
      SLUICE_ENERGY_SHARE("training"),
      {"training", "energy.J_per_iteration", "J", "Facility energy per kept iteration (recovery and lost work included)."},
      {"training", "energy.J_per_token", "J", "Facility energy per trained token."},
      {"training", "cost.usd_per_million_iterations", "USD", "cost.usd per million kept iterations."},
      {"training", "cost.usd_per_million_tokens", "USD", "cost.usd per million trained tokens."},
      {"training", "carbon.g_per_iteration", "g", "CO2-equivalent per kept iteration."},
      {"training", "carbon.g_per_token", "g", "CO2-equivalent per trained token."},
      SLUICE_ENERGY_SHARE("diffusion"),
      {"diffusion", "energy.J_per_image", "J", "Facility energy per image generated."},
      {"diffusion", "cost.usd_per_million_images", "USD", "cost.usd per million images."},
      {"diffusion", "carbon.g_per_image", "g", "CO2-equivalent per image."},
  };
  return kDefs;
}

#undef SLUICE_ENERGY_SHARE

}  // namespace sluice
