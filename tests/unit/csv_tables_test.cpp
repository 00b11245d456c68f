// The tools' Markdown tables as CSV (tools/cli.hpp, loom-bench --csv): what
// tools/plot_results.py reads must be what the table printed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "cli.hpp"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class CsvTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "loom_csv_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const char* f : {"/t.csv", "/t-2.csv", "/t-3.csv"}) std::remove((dir_ + f).c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(CsvTablesTest, RowsHeadersQuotesAndRatios) {
  {
    loom::tools::cli::CsvTables t;
    t.open((dir_ + "/t.csv").c_str());
    t.line("# a title, not a table");
    t.line("| type | count | ratio |");
    t.line("|---|---:|---:|");
    t.line("| 2D 8 B blocks | 8 | 1.50x |");
    t.line("| a, b \"c\" | 16 | x |");
    t.line("");
    t.line("| n | us |");
    t.line("| ---: | ---: |");
    t.line("| 64 | 12.5 |");
  }
  EXPECT_EQ(slurp(dir_ + "/t.csv"),
            "type,count,ratio\n2D 8 B blocks,8,1.50\n\"a, b \"\"c\"\"\",16,x\n");
  EXPECT_EQ(slurp(dir_ + "/t-2.csv"), "n,us\n64,12.5\n");
  EXPECT_EQ(slurp(dir_ + "/t-3.csv"), "");  // no third table, no file
}

TEST_F(CsvTablesTest, TheFirstFileIsOpenedAtOnce) {
  loom::tools::cli::CsvTables t;
  EXPECT_FALSE(t.open((dir_ + "/no-such-folder/t.csv").c_str()));  // before any measuring
  loom::tools::cli::CsvTables u;
  ASSERT_TRUE(u.open((dir_ + "/t.csv").c_str()));
  EXPECT_TRUE(std::ifstream(dir_ + "/t.csv").good());
  EXPECT_FALSE(std::ifstream(dir_ + "/t-2.csv").good());
}

TEST_F(CsvTablesTest, NothingWithoutAName) {
  loom::tools::cli::CsvTables t;
  t.line("| a | b |");
  t.line("|---|---|");
  t.line("| 1 | 2 |");
  EXPECT_EQ(slurp(dir_ + "/t.csv"), "");
}

}  // namespace
