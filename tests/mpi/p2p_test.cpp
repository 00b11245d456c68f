// Point-to-point through the interposer, on 2 or 4 ranks. Run twice by
// ctest: with host buffers (pass-through) and with LOOM_TEST_HOST_AS_DEVICE=1,
// where every buffer takes the device path (staging, request table, partial
// receives) with the host engine, so CI covers that machinery without a GPU.
// The oracle is the MPI's own pack/unpack on the host.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mpi/runtime.hpp"
#include "random_types.hpp"
#include "staging_returned.hpp"
#include "test_buffers.hpp"
#include "transport/memtype.hpp"

namespace loom::test {
namespace {

int rank() {
  return world_rank();
}
int size() {
  return world_size();
}

class P2P : public ::testing::Test {
 protected:
  void SetUp() override {
    if (size() < 2) GTEST_SKIP() << "needs 2 ranks";
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (runtime()) {
      EXPECT_EQ(staging_in_use_settled(), 0u) << "staging not returned";
    }
  }
};

// Random derived types, same seed on both sides; blocking and non-blocking.
TEST_F(P2P, RandomTypesBetweenPairs) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    RandomTypes gen(seed * 7919);
    MPI_Datatype t = gen.make(1 + static_cast<int>(seed % 4));
    MPI_Type_commit(&t);
    const int count = 1 + static_cast<int>(seed % 3);
    Buffer src(t, count, static_cast<unsigned>(seed)), dst(t, count, 0);
    Buffer initial = dst;
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + gen.recipe());
    if (seed % 2 == 0) {
      if (me % 2 == 0) {
        ASSERT_EQ(MPI_Send(src.origin(), count, t, peer, 7, MPI_COMM_WORLD), MPI_SUCCESS);
        ASSERT_EQ(MPI_Recv(dst.origin(), count, t, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  MPI_SUCCESS);
      } else {
        ASSERT_EQ(MPI_Recv(dst.origin(), count, t, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                  MPI_SUCCESS);
        ASSERT_EQ(MPI_Send(src.origin(), count, t, peer, 7, MPI_COMM_WORLD), MPI_SUCCESS);
      }
    } else {
      MPI_Request r[2];
      MPI_Status st[2];
      ASSERT_EQ(MPI_Irecv(dst.origin(), count, t, peer, 9, MPI_COMM_WORLD, &r[0]), MPI_SUCCESS);
      ASSERT_EQ(MPI_Isend(src.origin(), count, t, peer, 9, MPI_COMM_WORLD, &r[1]), MPI_SUCCESS);
      ASSERT_EQ(MPI_Waitall(2, r, st), MPI_SUCCESS);
      int got = -1, size_t_ = 0;
      MPI_Type_size(t, &size_t_);
      MPI_Get_count(&st[0], t, &got);
      if (size_t_ > 0) {
        EXPECT_EQ(got, count);
      }
    }
    // Both sides fill src alike, so the peer's data is our own src.
    ASSERT_EQ(dst.bytes, expected(t, count, src, t, count, initial));
    MPI_Type_free(&t);
  }
}

// Many outstanding operations completed by each completion call.
TEST_F(P2P, SixtyFourOutstandingAllCompletionCalls) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Datatype t;
  MPI_Type_vector(16, 3, 5, MPI_INT, &t);
  MPI_Type_commit(&t);
  const int n = 64;
  // Recv, Irecv, Sendrecv, Waitall, device Recv, Mprobe + Mrecv, Recv_init +
  // Start (twice), Mprobe + Imrecv.
  const int kinds = 8;
  for (int how = 0; how < kinds; ++how) {
    SCOPED_TRACE("completion " + std::to_string(how));
    std::vector<Buffer> src, dst;
    for (int i = 0; i < n; ++i) {
      src.emplace_back(t, 2, 100 + i);
      dst.emplace_back(t, 2, 0);
    }
    std::vector<MPI_Request> reqs(2 * n);
    for (int i = 0; i < n; ++i) MPI_Irecv(dst[i].origin(), 2, t, peer, i, MPI_COMM_WORLD, &reqs[i]);
    for (int i = 0; i < n; ++i)
      MPI_Isend(src[i].origin(), 2, t, peer, i, MPI_COMM_WORLD, &reqs[n + i]);
    int done = 0;
    while (done < 2 * n) {
      int idx, flag, outcount;
      std::vector<int> idxs(2 * n);
      switch (how) {
        case 0:
          MPI_Waitall(2 * n, reqs.data(), MPI_STATUSES_IGNORE);
          done = 2 * n;
          break;
        case 1:
          MPI_Waitany(2 * n, reqs.data(), &idx, MPI_STATUS_IGNORE);
          ++done;
          break;
        case 2:
          MPI_Waitsome(2 * n, reqs.data(), &outcount, idxs.data(), MPI_STATUSES_IGNORE);
          done += outcount;
          break;
        case 3:
          MPI_Testall(2 * n, reqs.data(), &flag, MPI_STATUSES_IGNORE);
          if (flag) done = 2 * n;
          break;
        default:
          MPI_Testany(2 * n, reqs.data(), &idx, &flag, MPI_STATUS_IGNORE);
          done += flag && idx != MPI_UNDEFINED;
          break;
      }
    }
    for (int i = 0; i < n; ++i) {
      Buffer initial(t, 2, 0);
      ASSERT_EQ(dst[i].bytes, expected(t, 2, src[i], t, 2, initial)) << "message " << i;
    }
  }
  MPI_Type_free(&t);
}

