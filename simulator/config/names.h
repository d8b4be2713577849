// Names a user gives that become parts of file names and metric keys: a workload's name
// (`<name>.requests.csv`, `workloads.<name>.…`), a scenario's name (`results/<name>/…`), a
// check suite's and its entries' names (`results/baselines/<suite>/<entry>.json`). Each is
// checked where it is declared, so no name can reach a path outside its folder (`..`, `/`,
// an absolute path), a hidden file, or a metric key with a control character in it.
#pragma once
#include <string>
#include <string_view>

namespace sluice {

enum class NameUse {
  FileStem,   // letters, digits, '_', '-' and '.' (a scenario or suite name)
  MetricKey,  // the same without '.', which would split the metric path (a workload name)
};

// Why `name` is not a valid name for `use` ("" when it is).
std::string name_problem(std::string_view name, NameUse use);
// What a valid name looks like, for the "valid" part of an error.
std::string name_rule(NameUse use);
// `name` made a valid file-stem name: leading characters other than letters and digits
// dropped (no hidden file, no `..`, no option), every other character a name may not hold
// replaced by '_', cut to the longest length allowed ("scenario" when nothing is left); for a
// name derived from a file name, which the user did not type as a name.
std::string sanitized_name(std::string_view name);

constexpr size_t kMaxNameLength = 64;

}  // namespace sluice
