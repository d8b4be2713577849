// `sluice list hardware|model|topology [NAME]`: the catalogs (models/hardware, models/llm,
// topologies/) with their headline fields; a misspelt name suggests the closest real one.
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "config/node.h"
#include "config/schema.h"
#include "hardware/spec.h"

namespace sluice::cli {

namespace {

struct Catalog {
  std::string kind, folder;
  std::vector<std::string> columns;  // headline keys shown per entry
};

const std::vector<Catalog>& catalogs() {
  static const std::vector<Catalog> all = {
      {"hardware", "models/hardware", {"kind", "peak_bf16", "peak_fp8", "peak_fp4", "hbm_capacity", "hbm_bandwidth", "price_usd"}},
      {"model", "models/llm", {"layers", "hidden", "heads", "kv_heads", "head_dim", "max_context", "experts", "experts_per_token"}},
      {"topology", "topologies", {"kind", "description"}},
  };
  return all;
}

std::string field(const Node& n, const std::string& key) {
  const Node* v = n.find(key);
  return v && v->is_scalar() ? v->scalar : "-";
}

void print_entry(const Node& n, const std::string& indent) {
  for (size_t i = 0; i < n.map.size(); ++i) {
    const auto& [k, v] = n.map[i];
    if (v.is_scalar()) std::cout << fmt::format("{}{:<28} {}\n", indent, k, v.scalar);
    else if (v.is_map()) {
      std::cout << fmt::format("{}{}:\n", indent, k);
      print_entry(v, indent + "  ");
    } else {
      std::cout << fmt::format("{}{:<28} {}\n", indent, k, v.brief());
    }
  }
}

}  // namespace

std::optional<int> list_catalog(const std::string& kind_in, const std::string& name, const Registry& reg) {
  std::string kind = kind_in;
  if (kind == "models" || kind == "llm") kind = "model";
  if (kind == "topologies") kind = "topology";
  const Catalog* cat = nullptr;
  for (const auto& c : catalogs())
    if (c.kind == kind) cat = &c;
  if (!cat) return std::nullopt;
  const auto names = catalog_names(cat->folder);
  const auto root = std::filesystem::path(catalog_root()) / cat->folder;
  if (!name.empty()) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      const std::string hint = closest(name, names);
      std::cerr << fmt::format("sluice: no {} named '{}' in {}/{}(valid: {})\n", kind, name, cat->folder,
                               hint.empty() ? " " : fmt::format(" (did you mean '{}'?) ", hint), fmt::join(names, ", "));
      return 2;
    }
    std::cout << fmt::format("{} {} ({}/{}.yaml):\n", kind, name, cat->folder, name);
    print_entry(load_yaml_file((root / (name + ".yaml")).string()), "    ");
    return 0;
  }
  std::cout << fmt::format("{} catalog ({}/): a scenario names an entry, e.g. {}: {}\n", kind, cat->folder, kind, names.empty() ? "" : names.front());
  std::string head = fmt::format("  {:<20}", "name");
  for (const auto& c : cat->columns) head += fmt::format(" {:<14}", c);
  if (kind == "hardware") head += " precisions (deployment.precision)";
  std::cout << head << "\n";
  for (const auto& n : names) {
    const Node e = load_yaml_file((root / (n + ".yaml")).string());
    std::string line = fmt::format("  {:<20}", n);
    for (const auto& c : cat->columns) line += fmt::format(" {:<14}", field(e, c));
    if (kind == "hardware") line += " " + load_hardware(n).precisions();
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  }
  if (kind == "topology") {
    std::cout << "\ntopology generators (a catalog entry's kind, or {kind: GENERATOR, ...} inline):\n";
    for (const auto* i : reg.in("topology")) std::cout << fmt::format("  {:<20} {}\n", i->name, i->summary);
    std::cout << "`sluice list topology GENERATOR` shows a generator's parameters; `sluice list topology ENTRY` a catalog entry.\n";
  } else {
    std::cout << fmt::format("`sluice list {} NAME` shows every field of one entry.\n", kind);
  }
  return 0;
}

}  // namespace sluice::cli
