// Fault process `trace`: failures and repairs at exactly the times a trace gives, one event a
// line (`TIME CLASS:NAME down|up`, e.g. `90s switch:spine0 down`; `#` starts a comment), from
// a file or inline in the scenario. Every line is checked before the run.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "config/schema.h"
#include "registry/registry.h"
#include "world/world.h"

namespace sluice::faults {

namespace {

struct TraceEvent {
  int64_t at_ns;
  FaultClass cls;
  int index;
  bool down;
};

class TraceFaults final : public FaultProcess, public EventHandler {
 public:
  TraceFaults(std::string name, std::vector<TraceEvent> events) : name_(std::move(name)), events_(std::move(events)) {}
  void start(World& w) override {
    world_ = &w;
    for (size_t i = 0; i < events_.size(); ++i)
      w.engine().schedule_at(SimTime::ns(events_[i].at_ns), Priority::Fault, this, 0, static_cast<uint32_t>(i));
  }
  std::string describe() const override { return fmt::format("{}: {} events from a trace", name_, events_.size()); }
  void on_event(Engine&, uint32_t, uint32_t arg) override {
    const TraceEvent& e = events_[arg];
    // This trace holds a component down at most once: a repeated `down` (or an `up` of a
    // component it did not fail) changes nothing.
    const auto key = std::make_pair(static_cast<int>(e.cls), e.index);
    const bool is_down = down_.count(key) > 0;
    if (e.down == is_down) return;
    if (e.down) down_.insert(key);
    else down_.erase(key);
    world_->set_component(e.cls, e.index, e.down, name_);
  }

 private:
  std::string name_;
  std::vector<TraceEvent> events_;
  std::set<std::pair<int, int>> down_;
  World* world_ = nullptr;
};

// Parses one line; throws ConfigError at `at`.
std::optional<TraceEvent> parse_line(std::string line, World& w, const Origin& at, const std::string& path) {
  if (const auto h = line.find('#'); h != std::string::npos) line.resize(h);
  std::istringstream in(line);
  std::string t, comp, state, extra;
  if (!(in >> t)) return std::nullopt;  // blank or comment
  auto bad = [&](const std::string& problem, const std::string& valid) -> ConfigError { return ConfigError(at, path, line, problem, valid); };
  if (!(in >> comp >> state) || (in >> extra)) throw bad("expected three fields", "TIME CLASS:NAME down|up, e.g. 90s switch:spine0 down");
  std::string why;
  const auto ns = parse_quantity(t, UnitKind::Time, &why);
  if (!ns || *ns < 0) throw bad(fmt::format("'{}' is not a time: {}", t, why.empty() ? "negative" : why), "a time such as 90s, 1.5h or 250ms");
  const auto colon = comp.find(':');
  if (colon == std::string::npos) throw bad(fmt::format("'{}' names no class", comp), fmt::format("CLASS:NAME with CLASS one of {}", fault_class_list()));
  const auto cls = parse_fault_class(comp.substr(0, colon));
  if (!cls) throw bad(fmt::format("'{}' is not a component class", comp.substr(0, colon)), fault_class_list());
  const std::string name = comp.substr(colon + 1);
  const int idx = w.find_component(*cls, name);
  if (idx < 0) {
    const auto& all = w.components(*cls);
    throw bad(fmt::format("the cluster has no {} named '{}'", fault_class_name(*cls), name),
              all.empty() ? fmt::format("the cluster has no {} at all", fault_class_name(*cls))
                          : fmt::format("one of {} ... {} ({} of them)", all.front().name, all.back().name, all.size()));
  }
  if (state != "down" && state != "up") throw bad(fmt::format("'{}' is not a state", state), "down or up");
  if (*ns > 9e18) throw bad("later than the simulator can represent (about 292 years)", "a smaller time");
  return TraceEvent{static_cast<int64_t>(*ns + 0.5), *cls, idx, state == "down"};
}

}  // namespace

SLUICE_REGISTER(component, trace_faults) {
  Schema s;
  s.add("name", ParamType::String, "the process's name").def("trace");
  s.add("file", ParamType::String, "a fault trace: one `TIME CLASS:NAME down|up` a line (# comments)").optional();
  s.add("events", ParamType::List, "the same lines inline, e.g. [\"90s switch:spine0 down\", \"300s switch:spine0 up\"]").optional();
  reg.add("fault", "trace", "failures and repairs at exactly the times a trace gives (`TIME CLASS:NAME down|up` a line)", std::move(s),
          FaultProcessFactory([](const Params& p, World& w, const std::string& name) -> std::unique_ptr<FaultProcess> {
            if (p.has("file") == p.has("events")) p.fail(p.has("file") ? "events" : "file", "give a trace file or inline events", "exactly one of file, events");
            std::vector<TraceEvent> evs;
            if (p.has("file")) {
              const auto found = find_input_path(p.str("file"));
              if (!found) p.fail("file", "no such file", "a path relative to the working directory or the sluice root");
              std::ifstream in(*found);
              std::string line;
              int ln = 0;
              while (std::getline(in, line)) {
                ++ln;
                if (evs.size() > 1000000) p.fail("file", "more than a million events", "a shorter trace");
                if (auto e = parse_line(line, w, Origin{*found, ln, 1}, p.path() + ".file")) evs.push_back(*e);
              }
            } else {
              const Node& n = p.node("events");
              if (!n.is_seq()) p.fail("events", "expected a list of lines", "e.g. [\"90s node:node1 down\"]");
              for (size_t i = 0; i < n.seq.size(); ++i) {
                const Node& line = n.seq[i];
                const std::string at = fmt::format("{}.events[{}]", p.path(), i);
                // A mapping ({at: 1s, node: node0}) is no trace line: it would read as a blank one.
                if (!line.is_scalar())
                  throw ConfigError(line.origin, at, line.brief(), fmt::format("expected a trace line but got a {}", line.kind_name()),
                                    "a string `TIME CLASS:NAME down|up`, e.g. \"90s node:node1 down\"");
                if (auto e = parse_line(line.scalar, w, line.origin, at)) evs.push_back(*e);
              }
            }
            // A trace that can never fail anything is a mistake, not a fault-free run.
            if (evs.empty())
              p.fail(p.has("file") ? "file" : "events", "the trace holds no event (only blank lines and comments)",
                     "at least one `TIME CLASS:NAME down|up` line");
            std::stable_sort(evs.begin(), evs.end(), [](const TraceEvent& a, const TraceEvent& b) { return a.at_ns < b.at_ns; });
            return std::make_unique<TraceFaults>(p.given("name") ? p.str("name") : name, std::move(evs));
          }));
}

}  // namespace sluice::faults
