// `sluice list [KIND]`: every registered component, or one kind's components and parameters.
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.h"

namespace sluice::cli {

static void print_params(const Schema& s, const std::string& indent) {
  for (const auto& p : s.params()) {
    std::string def = p.default_text ? fmt::format("default {}", p.default_text->empty() ? "\"\"" : *p.default_text)
                      : p.optional_ ? "optional"
                      : (p.type == ParamType::Section ? "" : "required");
    std::string range = p.range_text();
    std::cout << fmt::format("{}{:<24} {:<22} {:<18} {}{}\n", indent, p.name, p.type_name(), def, p.doc,
                             range.empty() ? "" : " (" + range + ")");
    if (p.type == ParamType::Section && p.section) print_params(*p.section, indent + "  ");
  }
}

void add_list(CLI::App& app, CliContext& ctx) {
  auto* cmd = app.add_subcommand("list", "List registered components (studies, schedulers, routers, workloads, ...) and their parameters");
  auto kind = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  cmd->add_option("kind", *kind, "a category (e.g. scheduler) to show with its parameters");
  cmd->add_option("name", *name, "one component of that category");
  cmd->callback([kind, name, &ctx] {
    ctx.action = [kind, name, &ctx]() -> int {
      const Registry& reg = ctx.registry;
      if (kind->empty()) {
        for (const auto& c : reg.categories()) {
          std::cout << c << ":\n";
          for (const auto* i : reg.in(c)) std::cout << fmt::format("  {:<22} {}\n", i->name, i->summary);
        }
        std::cout << "\n`sluice list KIND` shows each component's parameters (name, type/unit, default, meaning).\n";
        return 0;
      }
      auto items = reg.in(*kind);
      if (items.empty()) {
        std::string cats;
        for (const auto& c : reg.categories()) cats += (cats.empty() ? "" : ", ") + c;
        std::cerr << fmt::format("sluice: unknown kind '{}' (valid: {})\n", *kind, cats);
        return 2;
      }
      bool found = false;
      for (const auto* i : items) {
        if (!name->empty() && i->name != *name) continue;
        found = true;
        std::cout << fmt::format("{} {}: {}\n", *kind, i->name, i->summary);
        print_params(*i->schema, "    ");
        std::cout << "\n";
      }
      if (!found) {
        std::cerr << fmt::format("sluice: no {} named '{}' (valid: {})\n", *kind, *name, reg.names(*kind));
        return 2;
      }
      return 0;
    };
  });
}

}  // namespace sluice::cli
