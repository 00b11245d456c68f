// LOOM_* settings read from the environment (util/knobs.hpp): a number's
// place holding another word is refused, said once, and the default stands;
// numbers, documented words and on-off words pass.
#include "util/knobs.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace loom {
namespace {

class Knob {
 public:
  Knob(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~Knob() {
    unsetenv(name_);
    knobs_reload();
  }

 private:
  const char* name_;
};

bool refused(const std::string& name) {
  for (const std::string& p : knob_problems())
    if (p.rfind(name + "=", 0) == 0) return true;
  return false;
}

TEST(Knobs, ANumberSettingRefusesAWordAndKeepsItsDefault) {
  Knob k("LOOM_BATCH_FLUSH", "lots");
  knobs_reload();
  EXPECT_EQ(knobs().batch_flush, "64");
  ASSERT_TRUE(refused("LOOM_BATCH_FLUSH"));
  EXPECT_NE(knob_problems()[0].find("its default is used (64)"), std::string::npos)
      << knob_problems()[0];
}

TEST(Knobs, TrailingJunkAndExponentsAreRefused) {
  for (const char* v : {"64k", "1e6", "12 ", "0x40"}) {
    Knob k("LOOM_STREAM_PINNED_MAX", v);
    knobs_reload();
    EXPECT_TRUE(refused("LOOM_STREAM_PINNED_MAX")) << v;
    EXPECT_EQ(knobs().stream_pinned_max, "1048576") << v;
  }
}

TEST(Knobs, NumbersAndDocumentedWordsPass) {
  {
    Knob k("LOOM_STREAM_PINNED_MAX", "off");  // its documentation names "off"
    knobs_reload();
    EXPECT_FALSE(refused("LOOM_STREAM_PINNED_MAX"));
    EXPECT_EQ(knobs().stream_pinned_max, "off");
  }
  {
    Knob k("LOOM_COLL_LEND_MIN", "-1");
    knobs_reload();
    EXPECT_FALSE(refused("LOOM_COLL_LEND_MIN"));
    EXPECT_EQ(knobs().coll_lend_min, "-1");
  }
  {
    Knob k("LOOM_ZCOPY_TYPES", "all");
    knobs_reload();
    EXPECT_FALSE(refused("LOOM_ZCOPY_TYPES"));
  }
  {
    Knob k("LOOM_ZCOPY_TYPES", "al");  // a piece of a documented word is not one
    knobs_reload();
    EXPECT_TRUE(refused("LOOM_ZCOPY_TYPES"));
  }
}

TEST(Knobs, OnOffSettingsTakeTheUsualWords) {
  for (const char* v : {"yes", "on", "true", "no", "off", "false"}) {
    Knob k("LOOM_STATS", v);
    knobs_reload();
    EXPECT_FALSE(refused("LOOM_STATS")) << v;
    EXPECT_EQ(knobs().stats, v);
  }
  Knob k("LOOM_STATS", "maybe");
  knobs_reload();
  EXPECT_TRUE(refused("LOOM_STATS"));
  EXPECT_EQ(knobs().stats, "0");
}

TEST(Knobs, WordSettingsAreNotChecked) {
  Knob k("LOOM_METHOD", "anything");  // its own parser says what it makes of it
  knobs_reload();
  EXPECT_TRUE(knob_problems().empty());
  EXPECT_EQ(knobs().method, "anything");
}

}  // namespace
}  // namespace loom
