#include "util/knobs.hpp"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loom {
namespace {

bool integer(const std::string& v) {
  if (v.empty()) return false;
  char* end = nullptr;
  (void)std::strtoll(v.c_str(), &end, 10);
  return end && *end == '\0' && end != v.c_str();
}

// v is a word of doc: not inside a longer word ("off" in "off:", not in "offset").
bool doc_names(const char* doc, const std::string& v) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (const char* p = std::strstr(doc, v.c_str()); p; p = std::strstr(p + 1, v.c_str()))
    if ((p == doc || !word(p[-1])) && !word(p[v.size()])) return true;
  return false;
}

// A setting whose default is a number takes a number, nothing (empty), or a
// word its documentation names (off, all, auto, force); an on-off one
// (default 0 or 1) also the words knob_true reads and their opposites.
// Anything else would read as 0 where the code parses numbers (atoll):
// the default stands instead, and the problem is said at MPI_Init.
bool acceptable(const std::string& v, const char* def, const char* doc) {
  if (!integer(def) || v.empty() || integer(v) || doc_names(doc, v)) return true;
  const bool on_off = std::strcmp(def, "0") == 0 || std::strcmp(def, "1") == 0;
  return on_off && (knob_true(v) || v == "n" || v == "no" || v == "false" || v == "off");
}

Knobs read_env(std::vector<std::string>* problems) {
  static const char* refused =
      " is neither a number nor a word it takes (loom-inspect --config): "
      "its default is used (";
  Knobs k;
#define LOOM_KNOB_READ(field, env, def, doc)                                       \
  do {                                                                             \
    const char* v = std::getenv(env);                                              \
    k.field = v ? v : def;                                                         \
    if (!acceptable(k.field, def, doc)) {                                          \
      problems->push_back(std::string(env) + "=" + k.field + refused + def + ")"); \
      k.field = def;                                                               \
    }                                                                              \
  } while (0);
  LOOM_KNOBS(LOOM_KNOB_READ)
#undef LOOM_KNOB_READ
  return k;
}

std::mutex g_mu;
Knobs* g_knobs = nullptr;  // leaked on purpose: read during static teardown too
std::vector<std::string> g_problems;

}  // namespace

const Knobs& knobs() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_knobs) g_knobs = new Knobs(read_env(&g_problems));
  return *g_knobs;
}

void knobs_reload() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_knobs) g_knobs = new Knobs();
  g_problems.clear();
  *g_knobs = read_env(&g_problems);
}

std::vector<std::string> knob_problems() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_problems;
}

std::vector<KnobInfo> knob_table() {
  const Knobs& k = knobs();
  std::vector<KnobInfo> t;
#define LOOM_KNOB_ROW(field, env, def, doc) t.push_back({env, def, doc, k.field});
  LOOM_KNOBS(LOOM_KNOB_ROW)
#undef LOOM_KNOB_ROW
  return t;
}

bool knob_true(const std::string& v) {
  return v == "1" || v == "y" || v == "yes" || v == "true" || v == "on";
}

}  // namespace loom
