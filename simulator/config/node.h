// Node: a YAML tree that remembers, for every value, the file and position it came from,
// so catalog merges and command-line overrides still give errors that point at the source.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/error.h"

namespace sluice {

class Node {
 public:
  enum class Kind { Null, Scalar, Map, Seq };

  // Special members are defined out of line, where Node is complete: `map` holds pairs of
  // Node, which some standard libraries (clang with libstdc++) refuse to instantiate inside
  // Node's own definition.
  Node();
  ~Node();
  Node(const Node&);
  Node(Node&&) noexcept;
  Node& operator=(const Node&);
  Node& operator=(Node&&) noexcept;

  Kind kind = Kind::Null;
  std::string scalar;                                // for Scalar
  bool quoted = false;                               // scalar was quoted in the source
  // What a validated scalar is, for typed JSON (the resolved scenario in metrics.json);
  // Unknown: inferred from the text unless quoted.
  enum class Type { Unknown, Number, Bool, String } type = Type::Unknown;
  std::vector<std::pair<std::string, Node>> map;     // for Map, in source order
  std::vector<Origin> key_origins;                   // parallel to map
  std::vector<Node> seq;                             // for Seq
  Origin origin;

  bool is_map() const { return kind == Kind::Map; }
  bool is_seq() const { return kind == Kind::Seq; }
  bool is_scalar() const { return kind == Kind::Scalar; }
  bool is_null() const { return kind == Kind::Null; }
  const Node* find(const std::string& key) const;
  Node* find(const std::string& key);
  // Sets (or adds) a key, keeping source order for existing keys.
  void set(const std::string& key, Node value, Origin key_origin);
  // Overlays `over` on this node: maps merge key by key, anything else replaces.
  void merge(const Node& over);
  std::string kind_name() const;
  // A short rendering of the value for error messages.
  std::string brief() const;

  static Node scalar_node(std::string v, Origin o) {
    Node n;
    n.kind = Kind::Scalar;
    n.scalar = std::move(v);
    n.origin = std::move(o);
    return n;
  }
};

// The largest YAML file or text sluice reads (a scenario or catalog entry is a few KB).
inline constexpr size_t kMaxYamlFileBytes = 4u << 20;

// Parses a YAML file into a Node tree; syntax errors become ConfigErrors with the position.
Node load_yaml_file(const std::string& path);
// Parses YAML text (an override value, a test string) with a given origin label.
Node load_yaml_string(const std::string& text, const std::string& file_label);
// Emits a Node back to YAML (for the resolved scenario kept in results).
std::string to_yaml(const Node& n);

// A list of strings at `path` (`set: [a=1, b=2]`, `metrics: [...]`): a ConfigError at the node
// that is not one, with `example` as what is valid; `scalar_ok`: one string stands for a list of one.
std::vector<std::string> string_list(const Node& n, const std::string& path, const std::string& example, bool scalar_ok = false);

}  // namespace sluice
