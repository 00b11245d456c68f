#include "util/knobs.hpp"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loom {
namespace {

bool integer(const std::string& v) {
  char* end = nullptr;
  (void)std::strtoll(v.c_str(), &end, 10);
  if (!end || end == v.c_str()) return false;
  while (std::isspace(static_cast<unsigned char>(*end))) ++end;  // "4096\n" from a file
  return *end == '\0';
}

// v is a value doc names: a word of it, past its first, followed by ':' or
// " or " ("off: always pinned", "off or negative: never"). The opening word
// says when the setting applies ("auto: smallest collective ..."), not a value.
bool doc_names(const char* doc, const std::string& v) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  if (v.empty() || word(v[0]) == false) return false;
  for (const char* p = std::strstr(doc, v.c_str()); p; p = std::strstr(p + 1, v.c_str())) {
    const char* after = p + v.size();
    if (p == doc || word(p[-1]) || word(*after)) continue;
    if (*after == ':' || std::strncmp(after, " or ", 4) == 0) return true;
  }
  return false;
}

// Settings that are numbers: those whose default is one, and these two,
// whose default (empty) means "off" or "decided at MPI_Init".
bool numeric(const char* env, const char* def) {
  return integer(def) || std::strcmp(env, "LOOM_PIPELINE_CHUNK") == 0 ||
         std::strcmp(env, "LOOM_ZCOPY_MIN") == 0;
}

// An on-off setting: default 0 or 1, and not a count that may be 0 or 1.
bool on_off(const char* env, const char* def) {
  if (std::strcmp(def, "0") != 0 && std::strcmp(def, "1") != 0) return false;
  for (const char* unit : {"_MIN", "_MAX", "_US", "_CHUNK"})
    if (std::strstr(env, unit)) return false;
  return true;
}

// A number's setting takes a number or a value its documentation names
// (off, all, force); an on-off one also the words knob_true reads and their
// opposites. Anything else would read as a wrong number where the code
// parses it (atoll: "1M" is 1, "auto" 0): refused, the default stands, and
// MPI_Init says so.
bool acceptable(const std::string& v, const char* env, const char* def, const char* doc) {
  if (v == def || !numeric(env, def) || integer(v) || doc_names(doc, v)) return true;
  return on_off(env, def) && (knob_true(v) || v == "n" || v == "no" || v == "false" || v == "off");
}

Knobs read_env(std::vector<std::string>* problems) {
  static const char* refused =
      " is neither a number nor a word it takes (loom-inspect --config): "
      "its default is used (";
  Knobs k;
#define LOOM_KNOB_READ(field, env, def, doc)                                                    \
  do {                                                                                          \
    const char* v = std::getenv(env);                                                           \
    k.field = v && *v ? v : def; /* set but empty: as unset */                                  \
    if (!acceptable(k.field, env, def, doc)) {                                                  \
      problems->push_back(std::string(env) + "=" + k.field + refused + (*def ? def : "unset") + \
                          ")");                                                                 \
      k.field = def;                                                                            \
    }                                                                                           \
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
