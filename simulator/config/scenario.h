// The scenario tree between parsing and building: overrides, the resolved tree (every default
// filled in) and its JSON form, and the keys every scenario has.
#pragma once
#include <string>

#include "config/node.h"
#include "config/schema.h"
#include "config/json.h"

namespace sluice {

// Keys every study has: name, description, source, seed, study.
Schema common_study_schema();

// Applies `--set a.b.c=value` overrides to a tree (value parsed as YAML).
void apply_override(Node& root, const std::string& assignment);

// The resolved tree of validated params (defaults filled in, references expanded).
Node resolved_tree(const Params& p);
Json node_to_json(const Node& n);

}  // namespace sluice