// Persistent requests of host buffers beside device messages, completed by
// every completion call, twice each: the persistent receive reports its
// own status (source, tag, count) and data, and the any/some calls report
// each request once. Polling completions look at requests before the MPI
// completes them, and under MPICH 5.0 such a look deactivates a complete
// persistent request (requests.hpp: detect_peek_deactivates).
TEST_F(P2P, PersistentRequestsKeepTheirStatusInEveryCompletionCall) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Datatype t;
  MPI_Type_vector(16, 3, 5, MPI_INT, &t);
  MPI_Type_commit(&t);
  std::vector<int> out(64), in(64);
  MPI_Request pr, ps;
  ASSERT_EQ(MPI_Recv_init(in.data(), 64, MPI_INT, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &pr),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Send_init(out.data(), 48 + me, MPI_INT, peer, 60 + me, MPI_COMM_WORLD, &ps),
            MPI_SUCCESS);
  const char* names[] = {"Waitall",  "Testall",  "Waitany", "Testany",
                         "Waitsome", "Testsome", "Wait",    "Test"};
  for (int how = 0; how < 8; ++how) {
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(std::string(names[how]) + " round " + std::to_string(round));
      for (int i = 0; i < 64; ++i) out[i] = 100000 * me + 1000 * how + 100 * round + i;
      std::fill(in.begin(), in.end(), -1);
      Buffer dsrc(t, 2, 7 + how), ddst(t, 2, 0);
      Buffer initial = ddst;
      MPI_Request reqs[4];
      ASSERT_EQ(MPI_Irecv(ddst.origin(), 2, t, peer, 70, MPI_COMM_WORLD, &reqs[0]), MPI_SUCCESS);
      ASSERT_EQ(MPI_Start(&pr), MPI_SUCCESS);
      reqs[1] = pr;
      ASSERT_EQ(MPI_Isend(dsrc.origin(), 2, t, peer, 70, MPI_COMM_WORLD, &reqs[2]), MPI_SUCCESS);
      ASSERT_EQ(MPI_Start(&ps), MPI_SUCCESS);
      reqs[3] = ps;
      MPI_Status sts[4];
      int reported[4] = {0, 0, 0, 0}, left = 4;
      while (left > 0) {
        int flag = 0, idx = MPI_UNDEFINED, outcount = 0, idxs[4];
        MPI_Status st, some[4];
        switch (how) {
          case 0:
          case 1:
            if (how == 0)
              ASSERT_EQ(MPI_Waitall(4, reqs, sts), MPI_SUCCESS);
            else
              ASSERT_EQ(MPI_Testall(4, reqs, &flag, sts), MPI_SUCCESS);
            if (how == 0 || flag) {
              for (int& r : reported) ++r;
              left = 0;
            }
            break;
          case 2:
          case 3:
            if (how == 2)
              ASSERT_EQ(MPI_Waitany(4, reqs, &idx, &st), MPI_SUCCESS);
            else
              ASSERT_EQ(MPI_Testany(4, reqs, &idx, &flag, &st), MPI_SUCCESS);
            if (how == 2 || flag) {
              ASSERT_NE(idx, MPI_UNDEFINED) << left << " requests not reported";
              sts[idx] = st;
              ++reported[idx];
              --left;
            }
            break;
          case 4:
          case 5:
            if (how == 4)
              ASSERT_EQ(MPI_Waitsome(4, reqs, &outcount, idxs, some), MPI_SUCCESS);
            else
              ASSERT_EQ(MPI_Testsome(4, reqs, &outcount, idxs, some), MPI_SUCCESS);
            ASSERT_NE(outcount, MPI_UNDEFINED) << left << " requests not reported";
            for (int k = 0; k < outcount; ++k) {
              sts[idxs[k]] = some[k];
              ++reported[idxs[k]];
              --left;
            }
            break;
          default:
            for (int i = 0; i < 4; ++i) {
              if (reported[i]) continue;
              if (how == 6) {
                ASSERT_EQ(MPI_Wait(&reqs[i], &sts[i]), MPI_SUCCESS);
                flag = 1;
              } else {
                ASSERT_EQ(MPI_Test(&reqs[i], &flag, &sts[i]), MPI_SUCCESS);
              }
              if (flag) {
                ++reported[i];
                --left;
              }
            }
            break;
        }
      }
      for (int i = 0; i < 4; ++i) EXPECT_EQ(reported[i], 1) << "request " << i;
      EXPECT_EQ(reqs[1], pr) << "a persistent request stays allocated";
      EXPECT_EQ(sts[1].MPI_SOURCE, peer);
      EXPECT_EQ(sts[1].MPI_TAG, 60 + peer);
      int count = -1;
      MPI_Get_count(&sts[1], MPI_INT, &count);
      ASSERT_EQ(count, 48 + peer);
      for (int i = 0; i < count; ++i)
        ASSERT_EQ(in[i], 100000 * peer + 1000 * how + 100 * round + i) << "element " << i;
      EXPECT_EQ(in[count], -1) << "past the message";
      Buffer from(t, 2, 7 + how);
      ASSERT_EQ(ddst.bytes, expected(t, 2, from, t, 2, initial));
    }
  }
  MPI_Request_free(&pr);
  MPI_Request_free(&ps);
  MPI_Type_free(&t);
}

// Wildcards: every other rank sends to rank 0 with its own tag; statuses
// give source, tag and the count in the receiver's type.
TEST_F(P2P, AnySourceAnyTag) {
  MPI_Datatype t;
  MPI_Type_vector(8, 1, 3, MPI_DOUBLE, &t);
  MPI_Type_commit(&t);
  if (rank() == 0) {
    std::vector<bool> seen(size(), false);
    for (int k = 1; k < size(); ++k) {
      Buffer dst(t, 4, 0);
      MPI_Status st;
      ASSERT_EQ(MPI_Recv(dst.origin(), 4, t, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st),
                MPI_SUCCESS);
      ASSERT_GT(st.MPI_SOURCE, 0);
      EXPECT_EQ(st.MPI_TAG, 1000 + st.MPI_SOURCE);
      int got;
      MPI_Get_count(&st, t, &got);
      EXPECT_EQ(got, st.MPI_SOURCE);  // rank r sends r elements
      seen[st.MPI_SOURCE] = true;
      Buffer src(t, got, 40 + st.MPI_SOURCE), initial(t, 4, 0);
      ASSERT_EQ(dst.bytes, expected(t, got, src, t, 4, initial));
    }
    for (int k = 1; k < size(); ++k) EXPECT_TRUE(seen[k]);
  } else {
    Buffer src(t, rank(), 40 + rank());
    ASSERT_EQ(MPI_Send(src.origin(), rank(), t, 0, 1000 + rank(), MPI_COMM_WORLD), MPI_SUCCESS);
  }
  MPI_Type_free(&t);
}

// Non-overtaking: messages between a pair with one tag arrive in order.
TEST_F(P2P, OrderIsKept) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  const int n = 100;
  if (me % 2 == 0) {
    std::vector<MPI_Request> r(n);
    std::vector<int> vals(n);
    for (int i = 0; i < n; ++i) {
      vals[i] = i;
      MPI_Isend(&vals[i], 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &r[i]);
    }
    MPI_Waitall(n, r.data(), MPI_STATUSES_IGNORE);
  } else {
    std::vector<int> got(n, -1);
    std::vector<MPI_Request> r(n);
    for (int i = 0; i < n; ++i)
      MPI_Irecv(&got[i], 1, MPI_INT, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD, &r[i]);
    MPI_Waitall(n, r.data(), MPI_STATUSES_IGNORE);
    for (int i = 0; i < n; ++i) ASSERT_EQ(got[i], i);
  }
}

