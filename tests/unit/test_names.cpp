// Names that become file names and metric keys (config/names.h).
#include <doctest/doctest.h>

#include <string>

#include "config/names.h"

using namespace sluice;

TEST_CASE("names: a name that could leave its folder or split a metric key is refused, with the reason") {
  for (const char* ok : {"chat", "pretrain-2", "A_b-9", "8192-terapipe"}) {
    CHECK(name_problem(ok, NameUse::MetricKey).empty());
    CHECK(name_problem(ok, NameUse::FileStem).empty());
  }
  CHECK(name_problem("v1.2", NameUse::FileStem).empty());
  CHECK(name_problem("v1.2", NameUse::MetricKey) == "a name may not hold '.'");
  CHECK(name_problem("", NameUse::FileStem) == "a name may not be empty");
  CHECK(name_problem("..", NameUse::FileStem) == "a name must begin with a letter or a digit");
  CHECK(name_problem(".hidden", NameUse::FileStem) == "a name must begin with a letter or a digit");
  CHECK(name_problem("-rf", NameUse::FileStem) == "a name must begin with a letter or a digit");
  CHECK(name_problem("a/../../b", NameUse::FileStem) == "a name may not hold a path separator");
  CHECK(name_problem("a\\b", NameUse::FileStem) == "a name may not hold a path separator");
  CHECK(name_problem(std::string("a\0b", 3), NameUse::FileStem) == "a name may not hold the control character 0x00");
  CHECK(name_problem("a\nb", NameUse::MetricKey) == "a name may not hold the control character 0x0a");
  CHECK(name_problem("a b", NameUse::MetricKey) == "a name may not hold ' '");
  CHECK(name_problem(std::string(kMaxNameLength, 'x'), NameUse::MetricKey).empty());
  CHECK(name_problem(std::string(kMaxNameLength + 1, 'x'), NameUse::MetricKey) == "a name of 65 characters is too long");
  CHECK(name_rule(NameUse::FileStem).find("'.'") != std::string::npos);
  CHECK(name_rule(NameUse::MetricKey).find("'.'") == std::string::npos);
}

TEST_CASE("names: a name taken from a file name is made safe, never refused") {
  CHECK(sanitized_name("quickstart") == "quickstart");
  CHECK(sanitized_name("..") == "scenario");
  CHECK(sanitized_name("..odd") == "odd");
  CHECK(sanitized_name("-x.y") == "x.y");
  CHECK(sanitized_name("my scenario (v2)") == "my_scenario__v2_");
  CHECK(sanitized_name("") == "scenario");
  CHECK(sanitized_name(std::string(200, 'y')).size() == kMaxNameLength);
  for (const char* stem : {"..", ".", "-x", "a b", "\x01\x02", "日本", "x日本", "_a"})
    CHECK_MESSAGE(name_problem(sanitized_name(stem), NameUse::FileStem).empty(), stem);
}
