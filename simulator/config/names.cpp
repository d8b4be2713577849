#include "config/names.h"

#include <fmt/format.h>

namespace sluice {

namespace {

bool alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool allowed(char c, NameUse use) { return alnum(c) || c == '_' || c == '-' || (c == '.' && use == NameUse::FileStem); }

}  // namespace

std::string name_problem(std::string_view name, NameUse use) {
  if (name.empty()) return "a name may not be empty";
  if (name.size() > kMaxNameLength) return fmt::format("a name of {} characters is too long", name.size());
  if (!alnum(name.front())) return "a name must begin with a letter or a digit";
  for (char c : name)
    if (!allowed(c, use)) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '/' || c == '\\') return "a name may not hold a path separator";
      if (u < 0x20 || u == 0x7f) return fmt::format("a name may not hold the control character 0x{:02x}", u);
      return fmt::format("a name may not hold '{}'", c);
    }
  return "";
}

std::string name_rule(NameUse use) {
  return fmt::format("1-{} letters, digits, '_', '-'{}, beginning with a letter or digit", kMaxNameLength,
                     use == NameUse::FileStem ? " or '.'" : "");
}

std::string sanitized_name(std::string_view name) {
  while (!name.empty() && !alnum(name.front())) name.remove_prefix(1);
  std::string s;
  for (char c : name.substr(0, kMaxNameLength)) s += allowed(c, NameUse::FileStem) ? c : '_';
  return s.empty() ? "scenario" : s;
}

}  // namespace sluice
