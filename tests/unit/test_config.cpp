// Units, schema validation, registry, overrides.
#include <doctest/doctest.h>

#include "run/scenario.h"
#include "config/schema.h"
#include "config/units.h"
#include "registry/registry.h"

using namespace sluice;

TEST_CASE("units parse at the boundary") {
  CHECK(parse_time("2us")->count_ns() == 2000);
  CHECK(parse_time("1.5ms")->count_ns() == 1'500'000);
  CHECK(parse_time("2000h")->count_ns() == 7'200'000'000'000'000LL);
  CHECK(parse_time("250ns")->count_ns() == 250);
  CHECK(*parse_quantity("400GB/s", UnitKind::Bandwidth) == doctest::Approx(400e9));
  CHECK(*parse_quantity("25Gb/s", UnitKind::Bandwidth) == doctest::Approx(25e9 / 8));
  CHECK(*parse_quantity("80GiB", UnitKind::Bytes) == doctest::Approx(80.0 * 1024 * 1024 * 1024));
  CHECK(*parse_quantity("12.8GB", UnitKind::Bytes) == doctest::Approx(12.8e9));
  CHECK(*parse_quantity("275TFLOP/s", UnitKind::FlopRate) == doctest::Approx(275e12));
  CHECK(*parse_quantity("20/s", UnitKind::Rate) == doctest::Approx(20));
  CHECK(*parse_quantity("120/min", UnitKind::Rate) == doctest::Approx(2));
  CHECK(*parse_quantity("$25000", UnitKind::Money) == doctest::Approx(25000));
  CHECK(*parse_quantity("1e3GB/s", UnitKind::Bandwidth) == doctest::Approx(1e12));
}

TEST_CASE("bad units are refused with a reason") {
  std::string why;
  CHECK_FALSE(parse_time("2", &why));
  CHECK(why.find("no unit") != std::string::npos);
  CHECK_FALSE(parse_time("2 parsecs", &why));
  CHECK(why.find("unknown time unit") != std::string::npos);
  CHECK_FALSE(parse_quantity("fast", UnitKind::Bandwidth, &why));
  CHECK(why.find("does not start with a number") != std::string::npos);
  CHECK_FALSE(parse_quantity("400GB", UnitKind::Bandwidth, &why));  // bytes, not a rate
  CHECK_FALSE(parse_time("1e30s", &why));
  CHECK(why.find("292 years") != std::string::npos);
  CHECK(valid_units(UnitKind::Bytes).find("GiB") != std::string::npos);
}

static Schema demo_schema() {
  Schema s;
  s.add("count", ParamType::Int, "how many").def("4").range(1, 64);
  s.quantity("latency", UnitKind::Time, "per hop").def("1us");
  s.enumeration("mode", {"fast", "slow"}, "how").def("fast");
  s.quantity("bw", UnitKind::Bandwidth, "link").positive();
  return s;
}

TEST_CASE("schema validation: defaults, types, ranges, unknown keys, required keys") {
  Schema s = demo_schema();
  auto ok = parse_params(load_yaml_string("bw: 400GB/s\ncount: 8\n", "t.yaml"), s, "net");
  CHECK(ok.integer("count") == 8);
  CHECK(ok.time("latency").count_ns() == 1000);
  CHECK(ok.str("mode") == "fast");
  CHECK(ok.real("bw") == doctest::Approx(400e9));
  CHECK(ok.given("count"));
  CHECK_FALSE(ok.given("mode"));

  auto err = [&](const std::string& yaml) -> std::string {
    try {
      parse_params(load_yaml_string(yaml, "t.yaml"), s, "net");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(err("bw: 1GB/s\ncount: 100\n").find("t.yaml:2:8: error: net.count = '100': out of range") != std::string::npos);
  CHECK(err("bw: 1GB/s\ncuont: 3\n").find("did you mean 'count'") != std::string::npos);
  CHECK(err("bw: 1GB/s\ncount: three\n").find("not an integer") != std::string::npos);
  CHECK(err("bw: 1GB/s\nmode: medium\n").find("valid: one of fast|slow") != std::string::npos);
  CHECK(err("count: 3\n").find("net.bw: required key is missing") != std::string::npos);
  CHECK(err("bw: 1GB\n").find("unknown bandwidth unit 'GB'") != std::string::npos);
  CHECK(err("bw: [1, 2]\n").find("expected a bandwidth but got a sequence") != std::string::npos);
  CHECK(err("bw: 0GB/s\n").find("out of range") != std::string::npos);
}

TEST_CASE("registry: components by name, kind dispatch, documented parameters") {
  Registry reg;
  reg.add("scheduler", "demo", "a demo", demo_schema(), std::function<int()>([] { return 7; }));
  reg.add("scheduler", "other", "another", Schema{});
  CHECK(reg.find("scheduler", "demo") != nullptr);
  CHECK(reg.find("scheduler", "nope") == nullptr);
  CHECK(reg.names("scheduler") == "demo, other");
  CHECK(reg.categories() == std::vector<std::string>{"scheduler"});
  CHECK_THROWS(reg.add("scheduler", "demo", "dup", Schema{}));
  auto p = reg.parse(load_yaml_string("kind: demo\nbw: 1GB/s\n", "r.yaml"), "scheduler", "scheduler");
  CHECK(p.info->name == "demo");
  CHECK(p.params.integer("count") == 4);
  CHECK(reg.factory<std::function<int()>>(*p.info)() == 7);
  try {
    reg.parse(load_yaml_string("kind: dmeo\n", "r.yaml"), "scheduler", "scheduler");
    FAIL("expected an error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("r.yaml:1:7: error: scheduler.kind = 'dmeo': unknown scheduler (did you mean 'demo'?)") != std::string::npos);
    CHECK(std::string(e.what()).find("one of: demo, other") != std::string::npos);
  }
  // Shorthand: a bare name selects the kind with default parameters.
  auto q = reg.parse(load_yaml_string("other", "r.yaml"), "scheduler", "scheduler");
  CHECK(q.info->name == "other");
}

TEST_CASE("--set overrides create, replace, and turn catalog names into mappings") {
  Node root = load_yaml_string("workload:\n  rate: 5/s\nhardware: h200\n", "s.yaml");
  apply_override(root, "workload.rate=20/s");
  apply_override(root, "seed=7");
  apply_override(root, "hardware.hbm_capacity=96GiB");
  CHECK(root.find("workload")->find("rate")->scalar == "20/s");
  CHECK(root.find("workload")->find("rate")->origin.file == "--set");
  CHECK(root.find("seed")->scalar == "7");
  CHECK(root.find("hardware")->find("catalog")->scalar == "h200");
  CHECK(root.find("hardware")->find("hbm_capacity")->scalar == "96GiB");
  CHECK_THROWS_AS(apply_override(root, "noequals"), ConfigError);
}

TEST_CASE("YAML errors carry file, line and column / duplicate keys are refused") {
  try {
    load_yaml_string("a: 1\nb: [1, 2\n", "bad.yaml");
    FAIL("expected error");
  } catch (const ConfigError& e) {
    CHECK(std::string(e.what()).find("bad.yaml:") == 0);
    CHECK(std::string(e.what()).find("YAML syntax error") != std::string::npos);
  }
  CHECK_THROWS_WITH_AS(load_yaml_string("a: 1\na: 2\n", "dup.yaml"), doctest::Contains("dup.yaml:2:1: error: a: this key appears twice"), ConfigError);
}
