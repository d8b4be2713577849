// The built-in components: every SLUICE_REGISTER block linked into the program, run in a fixed
// order (stage, then id). The library is an object library, so every component's file is linked
// and its registration runs whether or not anything else refers to it.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "registry/registry.h"

namespace sluice {

namespace {

struct Entry {
  RegisterStage stage;
  const char* id;
  AutoRegistration::Fn fn;
};

// Constructed on first use, so registrations from any translation unit's static
// initialisation find it ready.
std::vector<Entry>& entries() {
  static std::vector<Entry> e;
  return e;
}

}  // namespace

AutoRegistration::AutoRegistration(RegisterStage stage, const char* id, Fn fn) { entries().push_back({stage, id, fn}); }

void AutoRegistration::run_all(Registry& reg) {
  std::vector<Entry> order = entries();
  std::sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
    return std::tuple(static_cast<int>(a.stage), std::string(a.id)) < std::tuple(static_cast<int>(b.stage), std::string(b.id));
  });
  for (size_t i = 1; i < order.size(); ++i)
    if (std::string(order[i].id) == order[i - 1].id)
      throw std::logic_error("internal: two SLUICE_REGISTER blocks are named " + std::string(order[i].id));
  for (const Entry& e : order) e.fn(reg);
}

void register_builtin_components(Registry& reg) { AutoRegistration::run_all(reg); }

const Registry& builtin_registry() {
  static const Registry reg = [] {
    Registry r;
    register_builtin_components(r);
    return r;
  }();
  return reg;
}

}  // namespace sluice