// A receiver type unlike the sender's (same signature), and a shorter
// message than the receive: the leading elements land, the rest stay.
TEST_F(P2P, DifferentReceiverTypeAndShortMessage) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Datatype send_t, recv_t;
  MPI_Type_vector(6, 2, 4, MPI_FLOAT, &send_t);  // 12 floats per element
  int bl[3] = {1, 2, 1}, dp[3] = {0, 3, 9};
  MPI_Type_indexed(3, bl, dp, MPI_FLOAT, &recv_t);  // 4 floats per element
  MPI_Type_commit(&send_t);
  MPI_Type_commit(&recv_t);
  Buffer src(send_t, 1, 9), dst(recv_t, 5, 0);
  Buffer initial = dst;
  // 12 floats sent, room for 20: three whole elements arrive.
  if (me % 2 == 0) {
    MPI_Send(src.origin(), 1, send_t, peer, 3, MPI_COMM_WORLD);
  } else {
    MPI_Status st;
    ASSERT_EQ(MPI_Recv(dst.origin(), 5, recv_t, peer, 3, MPI_COMM_WORLD, &st), MPI_SUCCESS);
    int got;
    MPI_Get_count(&st, recv_t, &got);
    EXPECT_EQ(got, 3);
    ASSERT_EQ(dst.bytes, expected(send_t, 1, src, recv_t, 5, initial));
  }
  // 13 floats: the fourth element arrives in part. MPI_Unpack cannot say
  // what a partial element holds, so the oracle is the MPI's own receive of
  // the same message, sent a second time past Loom.
  MPI_Datatype odd;
  MPI_Type_contiguous(13, MPI_FLOAT, &odd);
  MPI_Type_commit(&odd);
  std::vector<float> vals(13);
  for (int i = 0; i < 13; ++i) vals[i] = 1.5f * i;
  Buffer dst2(recv_t, 5, 0);
  Buffer oracle = dst2;
  if (me % 2 == 0) {
    MPI_Send(vals.data(), 1, odd, peer, 4, MPI_COMM_WORLD);
    PMPI_Send(vals.data(), 1, odd, peer, 5, MPI_COMM_WORLD);
  } else {
    MPI_Status st;
    ASSERT_EQ(MPI_Recv(dst2.origin(), 5, recv_t, peer, 4, MPI_COMM_WORLD, &st), MPI_SUCCESS);
    int elems;
    MPI_Get_elements(&st, MPI_FLOAT, &elems);
    EXPECT_EQ(elems, 13);
    PMPI_Recv(oracle.origin(), 5, recv_t, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    ASSERT_EQ(dst2.bytes, oracle.bytes);
    ASSERT_NE(dst2.bytes, Buffer(recv_t, 5, 0).bytes);  // something arrived
  }
  for (MPI_Datatype* t : {&send_t, &recv_t, &odd}) MPI_Type_free(t);
}

// Under LOOM_METHOD=device (ctest mode "rendezvous") messages go by the
// device method: a header through the MPI, the bytes through lent memory.
// (On a GPU machine the method is on in every mode, but buffers here are
// host memory, so nothing takes it.)
// Under mode "native" every peer is on another node, reached by the MPI
// itself: neither the device method nor pipelined chunks go to it.
bool native_peers() {
  return runtime() && runtime()->rv && runtime()->rv->native();
}
bool device_method_on() {
  return runtime() && runtime()->rv && runtime()->rv->lends() && runtime()->host_as_device() &&
         !native_peers();
}

