#include "hardware/cost_source.h"

#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "config/error.h"
#include "config/paths.h"
#include "config/schema.h"
#include "hardware/cost_model.h"

namespace sluice {

namespace {

using Fail = std::function<void(const std::string& problem, const std::string& valid)>;

// The ceilings the costs are read at: two devices (or one and its catalog entry) that agree on
// these cost the same from the same tables.
bool same_ceilings(const HardwareSpec& a, const HardwareSpec& b) {
  return a.effective_flops() == b.effective_flops() && a.effective_bandwidth_Bps() == b.effective_bandwidth_Bps() &&
         a.kernel_launch_ns == b.kernel_launch_ns && a.sustained_clock == b.sustained_clock;
}

CostSource derive_from(const HardwareSpec& hw, const Origin& at, const Fail& fail) {
  auto from = std::make_shared<HardwareSpec>(load_hardware(hw.derive_tables_from, at));
  CostSource s;
  s.tables_dir = default_tables_dir(*from);
  if (s.tables_dir.empty())
    fail(fmt::format("{}, which {} derives its tables from, has no measured tables", from->name, hw.name),
         "auto, none, or a directory of calibration CSVs");
  s.tables_device = std::move(from);
  return s;
}

CostSource resolve(const std::string& value, const HardwareSpec& hw, const Origin& at, const Fail& fail) {
  CostSource s;
  if (value == "none") {
    s.why = "cost_tables: none";
    return s;
  }
  if (value == "derived") {
    if (hw.derive_tables_from.empty())
      fail(fmt::format("{} names no device to derive tables from", hw.name),
           "auto, none, a directory, or derived on a device whose catalog file sets derive_tables_from (h100-sxm, a100-80gb)");
    s = derive_from(hw, at, fail);
    s.why = "cost_tables: derived";
    return s;
  }
  if (value == "auto") {
    if (!hw.calibration.empty()) {
      s.tables_dir = default_tables_dir(hw);
      s.why = "its own measured tables";
      if (!hw.catalog.empty()) {
        // The tables were measured on the catalog's device: ceilings a scenario changed (a
        // sketch of next year's part) scale them, as for any other device.
        auto base = std::make_shared<HardwareSpec>(load_hardware(hw.catalog, at));
        if (!same_ceilings(*base, hw)) {
          s.tables_device = std::move(base);
          s.why = "its catalog entry's measured tables, scaled to the ceilings the scenario overrides";
        }
      }
      return s;
    }
    if (!hw.derive_tables_from.empty()) {
      s = derive_from(hw, at, fail);
      s.why = fmt::format("no measured tables of its own; its catalog names {} to derive them from", s.tables_device->name);
      return s;
    }
    s.why = "no measured tables, and its catalog names no device to derive them from";
    return s;
  }
  const auto found = find_input_path(value, /*want_directory=*/true);
  if (!found) fail("no such tables directory", "auto, none, derived, or a directory of calibration CSVs");
  bool has_csv = false;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(*found, ec), end; !ec && it != end && !has_csv; it.increment(ec))
    has_csv = it->path().extension() == ".csv";
  if (!has_csv)  // it used to mean the roofline, silently
    fail("the directory holds no .csv table", "auto, none (the roofline), derived, or a directory of calibration CSVs");
  s.tables_dir = *found;
  s.why = "the tables folder the scenario names";
  return s;
}

}  // namespace

std::string CostSource::describe(const HardwareSpec& hw) const {
  if (roofline()) return fmt::format("roofline ({})", why);
  if (derived())
    return fmt::format("derived: {}'s tables ({}) scaled to {} by the ratio of ceilings ({})", tables_device->name, relative_to_root(tables_dir),
                       hw.name, why);
  return fmt::format("measured: {} ({})", relative_to_root(tables_dir), why);
}

void CostSource::apply(CostOptions& o) const {
  o.tables_dir = tables_dir;
  o.tables_device = tables_device;
}

CostSource resolve_cost_source(const std::string& value, const HardwareSpec& hw, const Params& p, const std::string& key) {
  return resolve(value, hw, p.value(key).origin, [&](const std::string& problem, const std::string& valid) { p.fail(key, problem, valid); });
}

CostSource resolve_cost_source(const std::string& value, const HardwareSpec& hw, const std::string& option) {
  const Origin at{"command line", 0, 0};
  return resolve(value, hw, at, [&](const std::string& problem, const std::string& valid) -> void {
    throw ConfigError(at, option, value, problem, valid);
  });
}

}  // namespace sluice
