#include "util/knobs.hpp"

#include <cstdlib>
#include <mutex>

namespace loom {
namespace {

Knobs read_env() {
  Knobs k;
#define LOOM_KNOB_READ(field, env, def, doc) \
  do {                                       \
    const char* v = std::getenv(env);        \
    k.field = v ? v : def;                   \
  } while (0);
  LOOM_KNOBS(LOOM_KNOB_READ)
#undef LOOM_KNOB_READ
  return k;
}

std::mutex g_mu;
Knobs* g_knobs = nullptr;  // leaked on purpose: read during static teardown too

}  // namespace

const Knobs& knobs() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_knobs) g_knobs = new Knobs(read_env());
  return *g_knobs;
}

void knobs_reload() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_knobs) g_knobs = new Knobs();
  *g_knobs = read_env();
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
