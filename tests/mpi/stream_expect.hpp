// What the stream tests expect of the path their messages took, from the
// environment the ctest entry sets (both the CI suite and the GPU one).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>

#include "loom/stream.h"

namespace loom::test {

// LOOM_TEST_EXPECT_LENT=1 (the device method on): enqueued device messages
// go by its protocol (an arena lent on the stream, copied by the receiver's
// stream); =0: none does; unset: not checked.
inline long long lent_messages() {
  long long n = -1;
  EXPECT_EQ(loom_stream_lent_messages(&n), MPI_SUCCESS);
  return n;
}

inline void check_lent(long long before) {
  const char* e = std::getenv("LOOM_TEST_EXPECT_LENT");
  if (!e) return;
  if (std::string(e) == "1")
    EXPECT_GT(lent_messages(), before) << "no enqueued message went by the device method";
  else
    EXPECT_EQ(lent_messages(), before) << "enqueued messages went by the device method";
}

// LOOM_TEST_EXPECT_EARLY=1: enqueued device receives are posted when
// enqueued (LOOM_STREAM_EARLY_RECV); =0: none is; unset: not checked.
inline long long early_receives() {
  long long n = -1;
  EXPECT_EQ(loom_stream_early_receives(&n), MPI_SUCCESS);
  return n;
}

inline void check_early(long long before) {
  const char* e = std::getenv("LOOM_TEST_EXPECT_EARLY");
  if (!e) return;
  if (std::string(e) == "1")
    EXPECT_GT(early_receives(), before) << "no enqueued receive was posted when enqueued";
  else
    EXPECT_EQ(early_receives(), before) << "enqueued receives were posted when enqueued";
}

}  // namespace loom::test
