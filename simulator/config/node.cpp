#include "config/node.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string_view>
#include <unordered_set>

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
  if (s.size() > 60) {  // by resize and append: GCC 12's -Warray-bounds misfires on substr() + "..."
    s.resize(57);
    s += "...";
  }
  return s;
}

namespace {
// Bounds on what one YAML text may expand to. yaml-cpp shares an aliased node instead of
// copying it, so a few hundred bytes of nested aliases (a "billion laughs") describe an
// astronomically large tree; our own tree copies every alias, so its size is counted and
// capped here, before it is allocated. No scenario or catalog entry comes near these.
constexpr size_t kMaxYamlNodes = 200'000;
constexpr int kMaxYamlDepth = 64;

struct Budget {
  size_t nodes = 0;
};

Node convert(const YAML::Node& y, const std::string& file, Budget& budget, int depth) {
  Node n;
  const auto m = y.Mark();
  n.origin = Origin{file, m.line >= 0 ? m.line + 1 : 0, m.column >= 0 ? m.column + 1 : 0};
  if (++budget.nodes > kMaxYamlNodes)
    throw ConfigError(n.origin, "", "",
                      fmt::format("the YAML expands to more than {} values (aliases are copied wherever they are used)",
                                  kMaxYamlNodes),
                      "a scenario of ordinary size, without aliases nested inside aliases");
  if (depth > kMaxYamlDepth)
    throw ConfigError(n.origin, "", "", fmt::format("the YAML nests more than {} levels deep", kMaxYamlDepth),
                      "mappings and lists nested at most a few levels");
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
      for (const auto& e : y) n.seq.push_back(convert(e, file, budget, depth + 1));
      break;
    case YAML::NodeType::Map: {
      n.kind = Node::Kind::Map;
      std::unordered_set<std::string> seen;  // a linear find per key made 100k keys quadratic
      for (const auto& kv : y) {
        const auto km = kv.first.Mark();
        Origin ko{file, km.line + 1, km.column + 1};
        if (!kv.first.IsScalar())
          throw ConfigError(ko, "", "", "mapping keys must be plain names", "a name such as 'seed'");
        const std::string key = kv.first.Scalar();
        if (!seen.insert(key).second)
          throw ConfigError(ko, key, "", "this key appears twice in the same mapping", "each key once");
        n.map.emplace_back(key, convert(kv.second, file, budget, depth + 1));
        n.key_origins.push_back(ko);
      }
      break;
    }
  }
  return n;
}
}  // namespace

static Node parse(const std::string& text, const std::string& label) {
  try {
    // A '---' line after content starts a second document, which YAML::Load would silently
    // ignore. (Found by scanning lines: YAML::LoadAll loops without end on some malformed
    // input, e.g. "  ,2T1,[]\n[,2T1,[]", found by fuzzing.)
    bool content = false;
    int line_no = 0;
    for (size_t at = 0; at <= text.size();) {
      const size_t nl = std::min(text.find('\n', at), text.size());
      const std::string_view line(text.data() + at, nl - at);
      ++line_no;
      const bool marker = line.substr(0, 3) == "---" && (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
      if (marker && content)
        throw ConfigError(Origin{label, line_no, 1}, "", "", "a second YAML document (after '---'); sluice reads one document per file",
                          "one document: remove the '---' separator or split the file");
      const size_t first = line.find_first_not_of(" \t\r");
      if (!marker && first != std::string_view::npos && line[first] != '#' && line[first] != '%') content = true;
      at = nl + 1;
    }
    Budget budget;
    return convert(YAML::Load(text), label, budget, 0);
  } catch (const YAML::Exception& e) {
    throw ConfigError(Origin{label, e.mark.line + 1, e.mark.column + 1}, "", "", "YAML syntax error: " + e.msg,
                      "well-formed YAML");
  }
}

Node load_yaml_file(const std::string& path) {
  // Only a regular file of bounded size is read: a device (/dev/zero), a FIFO or a directory
  // would otherwise be read until memory runs out, or block forever.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw ConfigError(Origin{path, 0, 0}, "", "", "cannot open the file", "an existing, readable YAML file");
  if (!S_ISREG(st.st_mode))
    throw ConfigError(Origin{path, 0, 0}, "", "", "not a regular file (a directory, device or pipe)",
                      "a YAML file");
  if (st.st_size > static_cast<off_t>(kMaxYamlFileBytes))
    throw ConfigError(Origin{path, 0, 0}, "", "",
                      fmt::format("the file is {} bytes; a YAML input may be at most {} bytes", st.st_size, kMaxYamlFileBytes),
                      "a scenario or catalog file of ordinary size");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(Origin{path, 0, 0}, "", "", "cannot open the file", "an existing, readable YAML file");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return parse(text, path);
}

Node load_yaml_string(const std::string& text, const std::string& file_label) {
  if (text.size() > kMaxYamlFileBytes)
    throw ConfigError(Origin{file_label, 0, 0}, "", "", fmt::format("the YAML text is longer than {} bytes", kMaxYamlFileBytes),
                      "a scenario of ordinary size");
  return parse(text, file_label);
}

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

std::vector<std::string> string_list(const Node& n, const std::string& path, const std::string& example, bool scalar_ok) {
  if (scalar_ok && n.is_scalar()) return {n.scalar};
  if (!n.is_seq()) throw ConfigError(n.origin, path, n.brief(), "expected a list of strings", example);
  std::vector<std::string> out;
  for (const auto& e : n.seq) {
    if (!e.is_scalar()) throw ConfigError(e.origin, path, e.brief(), "expected a string", "a list of strings");
    out.push_back(e.scalar);
  }
  return out;
}

}  // namespace sluice
