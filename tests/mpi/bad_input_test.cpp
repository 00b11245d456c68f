// Bad input gets a clear MPI error through the communicator's error handler,
// never a crash; what Loom cannot read goes back to the MPI.
#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "loom/loom.h"
#include "mpi/runtime.hpp"

namespace loom::test {
namespace {

int g_handler_calls = 0;
int g_handler_class = MPI_SUCCESS;

void counting_handler(MPI_Comm*, int* code, ...) {
  ++g_handler_calls;
  MPI_Error_class(*code, &g_handler_class);
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_dup(MPI_COMM_SELF, &comm_);
    MPI_Comm_create_errhandler(counting_handler, &eh_);
    MPI_Comm_set_errhandler(comm_, eh_);
    g_handler_calls = 0;
    g_handler_class = MPI_SUCCESS;
  }
  void TearDown() override {
    MPI_Errhandler_free(&eh_);
    MPI_Comm_free(&comm_);
  }
  // Runs a pack call; expects the error class both returned and raised.
  void expect_error(int rc, int cls) {
    int got = MPI_SUCCESS;
    MPI_Error_class(rc, &got);
    EXPECT_EQ(got, cls);
    EXPECT_EQ(g_handler_calls, 1);
    EXPECT_EQ(g_handler_class, cls);
    g_handler_calls = 0;
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Errhandler eh_;
  std::vector<char> in_ = std::vector<char>(256, 1), out_ = std::vector<char>(256, 0);
};

TEST_F(BadInput, NullType) {
  int pos = 0;
  expect_error(loom_pack(in_.data(), 1, MPI_DATATYPE_NULL, out_.data(), 256, &pos, comm_),
               MPI_ERR_TYPE);
  expect_error(loom_unpack(in_.data(), 256, &pos, out_.data(), 1, MPI_DATATYPE_NULL, comm_),
               MPI_ERR_TYPE);
  EXPECT_EQ(pos, 0);
}

TEST_F(BadInput, UncommittedType) {
  MPI_Datatype t;
  MPI_Type_vector(3, 1, 2, MPI_INT, &t);
  int pos = 0;
  expect_error(loom_pack(in_.data(), 1, t, out_.data(), 256, &pos, comm_), MPI_ERR_TYPE);
  MPI_Type_free(&t);
}

// The interposed MPI_Type_commit / MPI_Type_free keep the registry in step.
TEST_F(BadInput, FreedTypeIsForgotten) {
  MPI_Datatype t;
  MPI_Type_vector(3, 1, 2, MPI_INT, &t);
  size_t before = runtime()->types.size();
  MPI_Type_commit(&t);
  EXPECT_EQ(runtime()->types.size(), before + 1);
  EXPECT_TRUE(runtime()->types.lookup(t).is_ok());
  MPI_Type_free(&t);
  EXPECT_EQ(runtime()->types.size(), before);
}

TEST_F(BadInput, NegativeCount) {
  int pos = 0;
  expect_error(loom_pack(in_.data(), -1, MPI_INT, out_.data(), 256, &pos, comm_), MPI_ERR_COUNT);
  expect_error(loom_unpack(in_.data(), 256, &pos, out_.data(), -5, MPI_INT, comm_), MPI_ERR_COUNT);
}

TEST_F(BadInput, NullPositionAndNegativeSizes) {
  expect_error(loom_pack(in_.data(), 1, MPI_INT, out_.data(), 256, nullptr, comm_), MPI_ERR_ARG);
  int pos = -4;
  expect_error(loom_pack(in_.data(), 1, MPI_INT, out_.data(), 256, &pos, comm_), MPI_ERR_ARG);
  pos = 0;
  expect_error(loom_pack(in_.data(), 1, MPI_INT, out_.data(), -1, &pos, comm_), MPI_ERR_ARG);
}

TEST_F(BadInput, OutputTooSmallIsTruncateAndWritesNothing) {
  int pos = 250;
  std::vector<char> before = out_;
  expect_error(loom_pack(in_.data(), 2, MPI_DOUBLE, out_.data(), 256, &pos, comm_),
               MPI_ERR_TRUNCATE);
  EXPECT_EQ(pos, 250);
  EXPECT_EQ(out_, before);
  pos = 252;
  expect_error(loom_unpack(in_.data(), 256, &pos, out_.data(), 1, MPI_DOUBLE, comm_),
               MPI_ERR_TRUNCATE);
}

TEST_F(BadInput, NullBuffers) {
  int pos = 0;
  expect_error(loom_pack(in_.data(), 4, MPI_INT, nullptr, 256, &pos, comm_), MPI_ERR_BUFFER);
  expect_error(loom_unpack(nullptr, 256, &pos, out_.data(), 4, MPI_INT, comm_), MPI_ERR_BUFFER);
  // Zero bytes with null buffers is fine.
  EXPECT_EQ(loom_pack(nullptr, 0, MPI_INT, nullptr, 0, &pos, comm_), MPI_SUCCESS);
  EXPECT_EQ(g_handler_calls, 0);
}

TEST_F(BadInput, NullCommunicator) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int pos = 0;
  int rc = loom_pack(in_.data(), 1, MPI_INT, out_.data(), 256, &pos, MPI_COMM_NULL);
  int cls;
  MPI_Error_class(rc, &cls);
  EXPECT_EQ(cls, MPI_ERR_COMM);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

// A packed size past what `int` positions can address is refused, not wrapped.
TEST_F(BadInput, HugeCountIsRefusedCleanly) {
  MPI_Datatype big;
  MPI_Type_contiguous(1 << 20, MPI_DOUBLE, &big);
  MPI_Type_commit(&big);
  loom_type_commit(big);
  int pos = 0;
  expect_error(loom_pack(in_.data(), INT_MAX, big, out_.data(), 256, &pos, comm_),
               MPI_ERR_TRUNCATE);
  loom_type_free(big);
  MPI_Type_free(&big);
}

// Sizes past 64 bits: Loom cannot describe the type and hands it back.
TEST_F(BadInput, TypeTooLargeForLoomIsHandedBack) {
  MPI_Datatype a, b, c;
  MPI_Type_contiguous(INT_MAX, MPI_DOUBLE, &a);
  MPI_Type_contiguous(INT_MAX, a, &b);
  MPI_Type_contiguous(INT_MAX, b, &c);  // 2^96 bytes
  MPI_Type_commit(&c);
  EXPECT_EQ(loom_type_commit(c), MPI_SUCCESS);
  auto e = runtime()->types.lookup(c);
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), Err::kUnsupported);
  for (MPI_Datatype* t : {&a, &b, &c}) MPI_Type_free(t);
}

