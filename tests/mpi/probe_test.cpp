// Probes through the interposer (part of loom_p2p_tests, run in every mode).
// Under the device method (mode rendezvous) a probe first sees a 128-byte
// header; it must still report the real message's size, and the receives
// after it must get every message in the MPI's order.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "mpi/runtime.hpp"
#include "staging_returned.hpp"
#include "test_buffers.hpp"
#include "transport/memtype.hpp"

namespace loom::test {
namespace {

class Probe : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
    me_ = world_rank();
    peer_ = me_ ^ 1;
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (runtime()) {
      EXPECT_EQ(staging_in_use_settled(), 0u) << "staging not returned";
    }
  }
  bool paired() const { return peer_ < world_size(); }
  int me_ = 0, peer_ = 0;
};

std::vector<int> pattern(int n, int seed) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), seed * 100000);
  return v;
}

// Marks a receive buffer as host memory (a no-op outside the test modes),
// so receives into host and into "device" memory are both tried.
struct HostMark {
  HostMark(std::vector<int>& v, bool on) : p(on ? v.data() : nullptr) {
    if (p) transport::test_mark_host(p, v.size() * sizeof(int));
  }
  ~HostMark() {
    if (p) transport::test_mark_host(p, 0);
  }
  void* p;
};

// Probe, Iprobe and a second Probe report the message's size; then each
// kind of receive gets it, into host and device buffers.
TEST_F(Probe, ReportsTheMessageSize) {
  if (!paired()) return;
  const int kKinds = 3;  // Recv, Irecv + Wait, Sendrecv
  for (int host = 0; host < 2; ++host) {
    for (int kind = 0; kind < kKinds; ++kind) {
      SCOPED_TRACE("kind " + std::to_string(kind) + (host ? " host" : " device"));
      const int n = 1000 + kind;
      std::vector<int> src = pattern(n, kind + 1), dst(static_cast<size_t>(n), -1), none(1, 0);
      if (me_ % 2 == 0) {
        ASSERT_EQ(MPI_Send(src.data(), n, MPI_INT, peer_, 7 + kind, MPI_COMM_WORLD), MPI_SUCCESS);
        if (kind == 2)
          MPI_Recv(none.data(), 0, MPI_INT, peer_, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        continue;
      }
      HostMark mark(dst, host);
      MPI_Status st;
      int count = -1, flag = 0;
      ASSERT_EQ(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st), MPI_SUCCESS);
      MPI_Get_count(&st, MPI_INT, &count);
      EXPECT_EQ(count, n);
      EXPECT_EQ(st.MPI_SOURCE, peer_);
      EXPECT_EQ(st.MPI_TAG, 7 + kind);
      ASSERT_EQ(MPI_Iprobe(peer_, 7 + kind, MPI_COMM_WORLD, &flag, &st), MPI_SUCCESS);
      EXPECT_EQ(flag, 1);
      MPI_Get_count(&st, MPI_INT, &count);
      EXPECT_EQ(count, n);
      ASSERT_EQ(MPI_Probe(peer_, MPI_ANY_TAG, MPI_COMM_WORLD, &st), MPI_SUCCESS);
      MPI_Get_count(&st, MPI_BYTE, &count);
      EXPECT_EQ(count, n * 4);
      st.MPI_TAG = -1;
      if (kind == 0) {
        ASSERT_EQ(MPI_Recv(dst.data(), n, MPI_INT, peer_, MPI_ANY_TAG, MPI_COMM_WORLD, &st),
                  MPI_SUCCESS);
      } else if (kind == 1) {
        MPI_Request r;
        ASSERT_EQ(MPI_Irecv(dst.data(), n, MPI_INT, MPI_ANY_SOURCE, 7 + kind, MPI_COMM_WORLD, &r),
                  MPI_SUCCESS);
        ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
      } else {
        ASSERT_EQ(MPI_Sendrecv(none.data(), 0, MPI_INT, peer_, 99, dst.data(), n, MPI_INT, peer_,
                               7 + kind, MPI_COMM_WORLD, &st),
                  MPI_SUCCESS);
      }
      EXPECT_EQ(dst, src);
      MPI_Get_count(&st, MPI_INT, &count);
      EXPECT_EQ(count, n);
      EXPECT_EQ(st.MPI_TAG, 7 + kind);
      EXPECT_EQ(st.MPI_SOURCE, peer_);
    }
  }
}

