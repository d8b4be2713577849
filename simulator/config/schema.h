// Schema: documented parameters (name, type/unit, default, meaning, valid range) and their
// validation. Every component and every scenario section is parsed through one, so unknown
// keys, wrong types, bad units and out-of-range values all fail the same clear way.
#pragma once
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/node.h"
#include "config/units.h"
#include "engine/simtime.h"

namespace sluice {

enum class ParamType { Int, Real, Bool, String, Enum, Quantity, Section, Ref, Component, ComponentList, List, Any };

class Schema;
class Params;

// Where a Component parameter's kinds are looked up (the registry implements it), so the
// config layer validates components without depending on the registry.
class ComponentCatalog {
 public:
  virtual ~ComponentCatalog() = default;
  // Parses {kind: NAME, ...params} (or a bare NAME) of `category`; sets `kind` to NAME.
  virtual Params parse_component(const Node& node, const std::string& category, const std::string& path,
                                 const std::string& default_kind, std::string& kind) const = 0;
};

// One documented parameter.
struct ParamSpec {
  std::string name;
  ParamType type = ParamType::Real;
  UnitKind unit = UnitKind::Time;         // for Quantity
  std::optional<std::string> default_text;  // nullopt: required (unless optional_)
  bool optional_ = false;                 // may be absent with no default
  std::string doc;
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_exclusive = false;
  std::vector<std::string> choices;        // for Enum
  std::shared_ptr<Schema> section;         // for Section and Ref (the schema of what is referenced)
  std::vector<std::string> ref_folders;    // for Ref: catalog folders searched, e.g. "models/hardware"
  const ComponentCatalog* registry = nullptr;  // for Component: where `category` is looked up
  std::string category;                    // for Component: e.g. "scheduler"
  std::string type_name() const;           // "int", "time", "bandwidth", "one of a|b", ...
  std::string range_text() const;          // "in [1, 1024]" etc.

  // Builder helpers.
  ParamSpec& def(std::string d) { default_text = std::move(d); return *this; }
  ParamSpec& optional() { optional_ = true; return *this; }
  ParamSpec& range(double lo, double hi) { min = lo; max = hi; return *this; }
  ParamSpec& positive() { min = 0; min_exclusive = true; return *this; }
  ParamSpec& nonneg() { min = 0; return *this; }
};

// An ordered list of parameters.
class Schema {
 public:
  ParamSpec& add(std::string name, ParamType t, std::string doc);
  ParamSpec& quantity(std::string name, UnitKind u, std::string doc);
  ParamSpec& enumeration(std::string name, std::vector<std::string> choices, std::string doc);
  ParamSpec& section(std::string name, std::shared_ptr<Schema> s, std::string doc);
  // A catalog reference: a name loads <folder>/<name>.yaml; an inline mapping overrides its
  // fields ({catalog: h200, hbm_capacity: 96GiB}) or, without 'catalog', defines one in place.
  ParamSpec& ref(std::string name, std::vector<std::string> folders, std::shared_ptr<Schema> s, std::string doc);
  // A registered component: `{kind: NAME, ...}` (or a bare NAME) of `category`, validated
  // against that component's own schema; `default_kind` applies when absent.
  ParamSpec& component(std::string name, const ComponentCatalog* reg, std::string category, std::string default_kind, std::string doc);
  // A list of registered components of `category`, each validated against its own schema.
  ParamSpec& component_list(std::string name, const ComponentCatalog* reg, std::string category, std::string doc);
  const ParamSpec* find(const std::string& name) const;
  const std::vector<ParamSpec>& params() const { return params_; }
  std::string key_list() const;

 private:
  std::vector<ParamSpec> params_;
};

// Validated values of one schema.
class Params {
 public:
  struct Value {
    ParamType type = ParamType::Any;
    double number = 0;  // Int, Real, Quantity (base units; ns for time)
    bool flag = false;
    std::string text;   // String, Enum, and the raw text of every scalar
    std::shared_ptr<Params> section;
    std::vector<std::shared_ptr<Params>> items;  // ComponentList: one per element (its `kind` included)
    const Node* node = nullptr;  // List/Any: the raw node (owned by the scenario tree or `owned`)
    std::shared_ptr<Node> owned; // Ref: the resolved (catalog + overrides) tree
    std::string catalog;         // Ref: the catalog entry it was loaded from ("" for an inline definition)
    Origin origin;
    bool given = false;          // present in the input (not a default)
  };

  bool has(const std::string& name) const;      // present with a value (given or defaulted)
  bool given(const std::string& name) const;    // present in the input
  long long integer(const std::string& name) const;
  double real(const std::string& name) const;   // Int, Real or Quantity
  bool flag(const std::string& name) const;
  const std::string& str(const std::string& name) const;
  SimTime time(const std::string& name) const;
  const Params& section(const std::string& name) const;
  const std::vector<std::shared_ptr<Params>>& items(const std::string& name) const;
  const Node& node(const std::string& name) const;
  const Value& value(const std::string& name) const;
  const std::string& path() const { return path_; }
  const Origin& origin() const { return origin_; }
  // An error about one of these parameters, positioned at its value.
  [[noreturn]] void fail(const std::string& name, const std::string& problem, const std::string& valid) const;

  std::map<std::string, Value> values;
  std::string path_;
  Origin origin_;
};

// Validates `node` (a mapping, or null for all defaults) against `schema`.
// `path` is the dotted key path of the node, used in error messages.
Params parse_params(const Node& node, const Schema& schema, const std::string& path);

// Closest key name, for "did you mean" hints.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

std::string join_path(const std::string& a, const std::string& b);

// Root of the catalogs (models/, topologies/): $SLUICE_HOME, else the source tree sluice was built from.
std::string catalog_root();
// `path` relative to catalog_root() when it lies inside it (so outputs and generated pages do
// not depend on where the checkout or the working directory is), else as given.
std::string relative_to_root(const std::string& path);
// A file (or directory) a scenario names: as given (relative to the working directory), else
// relative to the sluice root; nullopt when neither exists.
std::optional<std::string> find_input_path(const std::string& path, bool want_directory = false);
// Names available in a catalog folder, for error messages and `sluice list`.
std::vector<std::string> catalog_names(const std::string& folder);
// Loads a catalog entry by name (searching folders in order) into a Node; throws ConfigError naming
// `path` and `at` with the valid names when it does not exist.
Node load_catalog_entry(const std::vector<std::string>& folders, const std::string& name, const Origin& at, const std::string& path);

}  // namespace sluice
