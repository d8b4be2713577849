// Self-registration (SLUICE_REGISTER) and key bindings (config/binding.h).
#include <doctest/doctest.h>

#include <set>

#include "config/binding.h"
#include "config/node.h"
#include "hardware/spec.h"
#include "network/generators.h"
#include "test_support.h"

using namespace sluice;

namespace {

enum class Color { Red, Blue };
struct Inner {
  int width = 1;
};
struct Thing {
  int count = 7;
  int64_t big = 0;
  double ratio = 0;
  double bytes = 0;
  int64_t delay_ns = 0;
  bool on = false;
  std::string label = "unset";
  Color color = Color::Red;
  Inner inner;
};

Binding<Thing> thing_keys(Schema& s) {
  Binding<Thing> b(s);
  b.integer("count", &Thing::count, "a count").optional().range(1, 100);
  b.integer("big", &Thing::big, "a big count").def("5000000000");
  b.real("ratio", &Thing::ratio, "a ratio").def("0.5");
  b.quantity("bytes", UnitKind::Bytes, &Thing::bytes, "a size").def("1KiB");
  b.time_ns("delay", &Thing::delay_ns, "a delay").def("2ms");
  b.flag("on", &Thing::on, "a switch").def("true");
  b.text("label", &Thing::label, "a label").optional();
  b.choice<Color>("color", {{"red", Color::Red}, {"blue", Color::Blue}}, &Thing::color, "a colour").def("red");
  Binding<Inner> inner(s);
  inner.integer("width", &Inner::width, "an inner width").def("3");
  b.nest(&Thing::inner, inner);
  return b;
}

Params parse(const Schema& s, const std::string& yaml) { return parse_params(load_yaml_string(yaml, "t.yaml"), s, "thing"); }

}  // namespace

TEST_CASE("a binding fills every bound field from the parsed keys, in base units") {
  Schema s;
  const Binding<Thing> keys = thing_keys(s);
  CHECK(keys.size() == 9);
  CHECK(s.params().size() == 9);  // each key declared once, by its binding
  const Thing t = keys.make(parse(s, "{count: 42, bytes: 2MiB, delay: 1.5s, on: false, label: x, color: blue, width: 9}"));
  CHECK(t.count == 42);
  CHECK(t.big == 5000000000LL);
  CHECK(t.ratio == 0.5);
  CHECK(t.bytes == 2.0 * 1024 * 1024);
  CHECK(t.delay_ns == 1'500'000'000);
  CHECK(!t.on);
  CHECK(t.label == "x");
  CHECK(t.color == Color::Blue);
  CHECK(t.inner.width == 9);
}

TEST_CASE("an optional key that is absent leaves its field at the struct's default") {
  Schema s;
  const Binding<Thing> keys = thing_keys(s);
  const Thing t = keys.make(parse(s, "{}"));
  CHECK(t.count == 7);
  CHECK(t.label == "unset");
  CHECK(t.inner.width == 3);  // defaulted keys are filled
  CHECK(t.delay_ns == 2'000'000);
}

TEST_CASE("a bound key keeps its range check and its error position") {
  Schema s;
  const Binding<Thing> keys = thing_keys(s);
  CHECK_THROWS_WITH_AS(parse(s, "{count: 1000}"), doctest::Contains("count"), ConfigError);
  CHECK_THROWS_WITH_AS(parse(s, "{color: green}"), doctest::Contains("red"), ConfigError);
}

TEST_CASE("a seconds key fills a double field with the time in seconds") {
  struct Timed {
    double wait_s = -1;
    double later_s = -1;
  };
  Schema s;
  Binding<Timed> keys(s);
  keys.seconds("wait", &Timed::wait_s, "a wait").def("90min");
  keys.seconds("later", &Timed::later_s, "a later wait").optional();
  CHECK(s.find("wait")->type == ParamType::Quantity);
  CHECK(s.find("wait")->unit == UnitKind::Time);
  const Timed a = keys.make(parse(s, "{later: 250ms}"));
  CHECK(a.wait_s == 5400);
  CHECK(a.later_s == 0.25);
  CHECK(keys.make(parse(s, "{}")).later_s == -1);
}

TEST_CASE("every component registers itself: each category the built-ins need is filled") {
  const Registry& reg = testing::registry();
  // The linker drops nothing: one component per file, found by name.
  for (const auto& [cat, name] : std::vector<std::pair<std::string, std::string>>{
           {"scheduler", "vllm"}, {"scheduler", "orca"}, {"scheduler", "sarathi"}, {"scheduler", "static"}, {"scheduler", "vllm_chunked"},
           {"collective", "allreduce-nvls"},
           {"router", "round_robin"}, {"placement", "first-fit"}, {"placement", "best-fit"}, {"fault", "random"},
           {"fault", "trace"}, {"topology", "fat-tree"}, {"topology", "rail-optimized"}, {"topology", "torus-3d"},
           {"topology", "tpu-v4-pod"}, {"topology", "explicit"}, {"topology", "nvswitch-server"},
           {"collective", "allreduce-ring"}, {"workload", "serving"}, {"workload", "training"}, {"workload", "diffusion"},
           {"study", "world"}, {"study", "serving"}, {"study", "compare"}, {"bench", "serving"}, {"bench", "cost"},
           {"bench", "world"}, {"bench", "engine"}, {"bench", "network"}, {"bench", "terapipe"}}) {
    INFO(cat << " " << name);
    CHECK(reg.find(cat, name) != nullptr);
  }
  // Two registries of the built-ins hold the same components (the order never depends on link order).
  Registry again;
  register_builtin_components(again);
  CHECK(again.categories() == reg.categories());
  for (const auto& c : reg.categories()) CHECK(again.names(c) == reg.names(c));
}

TEST_CASE("a bound topology generator builds what its keys say") {
  const auto t = net::load_topology(load_yaml_string("{kind: fat-tree, servers: 4, gpus_per_server: 4, host_cpus: 1, nic_bandwidth: 100Gb/s}", "t.yaml"),
                                    testing::registry(), "topology");
  CHECK(t.devices().size() == 16);
  // host_cpus beyond the server's GPUs is still refused after binding
  CHECK_THROWS_WITH_AS(net::load_topology(load_yaml_string("{kind: nvswitch-server, gpus_per_server: 2, host_cpus: 3}", "t.yaml"),
                                          testing::registry(), "topology"),
                       doctest::Contains("host_cpus"), ConfigError);
}

TEST_CASE("the hardware and model catalogs fill their specs through their bindings") {
  const HardwareSpec h = load_hardware("h200");
  CHECK(h.hbm_physical_bytes > 100e9);
  CHECK(h.hbm_bytes <= h.hbm_physical_bytes);
  CHECK(h.interconnect_Bps == doctest::Approx(h.interconnect_links * h.interconnect_link_Bps));
  const ModelSpec m = load_model("llama3-8b");
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 128);
  CHECK(m.dtype_bytes == 2);
  const ModelSpec g = load_model("gpt3-13b");
  CHECK(g.layernorm);
  CHECK(g.learned_positions);
}