// Probing a later tag first: the receives that follow still get the
// source's messages in the order they were sent. The 32-int message is
// exactly a header's size but sent from host memory: a user's bytes, which
// a probe may take and must give back unchanged.
TEST_F(Probe, ProbingALaterTagKeepsOrder) {
  if (!paired()) return;
  const int sizes[4] = {3000, 500, 32, 2000};
  const int tags[4] = {1, 2, 1, 3};
  for (int host = 0; host < 2; ++host) {
    SCOPED_TRACE(host ? "host" : "device");
    std::vector<std::vector<int>> src(4);
    for (int i = 0; i < 4; ++i) src[static_cast<size_t>(i)] = pattern(sizes[i], 10 + i);
    if (me_ % 2 == 0) {
      MPI_Request r[4];
      for (int i = 0; i < 4; ++i) {
        std::vector<int>& s = src[static_cast<size_t>(i)];
        HostMark mark(s, i == 2);
        ASSERT_EQ(MPI_Isend(s.data(), sizes[i], MPI_INT, peer_, tags[i], MPI_COMM_WORLD, &r[i]),
                  MPI_SUCCESS);
      }
      ASSERT_EQ(MPI_Waitall(4, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
      continue;
    }
    MPI_Status st;
    int count = -1;
    ASSERT_EQ(MPI_Probe(peer_, 3, MPI_COMM_WORLD, &st), MPI_SUCCESS);  // the last one
    MPI_Get_count(&st, MPI_INT, &count);
    EXPECT_EQ(count, 2000);
    ASSERT_EQ(MPI_Probe(peer_, 2, MPI_COMM_WORLD, &st), MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    EXPECT_EQ(count, 500);
    for (int i = 0; i < 4; ++i) {
      std::vector<int> dst(3000, -1);
      HostMark mark(dst, host);
      ASSERT_EQ(MPI_Recv(dst.data(), 3000, MPI_INT, peer_, MPI_ANY_TAG, MPI_COMM_WORLD, &st),
                MPI_SUCCESS);
      MPI_Get_count(&st, MPI_INT, &count);
      ASSERT_EQ(count, sizes[i]) << "message " << i << " out of order";
      EXPECT_EQ(st.MPI_TAG, tags[i]);
      dst.resize(static_cast<size_t>(sizes[i]));
      EXPECT_EQ(dst, src[static_cast<size_t>(i)]) << "message " << i;
    }
  }
}

// A persistent receive started after a probe kept messages takes them in
// order (MPI_Start, MPI_Startall), and every completion call reports it,
// Waitany and Waitsome included (the MPI's request was never started).
TEST_F(Probe, PersistentReceiveTakesKeptMessages) {
  if (!paired()) return;
  const int sizes[3] = {1000, 500, 700};
  std::vector<std::vector<int>> src(3);
  for (int i = 0; i < 3; ++i) src[static_cast<size_t>(i)] = pattern(sizes[i], 20 + i);
  if (me_ % 2 == 0) {
    MPI_Request r[3];
    for (int i = 0; i < 3; ++i)
      ASSERT_EQ(MPI_Isend(src[static_cast<size_t>(i)].data(), sizes[i], MPI_INT, peer_, i + 1,
                          MPI_COMM_WORLD, &r[i]),
                MPI_SUCCESS);
    ASSERT_EQ(MPI_Waitall(3, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
    return;
  }
  MPI_Status st;
  ASSERT_EQ(MPI_Probe(peer_, 2, MPI_COMM_WORLD, &st), MPI_SUCCESS);  // keeps 1 and 2
  std::vector<int> dst(1000, -1);
  HostMark mark(dst, true);  // persistent receives take host memory only
  MPI_Request r;
  ASSERT_EQ(MPI_Recv_init(dst.data(), 1000, MPI_INT, peer_, MPI_ANY_TAG, MPI_COMM_WORLD, &r),
            MPI_SUCCESS);
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    std::fill(dst.begin(), dst.end(), -1);
    int count = -1, index = -1, outcount = 0;
    if (i == 0) {
      ASSERT_EQ(MPI_Start(&r), MPI_SUCCESS);
      ASSERT_EQ(MPI_Waitany(1, &r, &index, &st), MPI_SUCCESS);
      EXPECT_EQ(index, 0);
    } else if (i == 1) {
      ASSERT_EQ(MPI_Startall(1, &r), MPI_SUCCESS);
      ASSERT_EQ(MPI_Waitsome(1, &r, &outcount, &index, &st), MPI_SUCCESS);
      EXPECT_EQ(outcount, 1);
    } else {
      ASSERT_EQ(MPI_Start(&r), MPI_SUCCESS);
      ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
    }
    MPI_Get_count(&st, MPI_INT, &count);
    ASSERT_EQ(count, sizes[i]) << "out of order";
    EXPECT_EQ(st.MPI_TAG, i + 1);
    EXPECT_EQ(st.MPI_SOURCE, peer_);
    EXPECT_TRUE(std::equal(src[static_cast<size_t>(i)].begin(), src[static_cast<size_t>(i)].end(),
                           dst.begin()));
  }
  MPI_Request_free(&r);
}

// Matched probes: the handle Loom gives back is received by MPI_Mrecv and
// MPI_Imrecv, into host and device buffers; the status tells the size.
TEST_F(Probe, MatchedProbesReportTheSize) {
  if (!paired()) return;
  for (int host = 0; host < 2; ++host) {
    for (int blocking = 0; blocking < 2; ++blocking) {
      SCOPED_TRACE(std::string(host ? "host" : "device") + (blocking ? " Mprobe" : " Improbe"));
      const int n = 700 + 10 * blocking;
      std::vector<int> src = pattern(n, 3 + blocking), dst(static_cast<size_t>(n), -1);
      if (me_ % 2 == 0) {
        ASSERT_EQ(MPI_Send(src.data(), n, MPI_INT, peer_, 20, MPI_COMM_WORLD), MPI_SUCCESS);
        continue;
      }
      HostMark mark(dst, host);
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status st;
      int count = -1;
      if (blocking) {
        ASSERT_EQ(MPI_Mprobe(peer_, 20, MPI_COMM_WORLD, &msg, &st), MPI_SUCCESS);
      } else {
        int flag = 0;
        while (!flag)
          ASSERT_EQ(MPI_Improbe(MPI_ANY_SOURCE, 20, MPI_COMM_WORLD, &flag, &msg, &st), MPI_SUCCESS);
      }
      MPI_Get_count(&st, MPI_INT, &count);
      EXPECT_EQ(count, n);
      if (blocking) {
        ASSERT_EQ(MPI_Mrecv(dst.data(), n, MPI_INT, &msg, &st), MPI_SUCCESS);
      } else {
        MPI_Request r;
        ASSERT_EQ(MPI_Imrecv(dst.data(), n, MPI_INT, &msg, &r), MPI_SUCCESS);
        ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
      }
      EXPECT_EQ(msg, MPI_MESSAGE_NULL);
      EXPECT_EQ(dst, src);
      MPI_Get_count(&st, MPI_INT, &count);
      EXPECT_EQ(count, n);
      EXPECT_EQ(st.MPI_SOURCE, peer_);
    }
  }
}

// A probed message that does not fit the receive: MPI_ERR_TRUNCATE through
// the communicator's handler, and the sender's memory comes back.
TEST_F(Probe, ProbedMessageTruncated) {
  if (!paired()) return;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  std::vector<int> src = pattern(64, 5), dst(100, -1);
  if (me_ % 2 == 0) {
    ASSERT_EQ(MPI_Send(src.data(), 64, MPI_INT, peer_, 3, comm), MPI_SUCCESS);
  } else {
    HostMark mark(dst, true);  // the MPI itself may write past a short device receive's staging
    MPI_Status st;
    ASSERT_EQ(MPI_Probe(peer_, 3, comm, &st), MPI_SUCCESS);
    int count = -1, cls = 0;
    MPI_Get_count(&st, MPI_INT, &count);
    EXPECT_EQ(count, 64);
    const int rc = MPI_Recv(dst.data(), 16, MPI_INT, peer_, 3, comm, &st);
    MPI_Error_class(rc, &cls);
    EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
    for (int i = 64; i < 100; ++i) ASSERT_EQ(dst[static_cast<size_t>(i)], -1);
  }
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace loom::test
