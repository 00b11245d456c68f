// What the stream tests expect of the path their messages took, from the
// environment the ctest entry sets (both the CI suite and the GPU one).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "loom/stream.h"

namespace loom::test {

// A counter of the path a test's messages took against the environment
// the ctest entry sets: `env`=1, it grew since `before`; =0, it did not;
// unset: not checked.
inline void check_counter(const char* env, long long now, long long before, const char* what) {
  const char* e = std::getenv(env);
  if (!e) return;
  if (std::string(e) == "1")
    EXPECT_GT(now, before) << "none of the enqueued operations: " << what;
  else
    EXPECT_EQ(now, before) << "enqueued operations, where none should: " << what;
}

// One of the engine's counters (loom_stream_*(long long*)).
inline long long read_counter(int (*counter)(long long*)) {
  long long n = -1;
  EXPECT_EQ(counter(&n), MPI_SUCCESS);
  return n;
}

// LOOM_TEST_EXPECT_LENT (the device method on): enqueued device messages go
// by its protocol (an arena lent on the stream, copied by the receiver's
// stream).
inline long long lent_messages() {
  return read_counter(loom_stream_lent_messages);
}

inline void check_lent(long long before) {
  check_counter("LOOM_TEST_EXPECT_LENT", lent_messages(), before, "messages by the device method");
}

// LOOM_TEST_EXPECT_EARLY: enqueued device receives are posted when enqueued
// (LOOM_STREAM_EARLY_RECV).
inline long long early_receives() {
  return read_counter(loom_stream_early_receives);
}

inline void check_early(long long before) {
  check_counter("LOOM_TEST_EXPECT_EARLY", early_receives(), before,
                "receives posted when enqueued");
}

// LOOM_TEST_EXPECT_EARLY_SENDS: lent enqueued sends post their headers when
// enqueued (LOOM_STREAM_EARLY_SEND).
inline long long early_sends() {
  return read_counter(loom_stream_early_sends);
}

inline void check_early_sends(long long before) {
  check_counter("LOOM_TEST_EXPECT_EARLY_SENDS", early_sends(), before,
                "lent sends posted when enqueued");
}

// LOOM_TEST_EXPECT_HELD: enqueued sends' packs are held back to launch
// together (LOOM_STREAM_HOLD).
inline long long held_sends() {
  return read_counter(loom_stream_held_sends);
}

inline void check_held(long long before) {
  check_counter("LOOM_TEST_EXPECT_HELD", held_sends(), before, "sends' packs held back");
}

}  // namespace loom::test
