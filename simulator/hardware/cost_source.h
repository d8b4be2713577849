// The one cost-source policy: how a workload's `cost_tables` key (and `sluice cost --tables`)
// becomes the tables a device is costed with. Serving, training, diffusion and `sluice cost`
// resolve it here, so a comparison of two devices is never decided by which method each got.
//
//   auto (the default)  the device's own measured tables when it has them (its catalog's
//                       `calibration`); a catalog device whose ceilings the scenario overrides
//                       gets them derived from its unmodified catalog entry, so the override
//                       changes the costs; a device without tables gets them derived from the
//                       device its catalog names (`derive_tables_from`), scaled by the ratio of
//                       ceilings; a device that names none (V100, TPU v4, CPUs) the roofline
//   derived             derived explicitly (an error when the device names no source device)
//   none                the roofline alone
//   DIRECTORY           measured tables in that folder, taken as this device's own
#pragma once
#include <memory>
#include <string>

#include "hardware/spec.h"

namespace sluice {

class Params;
struct CostOptions;

// The `cost_tables` key's documentation, the same for every workload kind.
inline constexpr const char* kCostTablesDoc =
    "auto (the device's measured tables; tables derived from its unmodified catalog entry when the scenario overrides its "
    "ceilings; else derived from the device its catalog names in derive_tables_from, scaled by the ratio of ceilings; else "
    "the roofline), derived, none (roofline only), or a directory of measured tables";

struct CostSource {
  std::string tables_dir;                             // "" = the roofline
  std::shared_ptr<const HardwareSpec> tables_device;  // set: tables measured on this device, scaled to ours
  std::string why;                                    // why the policy chose this source, for reports

  bool roofline() const { return tables_dir.empty(); }
  bool derived() const { return tables_device != nullptr; }
  // "measured", "derived" or "roofline".
  const char* kind() const { return roofline() ? "roofline" : derived() ? "derived" : "measured"; }
  // One line for summaries and metrics.json: the kind, the tables' folder (relative to the
  // sluice root when inside it) and, when derived, whose tables scaled to which device.
  std::string describe(const HardwareSpec& hw) const;
  void apply(CostOptions& o) const;
};

// Resolves `value` of the key `key` in `p` (a located error on a bad value) for device `hw`.
CostSource resolve_cost_source(const std::string& value, const HardwareSpec& hw, const Params& p, const std::string& key);
// The same for a command-line option (errors name `option`).
CostSource resolve_cost_source(const std::string& value, const HardwareSpec& hw, const std::string& option);

}  // namespace sluice