// A type a layer declines is packed by the MPI itself, with the same bytes.
TEST_F(BadInput, DeclinedTypeIsHandedBackToTheMpi) {
  MPI_Datatype t;
  MPI_Type_vector(4, 2, 3, MPI_SHORT, &t);
  MPI_Type_commit(&t);
  loom_type_commit(t);
  runtime()->types.mark_unsupported(t, Status(Err::kUnsupported, "test"));
  std::vector<char> a(64, 0), b(64, 0);
  for (int i = 0; i < 256; ++i) in_[i] = static_cast<char>(i);
  int pa = 0, pb = 0;
  ASSERT_EQ(loom_pack(in_.data(), 2, t, a.data(), 64, &pa, comm_), MPI_SUCCESS);
  ASSERT_EQ(PMPI_Pack(in_.data(), 2, t, b.data(), 64, &pb, comm_), MPI_SUCCESS);
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(a, b);
  char desc[256];
  ASSERT_EQ(loom_type_describe(t, desc, sizeof desc), MPI_SUCCESS);
  EXPECT_NE(std::string(desc).find("not accelerated"), std::string::npos);
  loom_type_free(t);
  MPI_Type_free(&t);
}

TEST_F(BadInput, DescribeRefusesBadArguments) {
  char buf[8];
  EXPECT_EQ(loom_type_describe(MPI_INT, nullptr, 8), MPI_ERR_ARG);
  EXPECT_EQ(loom_type_describe(MPI_INT, buf, 0), MPI_ERR_ARG);
  EXPECT_EQ(loom_type_describe(MPI_DATATYPE_NULL, buf, sizeof buf), MPI_ERR_TYPE);
  EXPECT_EQ(loom_type_describe(MPI_INT, buf, sizeof buf), MPI_SUCCESS);
  EXPECT_EQ(std::string(buf).size(), 7u);  // truncated, terminated
}

}  // namespace
}  // namespace loom::test
