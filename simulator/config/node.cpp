#include "config/node.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

namespace sluice {

Node::Node() = default;
Node::~Node() = default;
Node::Node(const Node&) = default;
Node::Node(Node&&) noexcept = default;
Node& Node::operator=(const Node&) = default;
Node& Node::operator=(Node&&) noexcept = default;

const Node* Node::find(const std::string& key) const {
  for (const auto& [k, v] : map)
    if (k == key) return &v;
  return nullptr;
}
Node* Node::find(const std::string& key) {
  for (auto& [k, v] : map)
    if (k == key) return &v;
  return nullptr;
}

void Node::set(const std::string& key, Node value, Origin key_origin) {
  if (kind != Kind::Map) {
    kind = Kind::Map;
    map.clear();
    key_origins.clear();
  }
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i].first == key) {
      map[i].second = std::move(value);
      return;
    }
  map.emplace_back(key, std::move(value));
  key_origins.push_back(std::move(key_origin));
}

void Node::merge(const Node& over) {
  if (kind == Kind::Map && over.kind == Kind::Map) {
    for (size_t i = 0; i < over.map.size(); ++i) {
      const auto& [k, v] = over.map[i];
      if (Node* mine = find(k)) mine->merge(v);
      else set(k, v, over.key_origins[i]);
    }
    return;
  }
  *this = over;
}

std::string Node::kind_name() const {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Scalar: return "scalar";
    case Kind::Map: return "mapping";
    case Kind::Seq: return "sequence";
  }
  return "?";
}

std::string Node::brief() const {
  if (kind == Kind::Scalar) return scalar;
  if (kind == Kind::Null) return "";
  std::string s = to_yaml(*this);
  for (auto& c : s)
    if (c == '\n') c = ' ';
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

static Node convert(const YAML::Node& y, const std::string& file) {
  Node n;
  const auto m = y.Mark();
  n.origin = Origin{file, m.line >= 0 ? m.line + 1 : 0, m.column >= 0 ? m.column + 1 : 0};
  switch (y.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      n.kind = Node::Kind::Null;
      break;
    case YAML::NodeType::Scalar:
      n.kind = Node::Kind::Scalar;
      n.scalar = y.Scalar();
      n.quoted = y.Tag() == "!";
      break;
    case YAML::NodeType::Sequence:
      n.kind = Node::Kind::Seq;
      for (const auto& e : y) n.seq.push_back(convert(e, file));
      break;
    case YAML::NodeType::Map:
      n.kind = Node::Kind::Map;
      for (const auto& kv : y) {
        const auto km = kv.first.Mark();
        Origin ko{file, km.line + 1, km.column + 1};
        if (!kv.first.IsScalar())
          throw ConfigError(ko, "", "", "mapping keys must be plain names", "a name such as 'seed'");
        const std::string key = kv.first.Scalar();
        if (n.find(key)) throw ConfigError(ko, key, "", "this key appears twice in the same mapping", "each key once");
        n.map.emplace_back(key, convert(kv.second, file));
        n.key_origins.push_back(ko);
      }
      break;
  }
  return n;
}

static Node parse(const std::string& text, const std::string& label) {
  try {
    return convert(YAML::Load(text), label);
  } catch (const YAML::Exception& e) {
    throw ConfigError(Origin{label, e.mark.line + 1, e.mark.column + 1}, "", "", "YAML syntax error: " + e.msg,
                      "well-formed YAML");
  }
}

Node load_yaml_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(Origin{path, 0, 0}, "", "", "cannot open the file", "an existing, readable YAML file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), path);
}

Node load_yaml_string(const std::string& text, const std::string& file_label) { return parse(text, file_label); }

static void emit(YAML::Emitter& out, const Node& n) {
  switch (n.kind) {
    case Node::Kind::Null: out << YAML::Null; break;
    case Node::Kind::Scalar: out << n.scalar; break;
    case Node::Kind::Seq:
      out << YAML::BeginSeq;
      for (const auto& e : n.seq) emit(out, e);
      out << YAML::EndSeq;
      break;
    case Node::Kind::Map:
      out << YAML::BeginMap;
      for (const auto& [k, v] : n.map) { out << YAML::Key << k << YAML::Value; emit(out, v); }
      out << YAML::EndMap;
      break;
  }
}

std::string to_yaml(const Node& n) {
  YAML::Emitter out;
  emit(out, n);
  return out.c_str();
}

}  // namespace sluice