// Mode "native": contiguous device messages to peers of other nodes go to
// the MPI as they lie, and those peers are never sent a header, so a
// receive straight into device memory gets the data itself: contiguous to
// contiguous, a derived type (staged, its pipelined chunks declined) into
// contiguous bytes and into the same type, and a wildcard receive.
TEST_F(P2P, NativePeersGetDataNotHeaders) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  if (!native_peers() || !runtime()->host_as_device())
    GTEST_SKIP() << "the MPI does not take device memory here (mode native)";
  const uint64_t lent0 = runtime()->rv->messages_lent();
  const uint64_t chunked0 = runtime()->rv->messages_chunked();
  MPI_Datatype t;
  MPI_Type_vector(10007, 3, 5, MPI_INT, &t);  // 120084 packed bytes: above the chunks' minimum
  MPI_Type_commit(&t);
  int packed = 0;
  MPI_Type_size(t, &packed);
  std::vector<int> big(300000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int>(i) * 5 + me;
  Buffer src(t, 1, 77), initial(t, 1, 0);
  for (int how = 0; how < 4; ++how) {
    SCOPED_TRACE("case " + std::to_string(how));
    if (me % 2 == 0) {
      if (how == 0 || how == 3)
        ASSERT_EQ(MPI_Send(big.data(), 300000, MPI_INT, peer, 80 + how, MPI_COMM_WORLD),
                  MPI_SUCCESS);
      else
        ASSERT_EQ(MPI_Send(src.origin(), 1, t, peer, 80 + how, MPI_COMM_WORLD), MPI_SUCCESS);
      continue;
    }
    const int from = peer;
    if (how == 0 || how == 3) {  // contiguous, then a wildcard receive of the same
      std::vector<int> got(300000, -1);
      MPI_Request r;
      ASSERT_EQ(MPI_Irecv(got.data(), 300000, MPI_INT, how == 3 ? MPI_ANY_SOURCE : peer, 80 + how,
                          MPI_COMM_WORLD, &r),
                MPI_SUCCESS);
      ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], static_cast<int>(i) * 5 + from) << "at " << i;
    } else if (how == 1) {  // a derived type's packed bytes, received as bytes
      std::vector<unsigned char> got(static_cast<size_t>(packed));
      std::vector<unsigned char> want(static_cast<size_t>(packed));
      int pos = 0;
      PMPI_Pack(src.origin(), 1, t, want.data(), packed, &pos, MPI_COMM_SELF);
      ASSERT_EQ(MPI_Recv(got.data(), packed, MPI_BYTE, peer, 81, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      EXPECT_EQ(got, want);
    } else {  // the same type on both sides
      Buffer dst(t, 1, 0);
      ASSERT_EQ(MPI_Recv(dst.origin(), 1, t, peer, 82, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      EXPECT_EQ(dst.bytes, expected(t, 1, src, t, 1, initial));
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(runtime()->rv->messages_lent(), lent0);
  EXPECT_EQ(runtime()->rv->messages_chunked(), chunked0);
  MPI_Type_free(&t);
}

// Under LOOM_PIPELINE_CHUNK (ctest mode "pipeline") large staged messages go
// in chunks on Loom's communicator behind a header: every receive kind gets
// them whole, with odd last chunks, wildcards, order between two pipelined
// messages taken in reverse, and truncation.
TEST_F(P2P, PipelinedMessagesArrive) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  if (!runtime() || !runtime()->rv || runtime()->rv->chunk_bytes() == 0 ||
      !runtime()->host_as_device() || native_peers())
    GTEST_SKIP() << "pipelined chunks off, or host buffers (which the MPI moves)";
  const uint64_t chunked0 = runtime()->rv->messages_chunked();
  MPI_Datatype t;
  MPI_Type_vector(10007, 3, 5, MPI_INT, &t);  // 120084 packed bytes: an odd last chunk
  MPI_Type_commit(&t);
  const int kinds = 4;  // Recv (any source, any tag), Irecv, Probe + Recv, Sendrecv
  for (int how = 0; how < kinds; ++how) {
    SCOPED_TRACE("receive kind " + std::to_string(how));
    Buffer src(t, 1, 31 + how), dst(t, 1, 0);
    Buffer initial = dst;
    MPI_Status st;
    if (me % 2 == 0) {
      ASSERT_EQ(MPI_Send(src.origin(), 1, t, peer, 50 + how, MPI_COMM_WORLD), MPI_SUCCESS);
      if (how == 3) MPI_Recv(nullptr, 0, MPI_INT, peer, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (how == 0) {
      ASSERT_EQ(MPI_Recv(dst.origin(), 1, t, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st),
                MPI_SUCCESS);
    } else if (how == 1) {
      MPI_Request r;
      ASSERT_EQ(MPI_Irecv(dst.origin(), 1, t, peer, 51, MPI_COMM_WORLD, &r), MPI_SUCCESS);
      ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
    } else if (how == 2) {
      int n = 0;
      ASSERT_EQ(MPI_Probe(peer, 52, MPI_COMM_WORLD, &st), MPI_SUCCESS);
      MPI_Get_count(&st, t, &n);
      EXPECT_EQ(n, 1);
      ASSERT_EQ(MPI_Recv(dst.origin(), 1, t, peer, 52, MPI_COMM_WORLD, &st), MPI_SUCCESS);
    } else {
      ASSERT_EQ(MPI_Sendrecv(nullptr, 0, MPI_INT, peer, 98, dst.origin(), 1, t, peer, 53,
                             MPI_COMM_WORLD, &st),
                MPI_SUCCESS);
    }
    if (me % 2 == 1) {
      ASSERT_EQ(dst.bytes, expected(t, 1, src, t, 1, initial));
      int n = -1;
      MPI_Get_count(&st, MPI_INT, &n);
      EXPECT_EQ(n, 3 * 10007);
      EXPECT_EQ(st.MPI_TAG, 50 + how);
    }
  }
  // Two pipelined messages received in the other order (their own chunk tags).
  {
    Buffer a(t, 1, 41), b(t, 1, 42), ra(t, 1, 0), rb(t, 1, 0);
    Buffer initial = ra;
    if (me % 2 == 0) {
      MPI_Request r[2];
      MPI_Isend(a.origin(), 1, t, peer, 61, MPI_COMM_WORLD, &r[0]);
      MPI_Isend(b.origin(), 1, t, peer, 62, MPI_COMM_WORLD, &r[1]);
      ASSERT_EQ(MPI_Waitall(2, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
    } else {
      ASSERT_EQ(MPI_Recv(rb.origin(), 1, t, peer, 62, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      ASSERT_EQ(MPI_Recv(ra.origin(), 1, t, peer, 61, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      EXPECT_EQ(ra.bytes, expected(t, 1, a, t, 1, initial));
      EXPECT_EQ(rb.bytes, expected(t, 1, b, t, 1, initial));
    }
  }
  // Truncated: a receive of half the ints gets MPI_ERR_TRUNCATE, and the
  // sender's chunks are all taken (its finalize would warn otherwise).
  {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    std::vector<int> big(40000), small(20000 + 100, -1);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<int>(i) * 7;
    if (me % 2 == 0) {
      ASSERT_EQ(MPI_Send(big.data(), 40000, MPI_INT, peer, 70, comm), MPI_SUCCESS);
    } else {
      int cls = 0;
      const int rc = MPI_Recv(small.data(), 20000, MPI_INT, peer, 70, comm, MPI_STATUS_IGNORE);
      MPI_Error_class(rc, &cls);
      EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
      for (int i = 0; i < 20000; ++i)
        ASSERT_EQ(small[static_cast<size_t>(i)], big[static_cast<size_t>(i)]);
      for (int i = 20000; i < 20100; ++i) ASSERT_EQ(small[static_cast<size_t>(i)], -1);
    }
    MPI_Comm_free(&comm);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me % 2 == 0) {
    EXPECT_EQ(runtime()->rv->messages_chunked() - chunked0, static_cast<uint64_t>(kinds + 3));
  }
  MPI_Type_free(&t);
}

// A device-method message (2 of send_t) into every kind of receive of a
// host buffer (marked host in the test mode) and a device one (1 of
// recv_t, which holds `elems` of `elem`), with a receiver type unlike the
// sender's; bytes and counts against the MPI's own unpack.
void device_message_into_any_receive(int me, int peer, MPI_Datatype send_t, MPI_Datatype recv_t,
                                     MPI_Datatype elem, int elems) {
  const uint64_t lent0 = device_method_on() ? runtime()->rv->messages_lent() : 0;
  const uint64_t pulled0 = device_method_on() ? runtime()->rv->messages_pulled() : 0;
  // Recv, Irecv, Sendrecv, Waitall, device Recv, Mprobe + Mrecv, Recv_init +
  // Start (twice), Mprobe + Imrecv.
  const int kinds = 8;
  for (int how = 0; how < kinds; ++how) {
    SCOPED_TRACE("receive kind " + std::to_string(how));
    Buffer src(send_t, 2, 11 + how), dst(recv_t, 1, 0), sink(recv_t, 1, 0);
    Buffer initial = dst;
    const bool host = how != 4;
    if (host) loom::transport::test_mark_host(dst.bytes.data(), dst.bytes.size());
    MPI_Status st;
    st.MPI_SOURCE = -7;
    if (me % 2 == 0) {
      ASSERT_EQ(MPI_Send(src.origin(), 2, send_t, peer, 40 + how, MPI_COMM_WORLD), MPI_SUCCESS);
      if (how == 6) {
        ASSERT_EQ(MPI_Send(src.origin(), 2, send_t, peer, 46, MPI_COMM_WORLD), MPI_SUCCESS);
      }
      if (how == 2)  // the other side of its Sendrecv
        MPI_Recv(sink.origin(), 1, recv_t, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (how == 0 || how == 4) {
      ASSERT_EQ(MPI_Recv(dst.origin(), 1, recv_t, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st),
                MPI_SUCCESS);
    } else if (how == 1) {
      MPI_Request r;
      ASSERT_EQ(MPI_Irecv(dst.origin(), 1, recv_t, peer, 41, MPI_COMM_WORLD, &r), MPI_SUCCESS);
      ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
    } else if (how == 2) {
      std::vector<double> small(4, 1.0);
      ASSERT_EQ(MPI_Sendrecv(small.data(), 0, MPI_DOUBLE, peer, 99, dst.origin(), 1, recv_t, peer,
                             42, MPI_COMM_WORLD, &st),
                MPI_SUCCESS);
    } else if (how == 5 || how == 7) {
      MPI_Message msg;
      ASSERT_EQ(MPI_Mprobe(peer, 40 + how, MPI_COMM_WORLD, &msg, MPI_STATUS_IGNORE), MPI_SUCCESS);
      if (how == 5) {
        ASSERT_EQ(MPI_Mrecv(dst.origin(), 1, recv_t, &msg, &st), MPI_SUCCESS);
      } else {
        MPI_Request r;
        ASSERT_EQ(MPI_Imrecv(dst.origin(), 1, recv_t, &msg, &r), MPI_SUCCESS);
        ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
      }
    } else if (how == 6) {
      MPI_Request r;
      ASSERT_EQ(MPI_Recv_init(dst.origin(), 1, recv_t, peer, 46, MPI_COMM_WORLD, &r), MPI_SUCCESS);
      for (int round = 0; round < 2; ++round) {  // the second start lands the same bytes again
        if (round == 1) std::memcpy(dst.bytes.data(), initial.bytes.data(), dst.bytes.size());
        ASSERT_EQ(MPI_Start(&r), MPI_SUCCESS);
        ASSERT_EQ(MPI_Wait(&r, &st), MPI_SUCCESS);
      }
      MPI_Request_free(&r);
    } else {
      MPI_Request r[2];
      ASSERT_EQ(MPI_Irecv(dst.origin(), 1, recv_t, peer, 43, MPI_COMM_WORLD, &r[0]), MPI_SUCCESS);
      r[1] = MPI_REQUEST_NULL;
      MPI_Status sts[2];
      ASSERT_EQ(MPI_Waitall(2, r, sts), MPI_SUCCESS);
      st = sts[0];
    }
    if (me % 2 == 1) {
      ASSERT_EQ(dst.bytes, expected(send_t, 2, src, recv_t, 1, initial));
      int n = -1;
      MPI_Get_count(&st, elem, &n);
      EXPECT_EQ(n, elems);
      EXPECT_EQ(st.MPI_SOURCE, peer);
      EXPECT_EQ(st.MPI_TAG, 40 + how);
    }
    if (host) loom::transport::test_mark_host(dst.bytes.data(), 0);
  }
  if (device_method_on()) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (me % 2 == 0) {  // Recv_init takes two messages
      EXPECT_EQ(runtime()->rv->messages_lent() - lent0, static_cast<uint64_t>(kinds + 1));
    } else {
      EXPECT_EQ(runtime()->rv->messages_pulled() - pulled0, static_cast<uint64_t>(kinds + 1));
    }
  }
}

TEST_F(P2P, DeviceMessageIntoAnyReceive) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Datatype send_t, recv_t;
  MPI_Type_vector(64, 3, 5, MPI_DOUBLE, &send_t);            // 1536 packed bytes, sent twice
  MPI_Type_create_hvector(192, 2, 40, MPI_DOUBLE, &recv_t);  // 384 doubles, as sent
  MPI_Type_commit(&send_t);
  MPI_Type_commit(&recv_t);
  device_message_into_any_receive(me, peer, send_t, recv_t, MPI_DOUBLE, 384);
  MPI_Type_free(&send_t);
  MPI_Type_free(&recv_t);
}

// The same where the header the MPI brings into a host receive ends inside
// one of its elements (an int and a double, 12 bytes: 128 = 10 2/3 of
// them), which MPICH 4.0 fails through MPI_COMM_WORLD's handler unless
// Loom takes the message as bytes.
TEST_F(P2P, DeviceMessageIntoReceiveHeaderCannotFill) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Datatype pair_t, send_t, recv_t;
  const int bl[2] = {1, 1};
  const MPI_Aint packed[2] = {0, 4}, padded[2] = {0, 8};
  const MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE};
  MPI_Type_create_struct(2, bl, packed, ts, &pair_t);  // 12 bytes, no gap
  MPI_Type_contiguous(50, pair_t, &send_t);            // 600 bytes, sent twice
  MPI_Datatype spaced;
  MPI_Type_create_struct(2, bl, padded, ts, &spaced);  // the same, a gap after the int
  MPI_Type_contiguous(100, spaced, &recv_t);           // 100 pairs, as sent
  MPI_Type_commit(&pair_t);
  MPI_Type_commit(&send_t);
  MPI_Type_commit(&recv_t);
  device_message_into_any_receive(me, peer, send_t, recv_t, pair_t, 100);
  MPI_Type_free(&spaced);
  MPI_Type_free(&pair_t);
  MPI_Type_free(&send_t);
  MPI_Type_free(&recv_t);
}

// Zero-copy of derived types (LOOM_ZCOPY_TYPES): the receiver reads each
// message out of the sender's buffer in the sender's layout, which reached
// it once, ahead of the first header naming it. Three layouts go in one
// order and are received in the reverse one (the later headers need the
// earlier layouts kept), into a contiguous receive (one pack out of the
// sender's layout), another layout, and host memory; then the same again
// (the layouts are known by now), a truncated one, and a layout too long to
// send ahead, which is packed into a segment instead.
TEST_F(P2P, DerivedTypesLentInTheirLayout) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  Runtime* rt = runtime();
  // Peers off the node or behind a channel cannot map the sender's memory.
  const bool typed = rt && rt->zero_copy_on() && !std::getenv("LOOM_ZCOPY_TYPES") &&
                     !std::getenv("LOOM_TEST_OFF_NODE") && !std::getenv("LOOM_NCCL_P2P");
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Datatype send_t[3], recv_t[3];
  MPI_Type_vector(64, 3, 5, MPI_DOUBLE, &send_t[0]);  // 192 doubles each
  int sizes[3] = {8, 8, 8}, sub[3] = {4, 8, 6}, starts[3] = {2, 0, 1};
  MPI_Type_create_subarray(3, sizes, sub, starts, MPI_ORDER_C, MPI_DOUBLE, &send_t[1]);
  MPI_Type_create_hvector(96, 2, 40, MPI_DOUBLE, &send_t[2]);
  MPI_Type_contiguous(192, MPI_DOUBLE, &recv_t[0]);
  MPI_Type_vector(48, 4, 7, MPI_DOUBLE, &recv_t[1]);
  MPI_Type_create_hvector(192, 1, 24, MPI_DOUBLE, &recv_t[2]);
  for (int i = 0; i < 3; ++i) {
    MPI_Type_commit(&send_t[i]);
    MPI_Type_commit(&recv_t[i]);
  }
  const uint64_t typed0 = rt && rt->rv ? rt->rv->messages_lent_in_layout() : 0;
  for (int round = 0; round < 2; ++round) {
    std::vector<Buffer> src, dst, initial;
    for (int i = 0; i < 3; ++i) {
      src.emplace_back(send_t[i], 1, 30 + i + round);
      dst.emplace_back(recv_t[i], 1, 0);
    }
    initial = dst;
    loom::transport::test_mark_host(dst[2].bytes.data(), dst[2].bytes.size());
    if (me % 2 == 0) {
      MPI_Request r[3];
      for (int i = 0; i < 3; ++i)
        ASSERT_EQ(MPI_Isend(src[i].origin(), 1, send_t[i], peer, 10 + i, comm, &r[i]), MPI_SUCCESS);
      ASSERT_EQ(MPI_Waitall(3, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
    } else {
      for (int i = 2; i >= 0; --i) {
        MPI_Status st;
        ASSERT_EQ(MPI_Recv(dst[i].origin(), 1, recv_t[i], peer, 10 + i, comm, &st), MPI_SUCCESS);
        ASSERT_EQ(dst[i].bytes, expected(send_t[i], 1, src[i], recv_t[i], 1, initial[i]))
            << "message " << i << ", round " << round;
        int n = -1;
        MPI_Get_count(&st, MPI_DOUBLE, &n);
        EXPECT_EQ(n, 192);
      }
    }
    loom::transport::test_mark_host(dst[2].bytes.data(), 0);
  }
  {  // truncated: the part that fits lands, the rest of the receive stays
    Buffer src(send_t[1], 1, 77), dst(recv_t[1], 1, 0);
    Buffer initial = dst;
    MPI_Datatype half;
    MPI_Type_vector(24, 4, 7, MPI_DOUBLE, &half);
    MPI_Type_commit(&half);
    if (me % 2 == 0) {
      ASSERT_EQ(MPI_Send(src.origin(), 1, send_t[1], peer, 20, comm), MPI_SUCCESS);
    } else {
      int rc = MPI_Recv(dst.origin(), 1, half, peer, 20, comm, MPI_STATUS_IGNORE);
      int cls;
      MPI_Error_class(rc, &cls);
      EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
      // MPI leaves a truncated receive's contents open; Loom's pull lands
      // the part that fits, as the MPI's own receives here do.
      if (typed) {
        std::vector<unsigned char> want = expected(send_t[1], 1, src, recv_t[1], 1, initial);
        // The receive's origin, then half's extent.
        const size_t fits = static_cast<size_t>(-dst.lo) + (23 * 7 + 4) * sizeof(double);
        EXPECT_TRUE(std::equal(dst.bytes.begin(), dst.bytes.begin() + fits, want.begin()));
        EXPECT_TRUE(
            std::equal(dst.bytes.begin() + fits, dst.bytes.end(), initial.bytes.begin() + fits));
      }
    }
    MPI_Type_free(&half);
  }
  {  // 600 irregular blocks: too long to send ahead
    std::vector<int> lens(600), displs(600);
    for (int i = 0; i < 600; ++i) {
      lens[i] = 1 + i % 3;
      displs[i] = 5 * i + (i * i) % 2;
    }
    MPI_Datatype irregular;
    MPI_Type_indexed(600, lens.data(), displs.data(), MPI_INT, &irregular);
    MPI_Type_commit(&irregular);
    Buffer src(irregular, 1, 5), dst(irregular, 1, 0);
    Buffer initial = dst;
    const uint64_t before = rt && rt->rv ? rt->rv->messages_lent_in_layout() : 0;
    if (me % 2 == 0) {
      ASSERT_EQ(MPI_Send(src.origin(), 1, irregular, peer, 21, comm), MPI_SUCCESS);
      if (rt && rt->rv) {
        EXPECT_EQ(rt->rv->messages_lent_in_layout(), before);
      }
    } else {
      ASSERT_EQ(MPI_Recv(dst.origin(), 1, irregular, peer, 21, comm, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      ASSERT_EQ(dst.bytes, expected(irregular, 1, src, irregular, 1, initial));
    }
    MPI_Type_free(&irregular);
  }
  if (typed && me % 2 == 0) {
    EXPECT_EQ(rt->rv->messages_lent_in_layout() - typed0, 7u);
  }
  for (int i = 0; i < 3; ++i) {
    MPI_Type_free(&send_t[i]);
    MPI_Type_free(&recv_t[i]);
  }
  MPI_Comm_free(&comm);
}

// Small derived-type messages (under the device method's header) arrive
// staged; those landing together are unpacked in one batch (pull_together)
// rather than one by one at completion. Eight of two layouts, received by
// one Waitall in reverse order of sending; every byte checked.
TEST_F(P2P, SmallStagedMessagesUnpackedTogether) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Datatype t[2];
  MPI_Type_vector(6, 1, 3, MPI_DOUBLE, &t[0]);  // 48 bytes
  int sizes[3] = {4, 4, 4}, sub[3] = {2, 2, 2}, starts[3] = {1, 0, 2};
  MPI_Type_create_subarray(3, sizes, sub, starts, MPI_ORDER_C, MPI_DOUBLE, &t[1]);  // 64 bytes
  MPI_Type_commit(&t[0]);
  MPI_Type_commit(&t[1]);
  std::vector<Buffer> src, dst, initial;
  for (int i = 0; i < 8; ++i) {
    src.emplace_back(t[i % 2], 1, 90 + i);
    dst.emplace_back(t[i % 2], 1, 0);
  }
  initial = dst;
  MPI_Request r[16];
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(MPI_Irecv(dst[i].origin(), 1, t[i % 2], peer, 60 + i, MPI_COMM_WORLD, &r[i]),
              MPI_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);  // every receive posted: they land before the Waitall
  for (int i = 7; i >= 0; --i)
    ASSERT_EQ(MPI_Isend(src[i].origin(), 1, t[i % 2], peer, 60 + i, MPI_COMM_WORLD, &r[8 + i]),
              MPI_SUCCESS);
  MPI_Status st[16];
  ASSERT_EQ(MPI_Waitall(16, r, st), MPI_SUCCESS);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(dst[i].bytes, expected(t[i % 2], 1, src[i], t[i % 2], 1, initial[i])) << i;
    EXPECT_EQ(st[i].MPI_TAG, 60 + i);
  }
  MPI_Type_free(&t[0]);
  MPI_Type_free(&t[1]);
}

// A device-method message truncated: into a host buffer and a device one,
// each at least a header long, so Loom (not the MPI) finds the truncation,
// and nothing past the receive is written. (Without the device method the
// MPI truncates: Open MPI 4.1.4's shared-memory single copy then writes past
// the receive buffer, so this size is not tried there.)
TEST_F(P2P, DeviceMessageTruncated) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  if (!device_method_on()) GTEST_SKIP() << "device method off";
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  std::vector<int> big(1024);
  for (int i = 0; i < 1024; ++i) big[i] = i * 3 + 1;
  for (int host = 0; host < 2; ++host) {
    std::vector<int> small(200, -1);  // room for 100, then a guard
    if (host) loom::transport::test_mark_host(small.data(), small.size() * sizeof(int));
    if (me % 2 == 0) {
      MPI_Send(big.data(), 1024, MPI_INT, peer, 1, comm);
    } else {
      int rc = MPI_Recv(small.data(), 100, MPI_INT, peer, 1, comm, MPI_STATUS_IGNORE);
      int cls;
      MPI_Error_class(rc, &cls);
      EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
      for (int i = 0; i < 100; ++i) ASSERT_EQ(small[i], big[i]);
      for (int i = 100; i < 200; ++i) ASSERT_EQ(small[i], -1);
    }
    if (host) loom::transport::test_mark_host(small.data(), 0);
  }
  MPI_Comm_free(&comm);
}

TEST_F(P2P, TruncationIsReported) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  // The MPI itself truncates in every mode. A truncated header is acked
  // only where the MPI writes the part that fits, as Open MPI does and
  // MPICH does not: 96 bytes go as a SmallHeader in the device-method modes
  // (its block must come back), and under MPICH 36 bytes, under any header.
#if defined(OPEN_MPI) && OPEN_MPI
  const int n = 24;
#else
  const int n = 9;
#endif
  std::vector<int> big(n, 7), small(8, 0);
  // MPI_Recv, then MPI_Irecv completed by MPI_Wait, MPI_Test, MPI_Waitany
  // and MPI_Waitall: each acks the header it cut short (TearDown checks
  // that the sender's staging came back).
  // Mode channel (LOOM_NCCL_P2P=force) runs the blocking receive only: there
  // the MPI's MPI_Waitall of a later truncated MPI_Irecv hung now and then
  // (2026-11-28, not understood; the Irecv is posted, the message sent).
  const char* names[] = {"Recv", "Wait", "Test", "Waitany", "Waitall"};
  const char* p2p_channel = std::getenv("LOOM_NCCL_P2P");
  const int cases = p2p_channel && std::string(p2p_channel) == "force" ? 1 : 5;
  // MPICH 4.0 reports a failed request's error through MPI_COMM_WORLD's handler.
  MPI_Errhandler world_handler;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &world_handler);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  for (int how = 0; how < cases; ++how) {
    SCOPED_TRACE(names[how]);
    if (me % 2 == 0) {
      MPI_Send(big.data(), n, MPI_INT, peer, 1, comm);
      continue;
    }
    int rc = MPI_SUCCESS, flag = 0, index = -1;
    MPI_Status st;
    MPI_Request r = MPI_REQUEST_NULL;
    if (how > 0) {
      ASSERT_EQ(MPI_Irecv(small.data(), 8, MPI_INT, peer, 1, comm, &r), MPI_SUCCESS);
    }
    switch (how) {
      case 0:
        rc = MPI_Recv(small.data(), 8, MPI_INT, peer, 1, comm, MPI_STATUS_IGNORE);
        break;
      case 1:
        rc = MPI_Wait(&r, &st);
        break;
      case 2:
        while (!flag && rc == MPI_SUCCESS) rc = MPI_Test(&r, &flag, &st);
        break;
      case 3:
        rc = MPI_Waitany(1, &r, &index, &st);
        EXPECT_EQ(index, 0);
        break;
      default:
        rc = MPI_Waitall(1, &r, &st);
        if (rc == MPI_ERR_IN_STATUS) rc = st.MPI_ERROR;
        break;
    }
    int cls;
    MPI_Error_class(rc, &cls);
    EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, world_handler);
  MPI_Errhandler_free(&world_handler);
  MPI_Comm_free(&comm);
}

TEST_F(P2P, SendrecvRing) {
  const int me = rank(), n = size();
  MPI_Datatype t;
  MPI_Type_create_hvector(10, 1, 24, MPI_DOUBLE, &t);
  MPI_Type_commit(&t);
  Buffer src(t, 2, 200 + me), dst(t, 2, 0);
  Buffer initial = dst;
  MPI_Status st;
  ASSERT_EQ(MPI_Sendrecv(src.origin(), 2, t, (me + 1) % n, 11, dst.origin(), 2, t, (me + n - 1) % n,
                         11, MPI_COMM_WORLD, &st),
            MPI_SUCCESS);
  EXPECT_EQ(st.MPI_SOURCE, (me + n - 1) % n);
  Buffer from(t, 2, 200 + (me + n - 1) % n);
  ASSERT_EQ(dst.bytes, expected(t, 2, from, t, 2, initial));
  MPI_Type_free(&t);
}

// Communicators freed and split again with the ranks in another order (a
// freed handle is often reused): each message still goes to the rank its
// own communicator names. Loom maps a communicator's ranks to the world's
// and keeps the last map per thread. Every rank sends to rank 0 of the
// communicator, which on 2 ranks is world rank 1 in the reversed order.
TEST_F(P2P, CommunicatorsOfOtherRankOrders) {
  const int me = rank(), n = size();
  MPI_Datatype vec;
  MPI_Type_create_hvector(64, 2, 24, MPI_DOUBLE, &vec);
  MPI_Type_commit(&vec);
  for (int round = 0; round < 6; ++round) {
    const int key = round % 3 == 0 ? me : round % 3 == 1 ? n - 1 - me : (me + 1) % n;
    MPI_Comm c;
    ASSERT_EQ(MPI_Comm_split(MPI_COMM_WORLD, 0, key, &c), MPI_SUCCESS);
    int cr = -1;
    MPI_Comm_rank(c, &cr);
    MPI_Group g, w;
    MPI_Comm_group(c, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &w);
    std::vector<int> in(static_cast<size_t>(n)), world(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) in[static_cast<size_t>(i)] = i;
    MPI_Group_translate_ranks(g, n, in.data(), w, world.data());
    MPI_Group_free(&g);
    MPI_Group_free(&w);
    SCOPED_TRACE("round " + std::to_string(round) + ", rank " + std::to_string(cr) +
                 " of the split");
    // A derived type (packed) and a contiguous message (lent as it lies
    // where zero-copy is on: its ack comes back from the mapped rank).
    Buffer src(vec, 2, 300 + static_cast<unsigned>(me));
    std::vector<unsigned char> bytes(4096, static_cast<unsigned char>(me + 1));
    std::vector<MPI_Request> reqs;
    std::vector<Buffer> got;
    std::vector<std::vector<unsigned char>> got_bytes;
    if (cr == 0) {
      got.reserve(static_cast<size_t>(n));
      got_bytes.assign(static_cast<size_t>(n), std::vector<unsigned char>(4096, 0));
      for (int from = 0; from < n; ++from) {
        got.emplace_back(vec, 2, 0);
        reqs.emplace_back();
        ASSERT_EQ(MPI_Irecv(got.back().origin(), 2, vec, from, 5, c, &reqs.back()), MPI_SUCCESS);
        reqs.emplace_back();
        ASSERT_EQ(MPI_Irecv(got_bytes[static_cast<size_t>(from)].data(), 4096, MPI_BYTE, from, 6, c,
                            &reqs.back()),
                  MPI_SUCCESS);
      }
    }
    reqs.emplace_back();
    ASSERT_EQ(MPI_Isend(src.origin(), 2, vec, 0, 5, c, &reqs.back()), MPI_SUCCESS);
    reqs.emplace_back();
    ASSERT_EQ(MPI_Isend(bytes.data(), 4096, MPI_BYTE, 0, 6, c, &reqs.back()), MPI_SUCCESS);
    std::vector<MPI_Status> st(reqs.size());
    ASSERT_EQ(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), st.data()), MPI_SUCCESS);
    if (cr == 0)
      for (int from = 0; from < n; ++from) {
        const int from_world = world[static_cast<size_t>(from)];
        EXPECT_EQ(st[static_cast<size_t>(2 * from)].MPI_SOURCE, from);
        Buffer sent(vec, 2, 300 + static_cast<unsigned>(from_world)), initial(vec, 2, 0);
        EXPECT_EQ(got[static_cast<size_t>(from)].bytes, expected(vec, 2, sent, vec, 2, initial))
            << "from rank " << from << " of the split (world " << from_world << ")";
        EXPECT_EQ(got_bytes[static_cast<size_t>(from)],
                  std::vector<unsigned char>(4096, static_cast<unsigned char>(from_world + 1)));
      }
    MPI_Comm_free(&c);
  }
  MPI_Type_free(&vec);
}

TEST_F(P2P, FreedSendRequestStillDelivers) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  std::vector<int> data(1000);
  for (int i = 0; i < 1000; ++i) data[i] = i * 3 + me;
  std::vector<int> got(1000, -1);
  if (me % 2 == 0) {
    MPI_Request r;
    MPI_Isend(data.data(), 1000, MPI_INT, peer, 21, MPI_COMM_WORLD, &r);
    ASSERT_EQ(MPI_Request_free(&r), MPI_SUCCESS);
    EXPECT_EQ(r, MPI_REQUEST_NULL);
    MPI_Recv(got.data(), 1, MPI_INT, peer, 22, MPI_COMM_WORLD, MPI_STATUS_IGNORE);  // ack
  } else {
    MPI_Recv(got.data(), 1000, MPI_INT, peer, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(got[i], i * 3 + peer);
    MPI_Send(got.data(), 1, MPI_INT, peer, 22, MPI_COMM_WORLD);
  }
  // Let a later completion call reap the freed request.
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

// MPI allows freeing a type once the sends that use it are started. A
// device-method send's pack may run later (batched packs): it must still
// read the type's layout, not freed memory (AddressSanitizer's CI run).
TEST_F(P2P, TypeFreedWhileItsSendsAreInFlight) {
  const int me = rank(), peer = me ^ 1;
  if (peer >= size()) return;
  constexpr int kSends = 12;
  auto make = [](int k) {
    MPI_Datatype t;
    MPI_Type_vector(3 + k, 2, 5 + k % 3, MPI_INT, &t);
    MPI_Type_commit(&t);
    return t;
  };
  std::vector<Buffer> bufs;
  bufs.reserve(kSends);  // the buffers stay put while their messages are in flight
  std::vector<MPI_Request> reqs(kSends);
  std::vector<MPI_Datatype> kept(kSends, MPI_DATATYPE_NULL);
  for (int k = 0; k < kSends; ++k) {
    MPI_Datatype t = make(k);
    bufs.emplace_back(t, 2, me % 2 == 0 ? 300 + k : 0);
    if (me % 2 == 0) {
      ASSERT_EQ(MPI_Isend(bufs[k].origin(), 2, t, peer, 40 + k, MPI_COMM_WORLD, &reqs[k]),
                MPI_SUCCESS);
      MPI_Type_free(&t);  // the send is started: its pack may not have run yet
    } else {
      ASSERT_EQ(MPI_Irecv(bufs[k].origin(), 2, t, peer, 40 + k, MPI_COMM_WORLD, &reqs[k]),
                MPI_SUCCESS);
      kept[k] = t;
    }
  }
  ASSERT_EQ(MPI_Waitall(kSends, reqs.data(), MPI_STATUSES_IGNORE), MPI_SUCCESS);
  if (me % 2 == 0) return;
  for (int k = 0; k < kSends; ++k) {
    Buffer from(kept[k], 2, 300 + k), initial(kept[k], 2, 0);
    EXPECT_EQ(bufs[k].bytes, expected(kept[k], 2, from, kept[k], 2, initial)) << "send " << k;
    MPI_Type_free(&kept[k]);
  }
}

TEST_F(P2P, CancelledReceiveLeavesBufferAlone) {
  std::vector<int> buf(32, 42);
  MPI_Request r;
  MPI_Irecv(buf.data(), 32, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &r);
  MPI_Cancel(&r);
  MPI_Status st;
  MPI_Wait(&r, &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  EXPECT_TRUE(cancelled);
  for (int v : buf) ASSERT_EQ(v, 42);
}

TEST_F(P2P, BadArgumentsGiveMpiErrors) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int x = 0, cls = 0;
  MPI_Error_class(MPI_Send(&x, -1, MPI_INT, 0, 0, comm), &cls);
  EXPECT_EQ(cls, MPI_ERR_COUNT);
  MPI_Error_class(MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, comm), &cls);
  EXPECT_EQ(cls, MPI_ERR_TYPE);
  MPI_Request r;
  MPI_Error_class(MPI_Irecv(&x, -3, MPI_INT, 0, 0, comm, &r), &cls);
  EXPECT_EQ(cls, MPI_ERR_COUNT);
  MPI_Comm_free(&comm);
}

}  // namespace
}  // namespace loom::test
