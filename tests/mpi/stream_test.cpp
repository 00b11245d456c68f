// Stream-triggered communication (include/loom/stream.h) on emulated
// streams: every function of MPICH's MPIX stream API and of the MPIS_*
// persistent queue API, on 2 and 4 ranks, with host buffers and (under
// LOOM_TEST_HOST_AS_DEVICE=1) the device path's staging, packing and
// unpacking on the stream. "Kernels" are host functions on the stream: the
// data a send takes is written by the stream just before it, and received
// data is read by the stream just after the wait, so an engine that moved
// data out of stream order fails. The oracle is the MPI's own pack/unpack.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "loom/stream.h"
#include "mpi_buffer_calls.hpp"  // LOOM_MPI_HAS_<fn>: what this MPI declares
#include "random_types.hpp"
#include "stream_expect.hpp"
#include "test_buffers.hpp"

namespace loom::test {
namespace {

// Runs a std::function on the stream (the tests' "kernels").
void run_task(void* p) {
  auto* f = static_cast<std::function<void()>*>(p);
  (*f)();
  delete f;
}
void on_stream(void* s, std::function<void()> f) {
  ASSERT_EQ(loom_stream_launch_host(s, run_task, new std::function<void()>(std::move(f))),
            MPI_SUCCESS);
}

void fill(Buffer& b, unsigned seed) {
  for (size_t i = 0; i < b.bytes.size(); ++i)
    b.bytes[i] = static_cast<unsigned char>((i * 37 + seed * 101) >> 2);
}

MPI_Info stream_info(void* s) {
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "type", "cudaStream_t");
  MPIX_Info_set_hex(info, "value", &s, sizeof(s));
  return info;
}

class Stream : public ::testing::Test {
 protected:
  void SetUp() override {
    int provided = 0;
    MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "the MPI gives no MPI_THREAD_MULTIPLE";
    if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    ASSERT_EQ(loom_host_stream_create(&s_), MPI_SUCCESS);
    MPI_Info info = stream_info(s_);
    ASSERT_EQ(MPIX_Stream_create(info, &stream_), MPI_SUCCESS);
    MPI_Info_free(&info);
    ASSERT_EQ(MPIX_Stream_comm_create(MPI_COMM_WORLD, stream_, &comm_), MPI_SUCCESS);
  }
  void TearDown() override {
    if (!s_) return;
    EXPECT_EQ(loom_stream_synchronize(s_), MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    EXPECT_EQ(MPIX_Stream_free(&stream_), MPI_SUCCESS);
    EXPECT_EQ(loom_host_stream_free(s_), MPI_SUCCESS);
  }
  void sync() { ASSERT_EQ(loom_stream_synchronize(s_), MPI_SUCCESS); }

  void* s_ = nullptr;
  MPIX_Stream stream_ = MPIX_STREAM_NULL;
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// The types every data test runs: contiguous, strided, indexed with gaps,
// a struct, and random nested types.
std::vector<std::pair<std::string, MPI_Datatype>> test_types() {
  std::vector<std::pair<std::string, MPI_Datatype>> out;
  MPI_Datatype t;
  MPI_Type_contiguous(1000, MPI_INT, &t);
  out.emplace_back("contiguous", t);
  MPI_Type_vector(64, 3, 7, MPI_DOUBLE, &t);
  out.emplace_back("vector", t);
  int bl[3] = {2, 5, 1}, disp[3] = {0, 4, 17};
  MPI_Type_indexed(3, bl, disp, MPI_SHORT, &t);
  out.emplace_back("indexed", t);
  int sbl[2] = {1, 3};
  MPI_Aint sd[2] = {0, 8};
  MPI_Datatype st[2] = {MPI_CHAR, MPI_FLOAT};
  MPI_Type_create_struct(2, sbl, sd, st, &t);
  out.emplace_back("struct", t);
  for (uint64_t seed = 11; seed <= 15; ++seed) {
    RandomTypes gen(seed * 7919);
    t = gen.make(3);
    out.emplace_back("random " + gen.recipe(), t);
  }
  for (auto& [name, type] : out) MPI_Type_commit(&type);
  return out;
}

// A ping-pong of every type: the "kernel" before the send writes the data,
// the one after the receive copies it out; the peer echoes what it got.
TEST_F(Stream, PingPongEveryTypeInStreamOrder) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  const long long lent_before = lent_messages();
  const long long early_sends_before = early_sends();
  for (auto& [name, t] : test_types()) {
    SCOPED_TRACE(name);
    for (int count : {1, 3}) {
      Buffer src(t, count, 1), dst(t, count, 0);
      const Buffer initial = dst;
      auto seen = std::make_shared<std::vector<unsigned char>>();
      if (me % 2 == 0) {
        on_stream(s_, [&src, count] { fill(src, 7u + count); });
        ASSERT_EQ(MPIX_Send_enqueue(src.origin(), count, t, peer, 3, comm_), MPI_SUCCESS);
        MPI_Status st;
        ASSERT_EQ(MPIX_Recv_enqueue(dst.origin(), count, t, peer, 4, comm_, &st), MPI_SUCCESS);
        on_stream(s_, [&dst, seen] { *seen = dst.bytes; });
        sync();
        EXPECT_EQ(st.MPI_SOURCE, peer);
        EXPECT_EQ(st.MPI_TAG, 4);
        int got = -1, size = 0;
        MPI_Type_size(t, &size);
        MPI_Get_count(&st, t, &got);
        if (size > 0) {
          EXPECT_EQ(got, count);
        }
        Buffer sent(t, count, 1);
        fill(sent, 7u + count);
        // The echo went through the peer's buffer (initially like ours).
        Buffer mid = initial;
        mid.bytes = expected(t, count, sent, t, count, initial);
        EXPECT_EQ(*seen, expected(t, count, mid, t, count, initial));
      } else {
        ASSERT_EQ(MPIX_Recv_enqueue(dst.origin(), count, t, peer, 3, comm_, MPI_STATUS_IGNORE),
                  MPI_SUCCESS);
        ASSERT_EQ(MPIX_Send_enqueue(dst.origin(), count, t, peer, 4, comm_), MPI_SUCCESS);
        sync();
      }
    }
    MPI_Type_free(&t);
  }
  check_lent(lent_before);
  check_early_sends(early_sends_before);
}

// Enqueued device messages and regular ones meet on one communicator both
// ways: a regular receive takes an enqueued send (under the device method,
// its header and lent arena), an enqueued receive a regular send, and a
// message too long for an enqueued receive is an error in its status (a
// small one: Open MPI 4.1's shared memory writes all of a message above its
// eager limit into a receive it truncates, past the buffer: docs/stream.md).
TEST_F(Stream, EnqueuedAndRegularMessagesMeet) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  MPI_Datatype t, u;
  MPI_Type_vector(200, 3, 5, MPI_DOUBLE, &t);
  MPI_Type_vector(20, 3, 5, MPI_DOUBLE, &u);
  MPI_Type_commit(&t);
  MPI_Type_commit(&u);
  Buffer sent(t, 2, 1);
  fill(sent, 42);
  if (me % 2 == 0) {
    Buffer a(t, 2, 1), b(t, 2, 0), small(u, 1, 0);
    const Buffer b0 = b;
    on_stream(s_, [&a] { fill(a, 42); });
    ASSERT_EQ(MPIX_Send_enqueue(a.origin(), 2, t, peer, 30, comm_), MPI_SUCCESS);
    MPI_Status st, st2;
    ASSERT_EQ(MPIX_Recv_enqueue(b.origin(), 2, t, peer, 31, comm_, &st), MPI_SUCCESS);
    auto seen = std::make_shared<std::vector<unsigned char>>();
    on_stream(s_, [&b, seen] { *seen = b.bytes; });
    ASSERT_EQ(MPIX_Recv_enqueue(small.origin(), 1, u, peer, 32, comm_, &st2), MPI_SUCCESS);
    // A message too short for a header (its bytes come raw) into a receive
    // that could take a lent one.
    Buffer wide(MPI_DOUBLE, 64, 0);
    const Buffer wide0 = wide;
    MPI_Status st3;
    ASSERT_EQ(MPIX_Recv_enqueue(wide.origin(), 64, MPI_DOUBLE, peer, 33, comm_, &st3), MPI_SUCCESS);
    auto seen_wide = std::make_shared<std::vector<unsigned char>>();
    on_stream(s_, [&wide, seen_wide] { *seen_wide = wide.bytes; });
    sync();
    Buffer three(MPI_DOUBLE, 3, 5);
    EXPECT_EQ(*seen_wide, expected(MPI_DOUBLE, 3, three, MPI_DOUBLE, 64, wide0));
    int got3 = -1;
    MPI_Get_count(&st3, MPI_DOUBLE, &got3);
    EXPECT_EQ(got3, 3);
    EXPECT_EQ(*seen, expected(t, 2, sent, t, 2, b0));
    EXPECT_EQ(st.MPI_SOURCE, peer);
    EXPECT_EQ(st.MPI_TAG, 31);
    int cls = -1;
    MPI_Error_class(st2.MPI_ERROR, &cls);
    EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
  } else {
    Buffer a(t, 2, 0), two(u, 2, 1);
    const Buffer a0 = a;
    ASSERT_EQ(MPI_Recv(a.origin(), 2, t, peer, 30, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(a.bytes, expected(t, 2, sent, t, 2, a0));
    ASSERT_EQ(MPI_Send(a.origin(), 2, t, peer, 31, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send(two.origin(), 2, u, peer, 32, comm_), MPI_SUCCESS);
    Buffer three(MPI_DOUBLE, 3, 5);
    ASSERT_EQ(MPI_Send(three.origin(), 3, MPI_DOUBLE, peer, 33, comm_), MPI_SUCCESS);
  }
  MPI_Type_free(&t);
  MPI_Type_free(&u);
}

// A type freed right after the call that enqueued its send or receive: the
// operation is posted when the stream gets there, after the free (MPI lets
// a type be freed while communication that uses it is pending), so the
// handle must outlive the user's free.
TEST_F(Stream, TypeFreedWhileEnqueued) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  MPI_Datatype t, same;  // `same`: the layout again, for the checks
  MPI_Type_vector(64, 3, 7, MPI_DOUBLE, &t);
  MPI_Type_commit(&t);
  MPI_Type_vector(64, 3, 7, MPI_DOUBLE, &same);
  MPI_Type_commit(&same);
  Buffer buf(same, 2, me % 2 == 0 ? 1 : 0);
  const Buffer initial = buf;
  auto seen = std::make_shared<std::vector<unsigned char>>();
  // The stream waits until both calls have returned and the type is freed.
  auto go = std::make_shared<std::atomic<bool>>(false);
  on_stream(s_, [go] {
    while (!go->load()) std::this_thread::yield();
  });
  if (me % 2 == 0) {
    on_stream(s_, [&buf] { fill(buf, 5); });
    ASSERT_EQ(MPIX_Send_enqueue(buf.origin(), 2, t, peer, 9, comm_), MPI_SUCCESS);
  } else {
    ASSERT_EQ(MPIX_Recv_enqueue(buf.origin(), 2, t, peer, 9, comm_, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    on_stream(s_, [&buf, seen] { *seen = buf.bytes; });
  }
  ASSERT_EQ(MPI_Type_free(&t), MPI_SUCCESS);
  EXPECT_EQ(t, MPI_DATATYPE_NULL);
  go->store(true);
  sync();
  if (me % 2 == 1) {
    Buffer sent(same, 2, 1);
    fill(sent, 5);
    EXPECT_EQ(*seen, expected(same, 2, sent, same, 2, initial));
  }
  MPI_Type_free(&same);
}

// Many messages in flight: Isend/Irecv_enqueue, Wait_enqueue and
// Waitall_enqueue, statuses, a receive shorter than its buffer (the bytes
// past what arrived stay as they were).
TEST_F(Stream, NonblockingWaitallAndShortReceives) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  MPI_Datatype t;
  MPI_Type_vector(8, 2, 3, MPI_INT, &t);
  MPI_Type_commit(&t);
  const int n = 16;
  std::vector<Buffer> src, dst;
  for (int i = 0; i < n; ++i) {
    src.emplace_back(t, 3, 50 + i);
    dst.emplace_back(t, 3, 0);
  }
  const std::vector<Buffer> initial = dst;
  std::vector<MPI_Request> reqs(2 * n);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(MPIX_Irecv_enqueue(dst[i].origin(), 3, t, peer, i, comm_, &reqs[i]), MPI_SUCCESS);
  // Message i carries 1 + i % 3 elements.
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(MPIX_Isend_enqueue(src[i].origin(), 1 + i % 3, t, peer, i, comm_, &reqs[n + i]),
              MPI_SUCCESS);
  std::vector<MPI_Status> st(2 * n);
  ASSERT_EQ(MPIX_Wait_enqueue(&reqs[0], &st[0]), MPI_SUCCESS);
  EXPECT_EQ(reqs[0], MPI_REQUEST_NULL);
  ASSERT_EQ(MPIX_Waitall_enqueue(2 * n - 1, &reqs[1], &st[1]), MPI_SUCCESS);
  for (auto& r : reqs) EXPECT_EQ(r, MPI_REQUEST_NULL);
  sync();
  for (int i = 0; i < n; ++i) {
    SCOPED_TRACE("message " + std::to_string(i));
    int got = -1;
    MPI_Get_count(&st[i], t, &got);
    EXPECT_EQ(got, 1 + i % 3);
    EXPECT_EQ(st[i].MPI_TAG, i);
    EXPECT_EQ(st[i].MPI_SOURCE, peer);
    Buffer peer_src(t, 3, 50 + i);
    EXPECT_EQ(dst[i].bytes, expected(t, 1 + i % 3, peer_src, t, 3, initial[i]));
  }
  MPI_Type_free(&t);
}

// A burst of MPIX_Isend_enqueue whose packs the stream holds back to go as
// one launch (more than one launch's worth, with a blocking send between):
// messages of one tag still match in call order, each with the data the
// stream wrote before its call.
TEST_F(Stream, HeldSendsKeepCallOrder) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  MPI_Datatype t;
  MPI_Type_vector(6, 1, 3, MPI_INT, &t);
  MPI_Type_commit(&t);
  const int n = 60, blocking_at = 55;  // past Channel::kHeldMax (48) in one burst
  std::vector<Buffer> bufs;
  for (int i = 0; i < n; ++i) bufs.emplace_back(t, 1, 0);
  const std::vector<Buffer> initial = bufs;
  std::vector<MPI_Request> reqs(n, MPI_REQUEST_NULL);
  if (me % 2 == 0) {
    const long long held_before = held_sends();
    for (int i = 0; i < n; ++i) {
      on_stream(s_, [&bufs, i] { fill(bufs[i], 200u + i); });
      if (i == blocking_at)
        ASSERT_EQ(MPIX_Send_enqueue(bufs[i].origin(), 1, t, peer, 9, comm_), MPI_SUCCESS);
      else
        ASSERT_EQ(MPIX_Isend_enqueue(bufs[i].origin(), 1, t, peer, 9, comm_, &reqs[i]),
                  MPI_SUCCESS);
    }
    ASSERT_EQ(MPIX_Waitall_enqueue(n, reqs.data(), MPI_STATUSES_IGNORE), MPI_SUCCESS);
    sync();
    check_held(held_before);
  } else {
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(MPIX_Irecv_enqueue(bufs[i].origin(), 1, t, peer, 9, comm_, &reqs[i]), MPI_SUCCESS);
    ASSERT_EQ(MPIX_Waitall_enqueue(n, reqs.data(), MPI_STATUSES_IGNORE), MPI_SUCCESS);
    sync();
    for (int i = 0; i < n; ++i) {
      SCOPED_TRACE("message " + std::to_string(i));
      Buffer sent(t, 1, 0);
      fill(sent, 200u + i);
      EXPECT_EQ(bufs[i].bytes, expected(t, 1, sent, t, 1, initial[i]));
    }
  }
  MPI_Type_free(&t);
}

// A held send goes even when the program makes no further call of Loom's
// for a while (Engine::flusher): its peer's receive completes meanwhile.
TEST_F(Stream, HeldSendGoesWithoutAnotherCall) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  MPI_Datatype t;
  MPI_Type_vector(4, 2, 5, MPI_DOUBLE, &t);
  MPI_Type_commit(&t);
  Buffer src(t, 2, 31), dst(t, 2, 0);
  const Buffer initial = dst;
  constexpr double kQuiet = 0.5;  // seconds the sender makes no call
  MPI_Barrier(MPI_COMM_WORLD);
  if (me % 2 == 0) {
    MPI_Request r;
    ASSERT_EQ(MPIX_Isend_enqueue(src.origin(), 2, t, peer, 5, comm_, &r), MPI_SUCCESS);
    std::this_thread::sleep_for(std::chrono::duration<double>(kQuiet));
    ASSERT_EQ(MPIX_Wait_enqueue(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
    sync();
  } else {
    // A plain receive: nothing this rank does makes the sender's stream go.
    const double t0 = MPI_Wtime();
    ASSERT_EQ(MPI_Recv(dst.origin(), 2, t, peer, 5, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_LT(MPI_Wtime() - t0, kQuiet / 2) << "the send waited for its sender's next call";
    EXPECT_EQ(dst.bytes, expected(t, 2, src, t, 2, initial));
  }
  MPI_Type_free(&t);
}

// A short message that lands before the stream reaches its receive (a
// receive may be posted when it is enqueued: LOOM_STREAM_EARLY_RECV): the
// bytes it leaves are those the stream's work before the receive wrote,
// not those the buffer held when the receive was enqueued.
TEST_F(Stream, ShortMessageBeforeTheStreamGetsThere) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  MPI_Datatype t;
  MPI_Type_vector(8, 2, 3, MPI_INT, &t);
  MPI_Type_commit(&t);
  const long long early_before = early_receives();
  for (bool blocking : {false, true}) {
    SCOPED_TRACE(blocking ? "MPIX_Recv_enqueue" : "MPIX_Irecv_enqueue");
    Buffer src(t, 3, 61), dst(t, 3, 0), later(t, 3, 62);
    auto seen = std::make_shared<std::vector<unsigned char>>();
    // The stream is held while the message lands, then writes the buffer.
    on_stream(s_, [&dst, &later] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      dst.bytes = later.bytes;
    });
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Status st;
    if (blocking) {
      ASSERT_EQ(MPIX_Recv_enqueue(dst.origin(), 3, t, peer, 30, comm_, &st), MPI_SUCCESS);
    } else {
      ASSERT_EQ(MPIX_Irecv_enqueue(dst.origin(), 3, t, peer, 30, comm_, &r), MPI_SUCCESS);
      ASSERT_EQ(MPIX_Wait_enqueue(&r, &st), MPI_SUCCESS);
    }
    on_stream(s_, [&dst, seen] { *seen = dst.bytes; });
    ASSERT_EQ(MPI_Send(src.origin(), 1, t, peer, 30, comm_), MPI_SUCCESS);
    sync();
    int got = -1;
    MPI_Get_count(&st, t, &got);
    EXPECT_EQ(got, 1);
    Buffer peer_src(t, 3, 61);
    EXPECT_EQ(*seen, expected(t, 1, peer_src, t, 3, later));
    MPI_Barrier(MPI_COMM_WORLD);
  }
  check_early(early_before);
  MPI_Type_free(&t);
}

// A receive posted when enqueued stays behind an earlier receive of its
// communicator that waits for its stream (a count of 0 does: no staging),
// so matching follows the order of the calls.
TEST_F(Stream, EarlyReceiveKeepsCallOrder) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  Buffer four(MPI_INT, 4, 0);
  const long long early_before = early_receives();
  if (me % 2 == 1) {
    on_stream(s_, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
    MPI_Status st0, st1;
    ASSERT_EQ(MPIX_Recv_enqueue(nullptr, 0, MPI_INT, peer, 9, comm_, &st0), MPI_SUCCESS);
    ASSERT_EQ(MPIX_Recv_enqueue(four.origin(), 4, MPI_INT, peer, 9, comm_, &st1), MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    sync();
    int n0 = -1, n1 = -1;
    MPI_Get_count(&st0, MPI_INT, &n0);
    MPI_Get_count(&st1, MPI_INT, &n1);
    EXPECT_EQ(st0.MPI_ERROR, MPI_SUCCESS);
    EXPECT_EQ(n0, 0);
    EXPECT_EQ(n1, 4);
    const int* v = reinterpret_cast<const int*>(four.origin());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(v[i], 40 + i);
    check_early(early_before);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    const int v[4] = {40, 41, 42, 43};
    ASSERT_EQ(MPI_Send(v, 0, MPI_INT, peer, 9, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send(v, 4, MPI_INT, peer, 9, comm_), MPI_SUCCESS);
  }
}

// Enqueued and regular operations on one communicator keep MPI's order:
// an enqueued operation is posted when the stream reaches it.
TEST_F(Stream, OrderWithRegularOperations) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  int a = 0, b = 0;
  if (me % 2 == 0) {
    a = 111;
    b = 222;
    ASSERT_EQ(MPIX_Send_enqueue(&a, 1, MPI_INT, peer, 5, comm_), MPI_SUCCESS);
    sync();  // the enqueued send is posted: it comes first
    ASSERT_EQ(MPI_Send(&b, 1, MPI_INT, peer, 5, comm_), MPI_SUCCESS);
  } else {
    ASSERT_EQ(MPI_Recv(&a, 1, MPI_INT, peer, 5, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    ASSERT_EQ(MPI_Recv(&b, 1, MPI_INT, peer, 5, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    EXPECT_EQ(a, 111);
    EXPECT_EQ(b, 222);
  }
  // A regular receive posted before an enqueued one matches first.
  int x = 0, y = 0;
  if (me % 2 == 1) {
    MPI_Request r;
    ASSERT_EQ(MPI_Irecv(&x, 1, MPI_INT, peer, 6, comm_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPIX_Recv_enqueue(&y, 1, MPI_INT, peer, 6, comm_, MPI_STATUS_IGNORE), MPI_SUCCESS);
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_EQ(MPI_Wait(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
    sync();
    EXPECT_EQ(x, 1);
    EXPECT_EQ(y, 2);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    int one = 1, two = 2;
    ASSERT_EQ(MPI_Send(&one, 1, MPI_INT, peer, 6, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPI_Send(&two, 1, MPI_INT, peer, 6, comm_), MPI_SUCCESS);
  }
}

// Wildcard receives: rank 0 takes one message from every other rank.
TEST_F(Stream, WildcardReceives) {
  const int me = world_rank(), n = world_size();
  std::vector<int> got(n, -1);
  std::vector<MPI_Status> st(n);
  if (me == 0) {
    for (int i = 1; i < n; ++i)
      ASSERT_EQ(MPIX_Recv_enqueue(&got[i], 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &st[i]),
                MPI_SUCCESS);
    sync();
    std::set<int> sources;
    for (int i = 1; i < n; ++i) {
      EXPECT_EQ(got[i], 1000 + st[i].MPI_SOURCE);
      EXPECT_EQ(st[i].MPI_TAG, 40 + st[i].MPI_SOURCE);
      sources.insert(st[i].MPI_SOURCE);
    }
    EXPECT_EQ(static_cast<int>(sources.size()), n - 1);
  } else {
    int v = 1000 + me;
    ASSERT_EQ(MPIX_Send_enqueue(&v, 1, MPI_INT, 0, 40 + me, comm_), MPI_SUCCESS);
    sync();
  }
}

// A user op over MPI_Type_vector(10, 2, 5, MPI_DOUBLE) elements: 2 doubles
// every 5, extent 47 doubles.
void sum_vector_elements(void* in, void* inout, int* len, MPI_Datatype*) {
  const double* x = static_cast<const double*>(in);
  double* y = static_cast<double*>(inout);
  for (int e = 0; e < *len; ++e)
    for (int blk = 0; blk < 10; ++blk)
      for (int k = 0; k < 2; ++k) y[e * 47 + blk * 5 + k] += x[e * 47 + blk * 5 + k];
}

// Allreduce in stream order: contiguous, in place and not; the oracle is
// the MPI's own allreduce. A predefined op on a derived type is refused at
// the call, as the MPI's own allreduce refuses it (not later, by the stream).
TEST_F(Stream, AllreduceEnqueue) {
  const int me = world_rank();
  std::vector<int> in(1000), out(1000, -1), ref(1000);
  on_stream(s_, [&in, me] {
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i) * (me + 1);
  });
  ASSERT_EQ(MPIX_Allreduce_enqueue(in.data(), out.data(), 1000, MPI_INT, MPI_SUM, comm_),
            MPI_SUCCESS);
  ASSERT_EQ(MPIX_Allreduce_enqueue(MPI_IN_PLACE, in.data(), 1000, MPI_INT, MPI_MAX, comm_),
            MPI_SUCCESS);
  sync();
  std::vector<int> mine(1000);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<int>(i) * (me + 1);
  ASSERT_EQ(PMPI_Allreduce(mine.data(), ref.data(), 1000, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
            MPI_SUCCESS);
  EXPECT_EQ(out, ref);
  ASSERT_EQ(PMPI_Allreduce(mine.data(), ref.data(), 1000, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
            MPI_SUCCESS);
  EXPECT_EQ(in, ref);

  MPI_Datatype v;
  MPI_Type_vector(10, 2, 5, MPI_DOUBLE, &v);
  MPI_Type_commit(&v);
  std::vector<double> a(150), b(150, -7.0), c(150, -7.0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5 * static_cast<double>(i) + me;
  int cls = MPI_SUCCESS;
  MPI_Error_class(PMPI_Allreduce(a.data(), c.data(), 3, v, MPI_SUM, MPI_COMM_WORLD), &cls);
  EXPECT_EQ(cls, MPI_ERR_OP) << "the oracle: the MPI refuses MPI_SUM on a derived type";
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Error_class(MPIX_Allreduce_enqueue(a.data(), b.data(), 3, v, MPI_SUM, comm_), &cls);
  EXPECT_EQ(cls, MPI_ERR_OP);
  sync();
  EXPECT_EQ(b, std::vector<double>(150, -7.0));  // nothing ran

  // A user op takes the derived type: the data sums, the gaps stay -7.
  MPI_Op sum_v;
  MPI_Op_create(&sum_vector_elements, 1, &sum_v);
  ASSERT_EQ(MPIX_Allreduce_enqueue(a.data(), b.data(), 3, v, sum_v, comm_), MPI_SUCCESS);
  sync();
  ASSERT_EQ(PMPI_Allreduce(a.data(), c.data(), 3, v, sum_v, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(b, c);
  const int n = world_size();
  for (size_t i = 0; i < b.size(); ++i) {
    const size_t e = i % 47;                              // within an element (extent 47 doubles)
    const bool data = i < 3 * 47 && e % 5 < 2 && e < 47;  // blocks of the 3 elements
    const double want = data ? n * 0.5 * static_cast<double>(i) + n * (n - 1) / 2.0 : -7.0;
    EXPECT_EQ(b[i], want) << "double " << i;
  }
  MPI_Op_free(&sum_v);
  MPI_Type_free(&v);
}

#ifdef LOOM_MPI_HAS_MPIX_Send_enqueue_c
// MPICH's large-count forms take Loom's streams as the int forms do (the
// MPI's own would get a communicator with no stream of its own).
TEST_F(Stream, LargeCountForms) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) GTEST_SKIP() << "odd rank out";
  std::vector<int> out(300), in(300, -1), back(300, -1);
  on_stream(s_, [&out, me] {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int>(i) * 3 + me;
  });
  const MPI_Count n = 300;
  if (me % 2 == 0) {
    ASSERT_EQ(MPIX_Send_enqueue_c(out.data(), n, MPI_INT, peer, 5, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPIX_Recv_enqueue_c(in.data(), n, MPI_INT, peer, 6, comm_, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
  } else {
    ASSERT_EQ(MPIX_Recv_enqueue_c(in.data(), n, MPI_INT, peer, 5, comm_, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    ASSERT_EQ(MPIX_Send_enqueue_c(out.data(), n, MPI_INT, peer, 6, comm_), MPI_SUCCESS);
  }
  MPI_Request r[2];
  ASSERT_EQ(MPIX_Irecv_enqueue_c(back.data(), n, MPI_INT, peer, 7, comm_, &r[0]), MPI_SUCCESS);
  ASSERT_EQ(MPIX_Isend_enqueue_c(out.data(), n, MPI_INT, peer, 7, comm_, &r[1]), MPI_SUCCESS);
  ASSERT_EQ(MPIX_Waitall_enqueue(2, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
  std::vector<int> sum(300, -1);
  ASSERT_EQ(MPIX_Allreduce_enqueue_c(out.data(), sum.data(), n, MPI_INT, MPI_SUM, comm_),
            MPI_SUCCESS);
  sync();
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(in[i], static_cast<int>(i) * 3 + peer) << i;
    ASSERT_EQ(back[i], static_cast<int>(i) * 3 + peer) << i;
  }
  std::vector<int> ref(300);
  ASSERT_EQ(PMPI_Allreduce(out.data(), ref.data(), 300, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
            MPI_SUCCESS);
  EXPECT_EQ(sum, ref);
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  int cls = MPI_SUCCESS;
  MPI_Error_class(MPIX_Send_enqueue_c(out.data(), -1, MPI_INT, peer, 5, comm_), &cls);
  EXPECT_EQ(cls, MPI_ERR_COUNT);
  MPI_Error_class(MPIX_Allreduce_enqueue_c(out.data(), sum.data(), -1, MPI_INT, MPI_SUM, comm_),
                  &cls);
  EXPECT_EQ(cls, MPI_ERR_COUNT);

  // Multiplex: MPIX_Stream_send_c / recv_c / isend_c / irecv_c.
  MPIX_Stream none[1] = {MPIX_STREAM_NULL};
  MPI_Comm mux;
  ASSERT_EQ(MPIX_Stream_comm_create_multiplex(MPI_COMM_WORLD, 1, none, &mux), MPI_SUCCESS);
  std::vector<int> got(300, -1), got2(300, -1);
  if (me % 2 == 0) {
    ASSERT_EQ(MPIX_Stream_send_c(out.data(), n, MPI_INT, peer, 8, mux, 0, 0), MPI_SUCCESS);
    ASSERT_EQ(MPIX_Stream_recv_c(got.data(), n, MPI_INT, peer, 9, mux, 0, 0, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
  } else {
    ASSERT_EQ(MPIX_Stream_recv_c(got.data(), n, MPI_INT, peer, 8, mux, 0, 0, MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    ASSERT_EQ(MPIX_Stream_send_c(out.data(), n, MPI_INT, peer, 9, mux, 0, 0), MPI_SUCCESS);
  }
  ASSERT_EQ(MPIX_Stream_irecv_c(got2.data(), n, MPI_INT, peer, 10, mux, 0, 0, &r[0]), MPI_SUCCESS);
  ASSERT_EQ(MPIX_Stream_isend_c(out.data(), n, MPI_INT, peer, 10, mux, 0, 0, &r[1]), MPI_SUCCESS);
  ASSERT_EQ(MPI_Waitall(2, r, MPI_STATUSES_IGNORE), MPI_SUCCESS);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], static_cast<int>(i) * 3 + peer) << i;
    ASSERT_EQ(got2[i], static_cast<int>(i) * 3 + peer) << i;
  }
  MPI_Comm_free(&mux);
}
#endif

#ifdef LOOM_MPI_HAS_MPIX_Stream_progress
TEST_F(Stream, ProgressTakesLoomsStreams) {
  EXPECT_EQ(MPIX_Stream_progress(stream_), MPI_SUCCESS);
  EXPECT_EQ(MPIX_Stream_progress(MPIX_STREAM_NULL), MPI_SUCCESS);
  MPIX_Stream gone;
  ASSERT_EQ(MPIX_Stream_create(MPI_INFO_NULL, &gone), MPI_SUCCESS);
  MPIX_Stream old = gone;
  ASSERT_EQ(MPIX_Stream_free(&gone), MPI_SUCCESS);
  int cls = MPI_SUCCESS;
  MPI_Error_class(MPIX_Stream_progress(old), &cls);
  EXPECT_EQ(cls, MPI_ERR_ARG);
}
#endif

// Multiplex communicators: matching per (source stream, destination stream).
TEST_F(Stream, MultiplexStreamSendRecv) {
  const int me = world_rank(), peer = me ^ 1;
  void* s2 = nullptr;
  ASSERT_EQ(loom_host_stream_create(&s2), MPI_SUCCESS);
  MPI_Info info = stream_info(s2);
  MPIX_Stream extra;
  ASSERT_EQ(MPIX_Stream_create(info, &extra), MPI_SUCCESS);
  MPI_Info_free(&info);
  MPIX_Stream streams[2] = {MPIX_STREAM_NULL, extra};
  MPI_Comm mux;
  ASSERT_EQ(MPIX_Stream_comm_create_multiplex(MPI_COMM_WORLD, 2, streams, &mux), MPI_SUCCESS);
  MPIX_Stream got;
  ASSERT_EQ(MPIX_Comm_get_stream(mux, 1, &got), MPI_SUCCESS);
  EXPECT_EQ(got, extra);
  ASSERT_EQ(MPIX_Comm_get_stream(mux, 0, &got), MPI_SUCCESS);
  EXPECT_EQ(got, MPIX_STREAM_NULL);
  ASSERT_EQ(MPIX_Comm_get_stream(comm_, 0, &got), MPI_SUCCESS);
  EXPECT_EQ(got, stream_);
  if (peer < world_size()) {
    if (me % 2 == 0) {
      int a = 10, b = 20;  // same tag: only the stream indices tell them apart
      ASSERT_EQ(MPIX_Stream_send(&a, 1, MPI_INT, peer, 9, mux, 0, 1), MPI_SUCCESS);
      ASSERT_EQ(MPIX_Stream_send(&b, 1, MPI_INT, peer, 9, mux, 1, 0), MPI_SUCCESS);
    } else {
      int a = 0, b = 0;
      MPI_Status st;
      ASSERT_EQ(MPIX_Stream_recv(&b, 1, MPI_INT, peer, 9, mux, 1, 0, &st), MPI_SUCCESS);
      ASSERT_EQ(MPIX_Stream_recv(&a, 1, MPI_INT, peer, 9, mux, 0, 1, MPI_STATUS_IGNORE),
                MPI_SUCCESS);
      EXPECT_EQ(a, 10);
      EXPECT_EQ(b, 20);
      EXPECT_EQ(st.MPI_SOURCE, peer);
    }
  }
  int rc = MPIX_Stream_send(&me, 1, MPI_INT, 0, 9, mux, 5, 0);
  EXPECT_EQ(rc, MPI_ERR_ARG);
  EXPECT_EQ(MPIX_Stream_free(&extra), MPI_ERR_OTHER);  // still bound to mux
  MPI_Comm_free(&mux);
  EXPECT_EQ(MPIX_Stream_free(&extra), MPI_SUCCESS);
  EXPECT_EQ(extra, MPIX_STREAM_NULL);
  EXPECT_EQ(loom_host_stream_free(s2), MPI_SUCCESS);
}

// Bad input: an MPI error through the handler, never a crash.
TEST_F(Stream, BadInput) {
  int v = 0;
  // Not a stream communicator, or one whose stream has no GPU stream.
  EXPECT_EQ(MPIX_Send_enqueue(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COMM);
  MPIX_Stream plain;
  ASSERT_EQ(MPIX_Stream_create(MPI_INFO_NULL, &plain), MPI_SUCCESS);
  MPI_Comm pc;
  ASSERT_EQ(MPIX_Stream_comm_create(MPI_COMM_WORLD, plain, &pc), MPI_SUCCESS);
  EXPECT_EQ(MPIX_Recv_enqueue(&v, 1, MPI_INT, 0, 0, pc, MPI_STATUS_IGNORE), MPI_ERR_COMM);
  EXPECT_EQ(MPIX_Allreduce_enqueue(&v, &v, 1, MPI_INT, MPI_SUM, pc), MPI_ERR_COMM);
  MPI_Comm_free(&pc);
  EXPECT_EQ(MPIX_Stream_free(&plain), MPI_SUCCESS);
  // A stream type other than CUDA's, and a CUDA stream without its value.
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "type", "hipStream_t");
  MPIX_Stream bad;
  EXPECT_EQ(MPIX_Stream_create(info, &bad), MPI_ERR_ARG);
  MPI_Info_set(info, "type", "cudaStream_t");
  EXPECT_EQ(MPIX_Stream_create(info, &bad), MPI_ERR_ARG);
  MPI_Info_free(&info);
  // Arguments.
  EXPECT_EQ(MPIX_Send_enqueue(&v, -1, MPI_INT, 0, 0, comm_), MPI_ERR_COUNT);
  EXPECT_EQ(MPIX_Send_enqueue(&v, 1, MPI_INT, world_size(), 0, comm_), MPI_ERR_RANK);
  EXPECT_EQ(MPIX_Send_enqueue(&v, 1, MPI_INT, 0, -5, comm_), MPI_ERR_TAG);
  EXPECT_EQ(MPIX_Send_enqueue(&v, 1, MPI_DATATYPE_NULL, 0, 0, comm_), MPI_ERR_TYPE);
  // A request that is not an enqueued one.
  MPI_Request r;
  MPI_Irecv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r);
  EXPECT_EQ(MPIX_Wait_enqueue(&r, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
  // ... beside an enqueued one in a Waitall: refused, the enqueued one kept.
  {
    MPI_Request both[2] = {MPI_REQUEST_NULL, r};
    ASSERT_EQ(MPIX_Irecv_enqueue(&v, 1, MPI_INT, world_rank(), 77, comm_, &both[0]), MPI_SUCCESS);
    EXPECT_EQ(MPIX_Waitall_enqueue(2, both, MPI_STATUSES_IGNORE), MPI_ERR_REQUEST);
    EXPECT_NE(both[0], MPI_REQUEST_NULL);
    int seven = 7;
    ASSERT_EQ(MPI_Send(&seven, 1, MPI_INT, world_rank(), 77, comm_), MPI_SUCCESS);
    ASSERT_EQ(MPIX_Wait_enqueue(&both[0], MPI_STATUS_IGNORE), MPI_SUCCESS);
    sync();
    EXPECT_EQ(v, 7);
  }
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  // MPI_PROC_NULL moves nothing.
  ASSERT_EQ(MPIX_Send_enqueue(&v, 1, MPI_INT, MPI_PROC_NULL, 0, comm_), MPI_SUCCESS);
  MPI_Status st;
  ASSERT_EQ(MPIX_Recv_enqueue(&v, 1, MPI_INT, MPI_PROC_NULL, 0, comm_, &st), MPI_SUCCESS);
  EXPECT_EQ(st.MPI_SOURCE, MPI_PROC_NULL);
  // A stream still bound to a communicator.
  EXPECT_EQ(MPIX_Stream_free(&stream_), MPI_ERR_OTHER);
  // A message longer than the receive: the status says so, the stream goes on.
  const int me = world_rank(), peer = me ^ 1;
  if (peer < world_size()) {
    int two[2] = {1, 2}, one = 0;
    if (me % 2 == 0) {
      ASSERT_EQ(MPIX_Send_enqueue(two, 2, MPI_INT, peer, 77, comm_), MPI_SUCCESS);
    } else {
      MPI_Status t;
      t.MPI_ERROR = MPI_SUCCESS;
      ASSERT_EQ(MPIX_Recv_enqueue(&one, 1, MPI_INT, peer, 77, comm_, &t), MPI_SUCCESS);
      sync();
      int cls = MPI_SUCCESS;
      MPI_Error_class(t.MPI_ERROR, &cls);
      EXPECT_EQ(cls, MPI_ERR_TRUNCATE);
    }
    sync();
  }
}

// ---- MPIS_* ----

class Queue : public Stream {
 protected:
  void SetUp() override {
    Stream::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(MPIS_Queue_init(&q_, GPU_MEM_OPS, &s_), MPI_SUCCESS);
  }
  void TearDown() override {
    if (q_ != MPIS_QUEUE_NULL) {
      EXPECT_EQ(MPIS_Queue_wait(q_), MPI_SUCCESS);
      EXPECT_EQ(MPIS_Queue_free(&q_), MPI_SUCCESS);
    }
    Stream::TearDown();
  }
  MPIS_Queue q_ = MPIS_QUEUE_NULL;
};

// Many rounds of a matched pair of every type, each round's data written by
// the stream just before the start and checked by the stream right after
// the wait; Matchall in crossing order on the two sides.
// Where the job runs Loom's on-node pair path (LOOM_TEST_EXPECT_PAIRS=1:
// the device method on, LOOM_MPIS_PAIR on), device rounds take it; =0: none
// does; unset: not checked.
long long pair_rounds() {
  long long n = -1;
  EXPECT_EQ(loom_stream_pair_rounds(&n), MPI_SUCCESS);
  return n;
}
const char* expect_pairs() {
  return std::getenv("LOOM_TEST_EXPECT_PAIRS");
}

TEST_F(Queue, ManyRoundsEveryType) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  const int rounds = 20;
  const long long pairs_before = pair_rounds();
  for (auto& [name, t] : test_types()) {
    SCOPED_TRACE(name);
    const int count = 2;
    Buffer src(t, count, 1), dst(t, count, 0);
    const Buffer initial = dst;
    std::vector<std::vector<unsigned char>> want(rounds);
    for (int k = 0; k < rounds; ++k) {
      Buffer peer_src(t, count, 1);
      fill(peer_src, 1000u * static_cast<unsigned>(peer) + k);
      want[k] = expected(t, count, peer_src, t, count, initial);
    }
    MPIS_Request reqs[2];
    ASSERT_EQ(MPIS_Send_init(src.origin(), count, t, peer, 21, comm_, MPI_INFO_NULL, &reqs[0]),
              MPI_SUCCESS);
    ASSERT_EQ(MPIS_Recv_init(dst.origin(), count, t, peer, 21, comm_, MPI_INFO_NULL, &reqs[1]),
              MPI_SUCCESS);
    MPI_Status st[2];
    if (me % 2 == 0) {
      ASSERT_EQ(MPIS_Matchall(2, reqs, st), MPI_SUCCESS);
    } else {
      MPIS_Request rev[2] = {reqs[1], reqs[0]};
      ASSERT_EQ(MPIS_Matchall(2, rev, st), MPI_SUCCESS);
    }
    auto bad = std::make_shared<std::atomic<int>>(0);
    for (int k = 0; k < rounds; ++k) {
      on_stream(s_, [&src, me, k] { fill(src, 1000u * static_cast<unsigned>(me) + k); });
      ASSERT_EQ(MPIS_Enqueue_startall(q_, 2, reqs), MPI_SUCCESS);
      ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
      on_stream(s_, [&dst, &want, k, bad] {
        if (dst.bytes != want[k]) bad->fetch_add(1);
      });
    }
    ASSERT_EQ(MPIS_Queue_wait(q_), MPI_SUCCESS);
    EXPECT_EQ(bad->load(), 0) << "rounds whose data was wrong when the stream read it";
    ASSERT_EQ(MPIS_Request_freeall(2, reqs), MPI_SUCCESS);
    EXPECT_EQ(reqs[0], MPIS_REQUEST_NULL);
    MPI_Type_free(&t);
  }
  if (const char* e = expect_pairs(); e && std::string(e) == "1") {
    EXPECT_GT(pair_rounds(), pairs_before) << "no round took the on-node pair path";
  } else if (e) {
    EXPECT_EQ(pair_rounds(), pairs_before) << "rounds took the pair path where it is off";
  }
}

// Both ranks send first and receive after, each start closed by its own
// waitall: a small send completes without its receiver (packed pairs at
// their start; rounds through the MPI by its eager protocol), so neither
// stream waits for the other's receive. Kept well under every MPI's eager
// limit (Open MPI's shared memory: 4 KiB). A send's buffer is written again
// right after its waitall, and each round's pack must have read the round's
// own values. Requests matched one at a time, sends first on both sides,
// and freed right after the host's wait (the peer may still read).
TEST_F(Queue, SendsFirstOnBothSides) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  const int n = 64, rounds = 12;
  std::vector<double> out(n), in(n, -1.0);
  MPIS_Request s, r;
  ASSERT_EQ(MPIS_Send_init(out.data(), n, MPI_DOUBLE, peer, 40, comm_, MPI_INFO_NULL, &s),
            MPI_SUCCESS);
  ASSERT_EQ(MPIS_Recv_init(in.data(), n, MPI_DOUBLE, peer, 40, comm_, MPI_INFO_NULL, &r),
            MPI_SUCCESS);
  ASSERT_EQ(MPIS_Match(&s, MPI_STATUS_IGNORE), MPI_SUCCESS);
  ASSERT_EQ(MPIS_Match(&r, MPI_STATUS_IGNORE), MPI_SUCCESS);
  auto bad = std::make_shared<std::atomic<int>>(0);
  for (int k = 0; k < rounds; ++k) {
    on_stream(s_, [&out, me, k] {
      for (size_t i = 0; i < out.size(); ++i) out[i] = me * 1e6 + k * 1e3 + static_cast<double>(i);
    });
    ASSERT_EQ(MPIS_Enqueue_start(q_, &s), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
    on_stream(s_, [&out] { std::fill(out.begin(), out.end(), -7.0); });  // sent: reusable
    ASSERT_EQ(MPIS_Enqueue_start(q_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
    on_stream(s_, [&in, peer, k, bad] {
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i] != peer * 1e6 + k * 1e3 + static_cast<double>(i)) {
          bad->fetch_add(1);
          break;
        }
    });
  }
  ASSERT_EQ(MPIS_Queue_wait(q_), MPI_SUCCESS);
  EXPECT_EQ(bad->load(), 0) << "rounds whose data was wrong when the stream read it";
  ASSERT_EQ(MPIS_Request_free(&s), MPI_SUCCESS);
  ASSERT_EQ(MPIS_Request_free(&r), MPI_SUCCESS);
  MPI_Barrier(MPI_COMM_WORLD);
}

// A rank's requests to itself, a derived type each way: matched in one
// Matchall, each round's bytes read in the round they were written.
TEST_F(Queue, ToItself) {
  const int me = world_rank();
  MPI_Datatype t;
  MPI_Type_vector(64, 3, 5, MPI_INT, &t);
  MPI_Type_commit(&t);
  Buffer src(t, 2, 1), dst(t, 2, 0);
  const Buffer initial = dst;
  MPIS_Request reqs[2];
  ASSERT_EQ(MPIS_Recv_init(dst.origin(), 2, t, me, 50, comm_, MPI_INFO_NULL, &reqs[0]),
            MPI_SUCCESS);
  ASSERT_EQ(MPIS_Send_init(src.origin(), 2, t, me, 50, comm_, MPI_INFO_NULL, &reqs[1]),
            MPI_SUCCESS);
  ASSERT_EQ(MPIS_Matchall(2, reqs, MPI_STATUSES_IGNORE), MPI_SUCCESS);
  auto bad = std::make_shared<std::atomic<int>>(0);
  std::vector<std::vector<unsigned char>> want(8);
  for (int k = 0; k < 8; ++k) {
    Buffer s2(t, 2, 1);
    fill(s2, 500u + k);
    want[k] = expected(t, 2, s2, t, 2, initial);
  }
  for (int k = 0; k < 8; ++k) {
    on_stream(s_, [&src, k] { fill(src, 500u + k); });
    ASSERT_EQ(MPIS_Enqueue_startall(q_, 2, reqs), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
    on_stream(s_, [&dst, &want, k, bad] {
      if (dst.bytes != want[k]) bad->fetch_add(1);
    });
  }
  ASSERT_EQ(MPIS_Queue_wait(q_), MPI_SUCCESS);
  EXPECT_EQ(bad->load(), 0);
  ASSERT_EQ(MPIS_Request_freeall(2, reqs), MPI_SUCCESS);
  MPI_Type_free(&t);
}

// Wildcards are resolved once, at MPIS_Match: a ring on every rank.
TEST_F(Queue, WildcardMatchRing) {
  const int me = world_rank(), n = world_size();
  const int right = (me + 1) % n;
  double out = 0, in = -1;
  MPIS_Request reqs[2];
  ASSERT_EQ(MPIS_Recv_init(&in, 1, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, MPI_INFO_NULL,
                           &reqs[0]),
            MPI_SUCCESS);
  ASSERT_EQ(MPIS_Send_init(&out, 1, MPI_DOUBLE, right, 30 + me, comm_, MPI_INFO_NULL, &reqs[1]),
            MPI_SUCCESS);
  MPI_Status st[2];
  ASSERT_EQ(MPIS_Matchall(2, reqs, st), MPI_SUCCESS);
  const int left = (me + n - 1) % n;
  EXPECT_EQ(st[0].MPI_SOURCE, left);
  EXPECT_EQ(st[0].MPI_TAG, 30 + left);
  for (int k = 0; k < 10; ++k) {
    on_stream(s_, [&out, me, k] { out = me * 100.0 + k; });
    ASSERT_EQ(MPIS_Enqueue_start(q_, &reqs[1]), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_start(q_, &reqs[0]), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
    sync();
    EXPECT_EQ(in, left * 100.0 + k);
  }
  ASSERT_EQ(MPIS_Queue_wait(q_), MPI_SUCCESS);
  ASSERT_EQ(MPIS_Request_free(&reqs[0]), MPI_SUCCESS);
  ASSERT_EQ(MPIS_Request_free(&reqs[1]), MPI_SUCCESS);
}

// Bad input: unmatched starts, double starts, work in flight at free, a
// freed queue.
TEST_F(Queue, BadInput) {
  const int me = world_rank(), peer = me ^ 1;
  if (peer >= world_size()) return;
  int a = 5, b = 0;
  MPIS_Request s, r;
  ASSERT_EQ(MPIS_Send_init(&a, 1, MPI_INT, peer, 8, comm_, MPI_INFO_NULL, &s), MPI_SUCCESS);
  ASSERT_EQ(MPIS_Recv_init(&b, 1, MPI_INT, peer, 8, comm_, MPI_INFO_NULL, &r), MPI_SUCCESS);
  EXPECT_EQ(MPIS_Enqueue_start(q_, &s), MPI_ERR_REQUEST);  // not matched
  MPIS_Request both[2] = {s, r};
  ASSERT_EQ(MPIS_Matchall(2, both, MPI_STATUSES_IGNORE), MPI_SUCCESS);
  // Rank 1's send waits until rank 0 has tried to free its queue with the
  // receive in flight.
  if (me % 2 == 0) {
    ASSERT_EQ(MPIS_Enqueue_start(q_, &r), MPI_SUCCESS);
    EXPECT_EQ(MPIS_Enqueue_start(q_, &r), MPI_ERR_REQUEST);  // started twice
    ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
    EXPECT_EQ(MPIS_Queue_free(&q_), MPI_ERR_OTHER);
    EXPECT_EQ(MPIS_Request_free(&r), MPI_ERR_REQUEST);
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_EQ(MPIS_Enqueue_start(q_, &s), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_EQ(MPIS_Enqueue_start(q_, &s), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_start(q_, &r), MPI_SUCCESS);
    ASSERT_EQ(MPIS_Enqueue_waitall(q_), MPI_SUCCESS);
  }
  ASSERT_EQ(MPIS_Queue_wait(q_), MPI_SUCCESS);
  EXPECT_EQ(b, 5);
  ASSERT_EQ(MPIS_Request_free(&s), MPI_SUCCESS);
  ASSERT_EQ(MPIS_Request_free(&r), MPI_SUCCESS);
  EXPECT_EQ(MPIS_Request_free(&r), MPI_ERR_REQUEST);  // already freed (null)
  // A freed queue.
  MPIS_Queue gone = q_;
  ASSERT_EQ(MPIS_Queue_free(&q_), MPI_SUCCESS);
  EXPECT_EQ(q_, MPIS_QUEUE_NULL);
  MPIS_Request x;
  ASSERT_EQ(MPIS_Send_init(&a, 1, MPI_INT, peer, 9, comm_, MPI_INFO_NULL, &x), MPI_SUCCESS);
  EXPECT_EQ(MPIS_Enqueue_start(gone, &x), MPI_ERR_ARG);
  EXPECT_EQ(MPIS_Enqueue_waitall(gone), MPI_ERR_ARG);
  EXPECT_EQ(MPIS_Queue_free(&gone), MPI_ERR_ARG);
  ASSERT_EQ(MPIS_Request_free(&x), MPI_SUCCESS);
  EXPECT_EQ(MPIS_Queue_init(&gone, GPU_MEM_OPS, nullptr), MPI_ERR_ARG);
}

}  // namespace
}  // namespace loom::test

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  loom_init();
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  MPI_Finalize();
  return rc;
}
