// The calibration table reader and `sluice calibrate compare` logic, on small temp dirs.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "calibration/compare.h"
#include "calibration/csv_table.h"

namespace fs = std::filesystem;
using namespace sluice::calibration;

namespace {

// A fresh directory under the system temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("sluice_test_calibration_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& file, const std::string& text) const { std::ofstream(path / file) << text; }
};

}  // namespace

TEST_CASE("calibration: csv tables parse, reject ragged rows, and round-trip") {
  const auto t = parse_csv("a,b,ms\n1,x,0.5\n\n2,y,1.5\n", "t.csv");
  CHECK(t.columns == std::vector<std::string>{"a", "b", "ms"});
  REQUIRE(t.rows.size() == 2);
  CHECK(t.rows[1][1] == "y");
  CHECK(t.column_index("ms") == 2);
  CHECK(t.column_index("nope") == -1);
  CHECK(to_csv(t) == "a,b,ms\n1,x,0.5\n2,y,1.5\n");
  CHECK_THROWS_WITH_AS(parse_csv("a,b\n1,2,3\n", "bad.csv"), doctest::Contains("bad.csv:2"), TableError);
  CHECK_THROWS_AS(parse_csv("", "empty.csv"), TableError);
  // A UTF-8 byte-order mark before the header (spreadsheets write one) is not part of a name.
  const auto bom = parse_csv("\xEF\xBB\xBF" "a,b,ms\n1,x,0.5\n", "bom.csv");
  CHECK(bom.columns == std::vector<std::string>{"a", "b", "ms"});
  CHECK_THROWS_AS(read_csv("/nonexistent/dir/x.csv"), TableError);
}

TEST_CASE("calibration: compare matches rows by key columns and reports ratios with a geometric mean") {
  TempDir a("a"), b("b");
  a.write("attention_prefill.csv",
          "heads,kv_heads,head_dim,batch,seq,causal,ms\n"
          "32,8,128,1,128,True,0.02\n"
          "32,8,128,1,512,True,0.08\n"
          "32,8,128,1,512,False,0.5\n");
  // B lists rows in another order, spells a number as 128.0, and has one row A lacks.
  b.write("attention_prefill.csv",
          "heads,kv_heads,head_dim,batch,seq,causal,ms\n"
          "32,8,128,1,512,True,0.02\n"
          "32,8,128.0,1,128,True,0.01\n"
          "32,8,128,1,2048,True,1.0\n");
  a.write("d2h.csv", "batch,mode,us_median,us_p99\n1,pinned,10,20\n");
  b.write("d2h.csv", "batch,mode,us_median,us_p99\n1,pinned,5,40\n");
  a.write("elementwise.csv", "op,tokens,hidden,ffn,heads,head_dim,ms,min_bytes\nrope,1,4096,11008,32,128,0.01,16384\n");
  b.write("elementwise.csv", "op,tokens,hidden,ffn,heads,head_dim,ms,min_bytes\nrope,1,4096,11008,32,128,0.04,32768\n");
  a.write("gemm.csv", "op,M,K,N,ms\nx,1,2,3,0.1\n");

  const auto cmp = compare_dirs(a.path, b.path);
  REQUIRE(cmp.files.size() == 3);
  CHECK(cmp.files_only_in_a == std::vector<std::string>{"gemm.csv"});
  CHECK(cmp.files_only_in_b.empty());

  const auto& pf = cmp.files[0];
  CHECK(pf.file == "attention_prefill.csv");
  CHECK(pf.key_columns == std::vector<std::string>{"heads", "kv_heads", "head_dim", "batch", "seq", "causal"});
  REQUIRE(pf.rows.size() == 2);
  CHECK(pf.rows[0].a[0] == doctest::Approx(0.02));
  CHECK(pf.rows[0].b[0] == doctest::Approx(0.01));
  CHECK(pf.rows[1].a[0] / pf.rows[1].b[0] == doctest::Approx(4.0));
  CHECK(pf.only_in_a.size() == 1);
  CHECK(pf.only_in_b.size() == 1);
  CHECK(pf.only_in_a[0].find("causal=false") != std::string::npos);
  CHECK(pf.geomean_points[0] == 2);
  CHECK(pf.geomean_ratio[0] == doctest::Approx(std::sqrt(2.0 * 4.0)));

  const auto& d2h = cmp.files[1];
  CHECK(d2h.measured == std::vector<std::string>{"us_median", "us_p99"});
  CHECK(d2h.geomean_ratio[0] == doctest::Approx(2.0));
  CHECK(d2h.geomean_ratio[1] == doctest::Approx(0.5));

  // min_bytes is derived: it differs between A and B but the row still matches.
  const auto& ew = cmp.files[2];
  REQUIRE(ew.rows.size() == 1);
  CHECK(ew.geomean_ratio[0] == doctest::Approx(0.25));

  std::ostringstream out;
  print_comparison(out, cmp);
  CHECK(out.str().find("geomean ms A/B = 2.828 over 2 points") != std::string::npos);
  CHECK(out.str().find("only in A: gemm.csv") != std::string::npos);
}

TEST_CASE("calibration: compare fails clearly on a missing directory, mismatched columns or repeated keys") {
  TempDir a("ea"), b("eb");
  a.write("gemm.csv", "op,M,K,N,ms\nx,1,2,3,0.1\n");
  CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path / "missing"), doctest::Contains("no such tables directory"),
                       TableError);
  CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path), doctest::Contains("holds no .csv table"), TableError);
  b.write("gemm.csv", "op,M,K,ms\nx,1,2,0.1\n");
  CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path), doctest::Contains("columns differ"), TableError);
  b.write("gemm.csv", "op,M,K,N,ms\nx,1,2,3,0.1\nx,1,2,3.0,0.2\n");
  CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path), doctest::Contains("appears twice"), TableError);
  b.write("gemm.csv", "op,M,K,N,ms\nx,1,2,3,fast\n");
  CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path), doctest::Contains("not a number"), TableError);
  // strtod reads these; a measured time is none of them (they printed nan geomeans).
  for (const char* v : {"nan", "inf", "0x1p-3"}) {
    CAPTURE(v);
    b.write("gemm.csv", std::string("op,M,K,N,ms\nx,1,2,3,") + v + "\n");
    CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path), doctest::Contains("not a number"), TableError);
  }
  b.write("gemm.csv", "op,M,K,N,ms\nx,1,2,3,-0.1\n");
  CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path), doctest::Contains("negative"), TableError);
  b.write("other.csv", "op,ms\nx,1\n");
  fs::remove(b.path / "gemm.csv");
  CHECK_THROWS_WITH_AS(compare_dirs(a.path, b.path), doctest::Contains("no table file in common"), TableError);
}
