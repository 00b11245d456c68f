// LOOM_* settings read from the environment (util/knobs.hpp): a number's
// place holding another word is refused, said, and the default stands;
// numbers, the values a setting's row names and on-off words pass.
#include "util/knobs.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace loom {
namespace {

// Sets one variable for a scope; puts back what was there (or nothing).
class Knob {
 public:
  Knob(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
    knobs_reload();
  }
  ~Knob() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
    knobs_reload();
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::optional<std::string> refusal(const std::string& name) {
  for (const std::string& p : knob_problems())
    if (p.rfind(name + "=", 0) == 0) return p;
  return std::nullopt;
}

TEST(Knobs, ANumberSettingRefusesAWordAndKeepsItsDefault) {
  Knob k("LOOM_BATCH_FLUSH", "lots");
  EXPECT_EQ(knobs().batch_flush, "64");
  auto r = refusal("LOOM_BATCH_FLUSH");
  ASSERT_TRUE(r);
  EXPECT_NE(r->find("its default is used (64)"), std::string::npos) << *r;
}

TEST(Knobs, SuffixesExponentsAndHexAreRefused) {
  for (const char* v : {"64k", "1M", "1e6", "0x40", "12 MiB"}) {
    Knob k("LOOM_STREAM_PINNED_MAX", v);
    EXPECT_TRUE(refusal("LOOM_STREAM_PINNED_MAX")) << v;
    EXPECT_EQ(knobs().stream_pinned_max, "1048576") << v;
  }
  Knob k("LOOM_PIPELINE_CHUNK", "1M");  // a number whose default is empty (off)
  EXPECT_TRUE(refusal("LOOM_PIPELINE_CHUNK"));
  EXPECT_EQ(knobs().pipeline_chunk, "");
}

TEST(Knobs, NumbersAndNamedValuesPass) {
  const std::pair<const char*, const char*> ok[] = {
      {"LOOM_STREAM_PINNED_MAX", "off"},  // "off: always pinned"
      {"LOOM_STREAM_PINNED_MAX", "4096\n"},
      {"LOOM_COLL_LEND_MIN", "-1"},
      {"LOOM_ZCOPY_TYPES", "all"},
      {"LOOM_ZCOPY_MIN", "off"},  // "off or negative: never"
      {"LOOM_ZCOPY_MIN", "-1"},
      {"LOOM_NCCL_P2P", "force"},
      {"LOOM_MPIS_ZCOPY_MIN", "off"}};
  for (const auto& [name, v] : ok) {
    Knob k(name, v);
    EXPECT_FALSE(refusal(name)) << name << "=" << v;
  }
}

TEST(Knobs, WordsARowDoesNotOfferAreRefused) {
  const std::pair<const char*, const char*> bad[] = {
      {"LOOM_ZCOPY_TYPES", "al"},         // a piece of a named value
      {"LOOM_COLL_NODE_MIN", "auto"},     // its row opens with "auto:", which is no value
      {"LOOM_MPIS_ZCOPY_MIN", "yes"},     // a size, not on-off, though its default is 0
      {"LOOM_TEST_PACK_DELAY_US", "on"},  // the same
      {"LOOM_BATCH_FLUSH", "packs"}};     // a word of its row, but not a value
  for (const auto& [name, v] : bad) {
    Knob k(name, v);
    EXPECT_TRUE(refusal(name)) << name << "=" << v;
  }
}

TEST(Knobs, OnOffSettingsTakeTheUsualWords) {
  for (const char* v : {"yes", "on", "true", "no", "off", "false"}) {
    Knob k("LOOM_STATS", v);
    EXPECT_FALSE(refusal("LOOM_STATS")) << v;
    EXPECT_EQ(knobs().stats, v);
  }
  Knob k("LOOM_STATS", "maybe");
  EXPECT_TRUE(refusal("LOOM_STATS"));
  EXPECT_EQ(knobs().stats, "0");
}

TEST(Knobs, AnEmptyValueIsTheDefault) {
  Knob k("LOOM_COLL_PIPELINE_CHUNK", "");  // atoll("") was a 0-byte chunk, then 1
  EXPECT_EQ(knobs().coll_pipeline_chunk, "1048576");
  EXPECT_FALSE(refusal("LOOM_COLL_PIPELINE_CHUNK"));
}

TEST(Knobs, DefaultsAreNeverRefused) {
  knobs_reload();
  for (const KnobInfo& k : knob_table()) {
    if (!std::getenv(k.env)) {
      EXPECT_FALSE(refusal(k.env)) << k.env << " unset";
    }
  }
}

TEST(Knobs, WordSettingsAreNotChecked) {
  Knob k("LOOM_METHOD", "anything");  // its own parser says what it makes of it
  EXPECT_FALSE(refusal("LOOM_METHOD"));
  EXPECT_EQ(knobs().method, "anything");
}

}  // namespace
}  // namespace loom
