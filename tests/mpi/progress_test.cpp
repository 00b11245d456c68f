// MPI's progress rule, which the zero-copy device method leans on: a send
// whose matching receive is posted completes, whatever the receiving rank
// does next with Loom's calls. With LOOM_ZCOPY_MIN=0 a contiguous send
// completes only once its receiver has read the buffer, so each pattern
// here deadlocks unless the receiver finishes receives that landed while it
// waits, tests, probes or receives something else. Valid in every mode.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "test_buffers.hpp"
#include "transport/memtype.hpp"

namespace loom::test {
namespace {

constexpr int kN = 1 << 16;  // bytes per message: above any eager limit

std::vector<unsigned char> pattern(int from, int which) {
  std::vector<unsigned char> b(kN);
  for (int i = 0; i < kN; ++i) b[i] = static_cast<unsigned char>(i * 7 + from * 31 + which * 101);
  return b;
}

class Progress : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
    me_ = world_rank();
    peer_ = me_ ^ 1;
    if (peer_ >= world_size()) peer_ = MPI_PROC_NULL;  // the odd rank out idles
  }
  void TearDown() override { MPI_Barrier(MPI_COMM_WORLD); }
  int me_ = 0, peer_ = 0;
};

// Irecv, Isend, then Wait on the send before the receive: each rank's send
// completes only when the other has read it, inside its Wait on a send.
TEST_F(Progress, WaitOnSendBeforeReceive) {
  if (peer_ == MPI_PROC_NULL) return;
  std::vector<unsigned char> out = pattern(me_, 0), in(kN, 0);
  MPI_Request r, s;
  ASSERT_EQ(MPI_Irecv(in.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &r), MPI_SUCCESS);
  ASSERT_EQ(MPI_Isend(out.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &s), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&s, MPI_STATUS_IGNORE), MPI_SUCCESS);
  MPI_Status st;
  ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
  int count = -1;
  MPI_Get_count(&st, MPI_BYTE, &count);
  EXPECT_EQ(count, kN);
  EXPECT_EQ(st.MPI_SOURCE, peer_);
  EXPECT_EQ(in, pattern(peer_, 0));
}

