// Windows of messages in flight, as bandwidth benchmarks post them
// (osu_bw, osu_bibw): one rank posts a window of MPI_Isend, the other a
// window of MPI_Irecv, each completes its window (MPI_Waitall, or loops of
// MPI_Waitany / Waitsome / Testany / Testsome / Testall, or MPI_Test
// polling), then the receiver sends a small ack. Sizes 1 B to 4 MiB,
// windows of 64 and 1024, both directions at once, and MPI_PROC_NULL peers
// mixed into the windows. Every received byte and every status is checked.
//
// Small sends are what the MPI completes at once, and for those it may hand
// every operation the same request handle (Open MPI's ompi_request_empty for
// sends it sends inline and for MPI_PROC_NULL, MPICH's built-in completed
// requests), so many operations in one window can carry one handle. The
// request table must then be empty after every window, and the staging
// returned (Loom logs an error on a handle it still holds; ctest fails the
// test on it).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "mpi/runtime.hpp"
#include "test_buffers.hpp"

namespace loom::test {
namespace {

constexpr int kTag = 100, kAckTag = 101;
constexpr unsigned char kUntouched = 0xA5;  // what a receive from MPI_PROC_NULL leaves

// How a rank completes its window of requests.
enum class How { kWaitall, kWaitany, kWaitsome, kTestall, kTestany, kTestsome, kTest };
const char* name(How h) {
  static const char* names[] = {"Waitall", "Waitany",  "Waitsome", "Testall",
                                "Testany", "Testsome", "Test"};
  return names[static_cast<int>(h)];
}

// Completes every request; st[i] gets the status of request i.
void complete(std::vector<MPI_Request>& reqs, How how, std::vector<MPI_Status>& st) {
  const int n = static_cast<int>(reqs.size());
  st.assign(reqs.size(), MPI_Status{});
  std::vector<int> idx(reqs.size());
  std::vector<MPI_Status> some(reqs.size());
  int left = n;
  while (left > 0) {
    int flag = 0, index = MPI_UNDEFINED, count = 0;
    switch (how) {
      case How::kWaitall:
        ASSERT_EQ(MPI_Waitall(n, reqs.data(), st.data()), MPI_SUCCESS);
        left = 0;
        break;
      case How::kTestall:
        ASSERT_EQ(MPI_Testall(n, reqs.data(), &flag, st.data()), MPI_SUCCESS);
        if (flag) left = 0;
        break;
      case How::kWaitany:
      case How::kTestany:
        if (how == How::kWaitany) {
          flag = 1;
          ASSERT_EQ(MPI_Waitany(n, reqs.data(), &index, &some[0]), MPI_SUCCESS);
        } else {
          ASSERT_EQ(MPI_Testany(n, reqs.data(), &index, &flag, &some[0]), MPI_SUCCESS);
        }
        if (!flag) break;
        ASSERT_NE(index, MPI_UNDEFINED) << left << " requests left";
        ASSERT_EQ(reqs[static_cast<size_t>(index)], MPI_REQUEST_NULL);
        st[static_cast<size_t>(index)] = some[0];
        --left;
        break;
      case How::kWaitsome:
      case How::kTestsome:
        ASSERT_EQ((how == How::kWaitsome ? MPI_Waitsome : MPI_Testsome)(n, reqs.data(), &count,
                                                                        idx.data(), some.data()),
                  MPI_SUCCESS);
        ASSERT_NE(count, MPI_UNDEFINED) << left << " requests left";
        for (int k = 0; k < count; ++k) st[static_cast<size_t>(idx[k])] = some[k];
        left -= count;
        break;
      case How::kTest:
        for (int i = 0; i < n; ++i) {
          if (reqs[static_cast<size_t>(i)] == MPI_REQUEST_NULL) continue;
          ASSERT_EQ(MPI_Test(&reqs[static_cast<size_t>(i)], &flag, &st[static_cast<size_t>(i)]),
                    MPI_SUCCESS);
          if (flag) --left;
        }
        break;
    }
  }
  for (const MPI_Request& r : reqs) ASSERT_EQ(r, MPI_REQUEST_NULL);
}

// The bytes of message `slot` of window `iter` from rank `from`: 8-byte
// words unlike each other, and unlike those of any other message.
uint64_t seed_of(int from, int iter, int slot) {
  return (uint64_t{static_cast<uint32_t>(from)} << 48) ^
         (uint64_t{static_cast<uint32_t>(iter)} << 32) ^
         (uint64_t{static_cast<uint32_t>(slot)} << 16);
}
uint64_t word(uint64_t seed, size_t j) {
  return ((seed + j) * 0x9E3779B97F4A7C15ull) ^ (seed >> 16);
}
void fill(std::vector<unsigned char>& b, uint64_t seed) {
  for (size_t j = 0; j * 8 < b.size(); ++j) {
    const uint64_t w = word(seed, j);
    std::memcpy(b.data() + j * 8, &w, std::min<size_t>(8, b.size() - j * 8));
  }
}
// Index of the first byte unlike fill(seed), or -1.
int64_t mismatch(const std::vector<unsigned char>& b, uint64_t seed) {
  for (size_t j = 0; j * 8 < b.size(); ++j) {
    const uint64_t w = word(seed, j);
    const size_t n = std::min<size_t>(8, b.size() - j * 8);
    if (std::memcmp(b.data() + j * 8, &w, n) == 0) continue;
    for (size_t k = 0; k < n; ++k)
      if (b[j * 8 + k] != reinterpret_cast<const unsigned char*>(&w)[k])
        return static_cast<int64_t>(j * 8 + k);
  }
  return -1;
}

// The status of a receive from MPI_PROC_NULL. (MPICH 4.0 reports source 0
// and tag 0 for it from MPI_Waitall and others, with or without Loom: there
// only the count is checked.)
bool empty_status(const MPI_Status& st) {
  int count = -1;
  MPI_Get_count(&st, MPI_BYTE, &count);
#ifdef OPEN_MPI
  if (st.MPI_SOURCE != MPI_PROC_NULL || st.MPI_TAG != MPI_ANY_TAG) return false;
#endif
  return count == 0;
}

struct Shape {
  int window = 64;
  size_t bytes = 1;
  int null_every = 0;  // every null_every-th slot's peer is MPI_PROC_NULL (0: none)
  bool bidirectional = false;
  How send_how = How::kWaitall, recv_how = How::kWaitall;
  bool null_slot(int i) const { return null_every > 0 && i % null_every == null_every - 1; }
};

std::string describe(const Shape& s) {
  return "window " + std::to_string(s.window) + ", " + std::to_string(s.bytes) + " bytes" +
         (s.bidirectional ? ", both ways" : "") +
         (s.null_every ? ", MPI_PROC_NULL every " + std::to_string(s.null_every) : "") + ", send " +
         name(s.send_how) + ", receive " + name(s.recv_how);
}

// One window: rank 0 sends and rank 1 receives (both do both when
// bidirectional), then the receiver acks. The window's receives are checked.
void one_window(const Shape& s, int iter) {
  const int me = world_rank(), peer = me ^ 1;
  const bool sends = s.bidirectional || me == 0, receives = s.bidirectional || me == 1;
  const size_t w = static_cast<size_t>(s.window);
  const int n = static_cast<int>(s.bytes);
  std::vector<std::vector<unsigned char>> out(sends ? w : 0), in(receives ? w : 0);
  std::vector<MPI_Request> reqs;
  for (size_t i = 0; i < in.size(); ++i) {
    in[i].assign(s.bytes, kUntouched);
    const int from = s.null_slot(static_cast<int>(i)) ? MPI_PROC_NULL : peer;
    reqs.emplace_back();
    ASSERT_EQ(MPI_Irecv(in[i].data(), n, MPI_BYTE, from, kTag, MPI_COMM_WORLD, &reqs.back()),
              MPI_SUCCESS);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].resize(s.bytes);
    fill(out[i], seed_of(me, iter, static_cast<int>(i)));
    const int to = s.null_slot(static_cast<int>(i)) ? MPI_PROC_NULL : peer;
    reqs.emplace_back();
    ASSERT_EQ(MPI_Isend(out[i].data(), n, MPI_BYTE, to, kTag, MPI_COMM_WORLD, &reqs.back()),
              MPI_SUCCESS);
  }
  std::vector<MPI_Status> st;
  complete(reqs, receives ? s.recv_how : s.send_how, st);
  if (::testing::Test::HasFatalFailure()) return;
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    int count = -1;
    MPI_Get_count(&st[i], MPI_BYTE, &count);
    if (s.null_slot(static_cast<int>(i))) {
      EXPECT_TRUE(empty_status(st[i]));
      ASSERT_EQ(std::count(in[i].begin(), in[i].end(), kUntouched), n) << "buffer written";
      continue;
    }
    EXPECT_EQ(st[i].MPI_SOURCE, peer);
    EXPECT_EQ(st[i].MPI_TAG, kTag);
    EXPECT_EQ(count, n);
    ASSERT_EQ(mismatch(in[i], seed_of(peer, iter, static_cast<int>(i))), -1) << "wrong byte";
  }
  if (!s.bidirectional) {  // the ack, device memory in the host-as-device mode
    int ack = me == 1 ? 4242 + iter : -1;
    if (me == 1) {
      ASSERT_EQ(MPI_Send(&ack, 1, MPI_INT, peer, kAckTag, MPI_COMM_WORLD), MPI_SUCCESS);
    } else {
      ASSERT_EQ(MPI_Recv(&ack, 1, MPI_INT, peer, kAckTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      ASSERT_EQ(ack, 4242 + iter);
    }
  }
  // Every operation of the window completed: Loom holds none of them.
  if (runtime()) {
    ASSERT_TRUE(runtime()->requests.empty()) << "the request table still holds an op";
  }
}

// Sizes min, min * step, ... up to max bytes: two windows each (one from
// 64 KiB, or for windows past 64). With pipelined chunks (mode pipeline,
// 4 KiB chunks) a window stops at 4096 chunks: larger messages are only
// more chunks.
void windows(Shape s, size_t max, size_t min = 1, size_t step = 2) {
  if (runtime() && runtime()->rv && runtime()->rv->chunk_bytes() > 0)
    max = std::min(max, runtime()->rv->chunk_bytes() * std::max(1, 4096 / s.window));
  for (size_t bytes = min; bytes <= max; bytes *= step) {
    s.bytes = bytes;
    SCOPED_TRACE(describe(s));
    const int iters = bytes >= (size_t{64} << 10) || s.window > 64 ? 1 : 2;
    for (int iter = 0; iter < iters; ++iter) {
      one_window(s, iter);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

class Window : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world_size() != 2) GTEST_SKIP() << "runs on 2 ranks";
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (runtime()) {
      // Pipelined chunk sends finish in the background: any Loom call
      // returns their staging once the MPI completes them.
      for (int i = 0; i < 5000 && runtime()->bytes_in_use() != 0; ++i) {
        MPI_Request none = MPI_REQUEST_NULL;
        MPI_Wait(&none, MPI_STATUS_IGNORE);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      EXPECT_EQ(runtime()->bytes_in_use(), 0u) << "staging not returned";
      EXPECT_TRUE(runtime()->requests.empty());
    }
  }
};

constexpr size_t kMiB = size_t{1} << 20;

// osu_bw: windows of 64 completed by MPI_Waitall, 1 B to 4 MiB.
TEST_F(Window, OsuBw) {
  windows(Shape{}, 4 * kMiB);
}

// Windows of 1024 in flight, 1 B to 64 KiB.
TEST_F(Window, Window1024) {
  Shape s;
  s.window = 1024;
  windows(s, 64 << 10, 1, 4);
}

// Each rank completes its window with its own loop, sender and receiver
// unlike (Waitany against Testsome, and so on).
TEST_F(Window, CompletionLoops) {
  const How hows[] = {How::kWaitany, How::kWaitsome, How::kTestall,
                      How::kTestany, How::kTestsome, How::kTest};
  for (size_t k = 0; k < std::size(hows); ++k) {
    Shape s;
    s.send_how = hows[k];
    s.recv_how = hows[(k + 1) % std::size(hows)];
    windows(s, 256 << 10, 1, 16);
    if (HasFatalFailure()) return;
  }
}

// Windows of 1024 completed one request at a time.
TEST_F(Window, Window1024Loops) {
  Shape s;
  s.window = 1024;
  s.send_how = How::kTestsome;
  s.recv_how = How::kWaitany;
  windows(s, 4 << 10, 1, 4096);
  s.send_how = How::kTest;
  s.recv_how = How::kTestany;
  windows(s, 4 << 10, 1, 4096);
}

// osu_bibw: both ranks send and receive a window at once.
TEST_F(Window, Bidirectional) {
  Shape s;
  s.bidirectional = true;
  windows(s, 1 * kMiB, 1, 16);
  s.recv_how = How::kWaitany;
  windows(s, 64 << 10, 1, 16);
  s.recv_how = How::kTestsome;
  windows(s, 64 << 10, 1, 16);
  s.window = 1024;
  s.recv_how = How::kWaitall;
  windows(s, 16 << 10, 1, 16);
}

// MPI_PROC_NULL peers mixed into the windows: those operations complete at
// once with an empty status and leave the buffer alone.
TEST_F(Window, ProcNullMixedIn) {
  const How hows[] = {How::kWaitall, How::kWaitany,  How::kWaitsome, How::kTestall,
                      How::kTestany, How::kTestsome, How::kTest};
  for (How how : hows) {
    Shape s;
    s.null_every = 3;
    s.send_how = how;
    s.recv_how = how;
    windows(s, 256 << 10, 1, 16);
    if (HasFatalFailure()) return;
    s.bidirectional = true;
    s.null_every = 2;
    windows(s, 64 << 10, 1, 64);
    if (HasFatalFailure()) return;
  }
  Shape all_null;  // nothing but MPI_PROC_NULL
  all_null.null_every = 1;
  windows(all_null, 4096, 1, 64);
}

// Every other call with an MPI_PROC_NULL peer moves nothing and touches
// nothing: blocking ones, matched probes and their receives (two in flight
// at once), a freed receive.
TEST_F(Window, ProcNullEveryCall) {
  std::vector<unsigned char> out(4096, 7), in(4096, kUntouched);
  auto untouched = [&] { return std::count(in.begin(), in.end(), kUntouched) == 4096; };
  MPI_Status st;
  ASSERT_EQ(MPI_Send(out.data(), 4096, MPI_BYTE, MPI_PROC_NULL, kTag, MPI_COMM_WORLD), MPI_SUCCESS);
  ASSERT_EQ(MPI_Ssend(out.data(), 4096, MPI_BYTE, MPI_PROC_NULL, kTag, MPI_COMM_WORLD),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Recv(in.data(), 4096, MPI_BYTE, MPI_PROC_NULL, kTag, MPI_COMM_WORLD, &st),
            MPI_SUCCESS);
  EXPECT_TRUE(empty_status(st));
  ASSERT_EQ(MPI_Sendrecv(out.data(), 4096, MPI_BYTE, MPI_PROC_NULL, kTag, in.data(), 4096, MPI_BYTE,
                         MPI_PROC_NULL, kTag, MPI_COMM_WORLD, &st),
            MPI_SUCCESS);
  EXPECT_TRUE(empty_status(st));
  EXPECT_TRUE(untouched());

  MPI_Message msg;
  ASSERT_EQ(MPI_Mprobe(MPI_PROC_NULL, kTag, MPI_COMM_WORLD, &msg, &st), MPI_SUCCESS);
  EXPECT_EQ(msg, MPI_MESSAGE_NO_PROC);
  ASSERT_EQ(MPI_Mrecv(in.data(), 4096, MPI_BYTE, &msg, &st), MPI_SUCCESS);
  EXPECT_TRUE(empty_status(st));
  MPI_Request r[3];
  for (int i = 0; i < 2; ++i) {
    int flag = 0;
    ASSERT_EQ(MPI_Improbe(MPI_PROC_NULL, kTag, MPI_COMM_WORLD, &flag, &msg, &st), MPI_SUCCESS);
    ASSERT_EQ(flag, 1);
    ASSERT_EQ(MPI_Imrecv(in.data(), 4096, MPI_BYTE, &msg, &r[i]), MPI_SUCCESS);
  }
  ASSERT_EQ(MPI_Issend(out.data(), 4096, MPI_BYTE, MPI_PROC_NULL, kTag, MPI_COMM_WORLD, &r[2]),
            MPI_SUCCESS);
  MPI_Status sts[3];
  ASSERT_EQ(MPI_Waitall(3, r, sts), MPI_SUCCESS);
  EXPECT_TRUE(empty_status(sts[0]));
  EXPECT_TRUE(empty_status(sts[1]));
  EXPECT_TRUE(untouched());

  ASSERT_EQ(MPI_Irecv(in.data(), 4096, MPI_BYTE, MPI_PROC_NULL, kTag, MPI_COMM_WORLD, &r[0]),
            MPI_SUCCESS);
  ASSERT_EQ(MPI_Request_free(&r[0]), MPI_SUCCESS);
  EXPECT_EQ(r[0], MPI_REQUEST_NULL);
  EXPECT_TRUE(untouched());
}

}  // namespace
}  // namespace loom::test