// A sender that blocks outside Loom after its Isend (here in the MPI's own
// receive, called past Loom, of a token its receiver sends only once it
// has the message): the message still arrives. The device method defers
// an Isend's pack (LOOM_BATCH_PACKS); Loom's flushing thread launches it
// when the sender makes no further Loom call.
TEST_F(Progress, SenderBlockedOutsideLoom) {
  if (peer_ == MPI_PROC_NULL) return;
  int token = 0;
  if (me_ % 2 == 0) {
    std::vector<unsigned char> out = pattern(me_, 3);
    MPI_Request s;
    ASSERT_EQ(MPI_Isend(out.data(), kN, MPI_BYTE, peer_, 4, MPI_COMM_WORLD, &s), MPI_SUCCESS);
    ASSERT_EQ(PMPI_Recv(&token, 1, MPI_INT, peer_, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    EXPECT_EQ(token, 42);
    ASSERT_EQ(MPI_Wait(&s, MPI_STATUS_IGNORE), MPI_SUCCESS);
  } else {
    std::vector<unsigned char> in(kN, 0);
    ASSERT_EQ(MPI_Recv(in.data(), kN, MPI_BYTE, peer_, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    EXPECT_EQ(in, pattern(peer_, 3));
    token = 42;
    ASSERT_EQ(PMPI_Send(&token, 1, MPI_INT, peer_, 5, MPI_COMM_WORLD), MPI_SUCCESS);
  }
}

// A posted receive, then a blocking receive of a later message: the first
// send completes while the receiver blocks on the second.
TEST_F(Progress, BlockingReceiveOfALaterMessage) {
  if (peer_ == MPI_PROC_NULL) return;
  if (me_ % 2 == 0) {
    std::vector<unsigned char> a = pattern(me_, 1), b = pattern(me_, 2);
    ASSERT_EQ(MPI_Send(a.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send(b.data(), kN, MPI_BYTE, peer_, 2, MPI_COMM_WORLD), MPI_SUCCESS);
  } else {
    std::vector<unsigned char> a(kN, 0), b(kN, 0);
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(a.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &r), MPI_SUCCESS);
    ASSERT_EQ(MPI_Recv(b.data(), kN, MPI_BYTE, peer_, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(a, pattern(peer_, 1));
    EXPECT_EQ(b, pattern(peer_, 2));
  }
}

// A posted receive, then a blocking probe for a later message.
TEST_F(Progress, ProbeForALaterMessage) {
  if (peer_ == MPI_PROC_NULL) return;
  if (me_ % 2 == 0) {
    std::vector<unsigned char> a = pattern(me_, 3), b = pattern(me_, 4);
    ASSERT_EQ(MPI_Send(a.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send(b.data(), kN, MPI_BYTE, peer_, 2, MPI_COMM_WORLD), MPI_SUCCESS);
  } else {
    std::vector<unsigned char> a(kN, 0), b(kN, 0);
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(a.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &r), MPI_SUCCESS);
    MPI_Status st;
    ASSERT_EQ(MPI_Probe(peer_, 2, MPI_COMM_WORLD, &st), MPI_SUCCESS);
    EXPECT_EQ(st.MPI_TAG, 2);
    ASSERT_EQ(MPI_Recv(b.data(), kN, MPI_BYTE, peer_, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(a, pattern(peer_, 3));
    EXPECT_EQ(b, pattern(peer_, 4));
  }
}

// Both ranks loop on MPI_Test of their send before touching their receive.
TEST_F(Progress, TestLoopOnSend) {
  if (peer_ == MPI_PROC_NULL) return;
  std::vector<unsigned char> out = pattern(me_, 5), in(kN, 0);
  MPI_Request r, s;
  ASSERT_EQ(MPI_Irecv(in.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &r), MPI_SUCCESS);
  ASSERT_EQ(MPI_Isend(out.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &s), MPI_SUCCESS);
  for (int flag = 0; !flag;) ASSERT_EQ(MPI_Test(&s, &flag, MPI_STATUS_IGNORE), MPI_SUCCESS);
  ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
  EXPECT_EQ(in, pattern(peer_, 5));
}

// MPI_Cancel of a send either succeeds (nothing is received) or fails (the
// message arrives whole); here the receive is posted, so it must arrive.
TEST_F(Progress, CancelOfAMatchedSend) {
  if (peer_ == MPI_PROC_NULL) return;
  if (me_ % 2 == 0) {
    std::vector<unsigned char> a = pattern(me_, 6);
    MPI_Request s;
    ASSERT_EQ(MPI_Isend(a.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &s), MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);  // the receive is posted
    ASSERT_EQ(MPI_Cancel(&s), MPI_SUCCESS);
    MPI_Status st;
    ASSERT_EQ(MPI_Wait(&s, &st), MPI_SUCCESS);
    int cancelled = 1;
    MPI_Test_cancelled(&st, &cancelled);
    int arrived = 0;
    MPI_Recv(&arrived, 1, MPI_INT, peer_, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    EXPECT_EQ(cancelled, arrived ? 0 : 1) << "cancel and delivery disagree";
  } else {
    std::vector<unsigned char> a(kN, 0);
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(a.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &r), MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    // A cancelled send leaves this receive unmatched: wait at most a while.
    int flag = 0;
    const double until = MPI_Wtime() + 2.0;
    while (!flag && MPI_Wtime() < until) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    if (!flag) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else {
      EXPECT_EQ(a, pattern(peer_, 6));
    }
    int arrived = flag;
    MPI_Send(&arrived, 1, MPI_INT, peer_, 9, MPI_COMM_WORLD);
  }
}

// A receive posted, then a call that blocks until the peer gets past its
// send: MPI_Barrier, a collective on host buffers, a collective on device
// buffers (the node engine's own exchanges), a blocking send of a host
// buffer above the eager limit. Every MPI progresses its rendezvous inside
// these; Loom turns them into their nonblocking forms, tested in a loop
// that finishes the receive, while zero-copy is on (mpi/blocking.hpp).
class ProgressBlocked : public Progress {
 protected:
  // Even ranks: a blocking send, then `after`. Odd ranks: a receive posted,
  // `after`, then its wait.
  template <class After>
  void run(int which, After after) {
    if (peer_ == MPI_PROC_NULL) {
      after();
      return;
    }
    if (me_ % 2 == 0) {
      std::vector<unsigned char> out = pattern(me_, which);
      ASSERT_EQ(MPI_Send(out.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD), MPI_SUCCESS);
      after();
    } else {
      std::vector<unsigned char> in(kN, 0);
      MPI_Request r;
      ASSERT_EQ(MPI_Irecv(in.data(), kN, MPI_BYTE, peer_, 1, MPI_COMM_WORLD, &r), MPI_SUCCESS);
      after();
      ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
      EXPECT_EQ(in, pattern(peer_, which));
    }
  }
};

// Marks a vector as host memory (a no-op outside the test modes).
struct HostVector {
  explicit HostVector(size_t n, int v = 0) : data(n, v) {
    transport::test_mark_host(data.data(), n * sizeof(int));
  }
  ~HostVector() { transport::test_mark_host(data.data(), 0); }
  std::vector<int> data;
};

TEST_F(ProgressBlocked, Barrier) {
  run(7, [] { ASSERT_EQ(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS); });
}

TEST_F(ProgressBlocked, HostAllreduce) {
  run(8, [this] {
    HostVector in(4, me_ + 1), out(4);
    ASSERT_EQ(MPI_Allreduce(in.data.data(), out.data.data(), 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
              MPI_SUCCESS);
    const int n = world_size();
    for (int v : out.data) EXPECT_EQ(v, n * (n + 1) / 2);
  });
}

TEST_F(ProgressBlocked, DeviceAllreduce) {
  run(9, [this] {
    const int n = 1 << 15;  // 256 KiB of doubles: the node engine where it runs
    std::vector<double> in(n), out(n, -1.0);
    for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = me_ + i % 5;
    ASSERT_EQ(MPI_Allreduce(in.data(), out.data(), n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
              MPI_SUCCESS);
    const int size = world_size();
    for (int i = 0; i < n; i += 997)
      EXPECT_EQ(out[static_cast<size_t>(i)], size * (size - 1) / 2 + size * (i % 5)) << i;
  });
}

// The odd rank's host send meets its peer's receive only after the peer's
// own send completed.
TEST_F(ProgressBlocked, HostSend) {
  const int n = 1 << 16;  // 256 KiB: past any eager limit
  run(10, [this, n] {
    if (peer_ == MPI_PROC_NULL) return;
    HostVector v(n, me_ % 2 ? 5 : 0);
    if (me_ % 2) {
      ASSERT_EQ(MPI_Send(v.data.data(), n, MPI_INT, peer_, 2, MPI_COMM_WORLD), MPI_SUCCESS);
    } else {
      ASSERT_EQ(MPI_Recv(v.data.data(), n, MPI_INT, peer_, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      EXPECT_EQ(v.data[n - 1], 5);
    }
  });
}

}  // namespace
}  // namespace loom::test
