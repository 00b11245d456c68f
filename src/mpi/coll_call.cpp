#include "mpi/coll_call.hpp"

#include <algorithm>
#include <climits>
#include <string>

#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/requests.hpp"
#include "mpi/runtime.hpp"
#include "util/log.hpp"

namespace loom::mpi {
namespace {

// What MPI says of a type, for the byte range a count of it touches.
struct TypeExtent {
  int64_t tlb = 0, text = 0, ext = 0, size = 0;
};

int type_extent(MPI_Datatype t, TypeExtent* out) {
  if (t == MPI_DATATYPE_NULL) return MPI_ERR_TYPE;
  MPI_Count tlb = 0, text = 0, lb = 0, ext = 0, size = 0;
  if (PMPI_Type_get_true_extent_x(t, &tlb, &text) != MPI_SUCCESS ||
      PMPI_Type_get_extent_x(t, &lb, &ext) != MPI_SUCCESS ||
      PMPI_Type_size_x(t, &size) != MPI_SUCCESS)
    return MPI_ERR_TYPE;
  *out = {tlb, text, ext, size};
  return MPI_SUCCESS;
}

// Bytes [lo, hi) from the buffer that `count` elements at byte `base` touch.
}  // namespace

struct Call::Range {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  int64_t bytes = 0;  // data bytes (type size x count) summed
  bool empty() const { return lo >= hi; }
  void add(const TypeExtent& e, int64_t count, int64_t base) {
    if (count <= 0 || e.size <= 0) return;
    const int64_t shift = (count - 1) * e.ext;
    lo = std::min(lo, base + e.tlb + std::min<int64_t>(0, shift));
    hi = std::max(hi, base + e.tlb + e.text + std::max<int64_t>(0, shift));
    bytes += count * e.size;
  }
};

namespace {

// A buffer near address 0 with data to move: a null buffer with a nonzero
// count (MPI_BOTTOM with absolute addresses lies far from it).
bool null_data(const void* buf, const Call::Range& r) {
  return buf == nullptr && !r.empty() && r.lo < 4096;
}

}  // namespace

Status MirrorSet::down(bool inputs_only) const {
  for (const Entry& e : entries)
    if (e.in && !(inputs_only && e.gaps)) {
      Status s = e.mover->copy_to_host(e.staged.host, e.user + e.lo, e.staged.bytes);
      if (!s) return s;
    }
  return Status::ok();
}

Status MirrorSet::up() const {
  for (const Entry& e : entries)
    if (e.out) {
      Status s = e.mover->copy_from_host(e.user + e.lo, e.staged.host, e.staged.bytes);
      if (!s) return s;
    }
  return Status::ok();
}

Call::Call(MPI_Comm comm, const char* fn) : comm_(comm), fn_(fn) {
  if (!runtime()) return;
  active_ = true;
  if (comm == MPI_COMM_NULL) {
    fail(MPI_ERR_COMM, "null communicator");
    return;
  }
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS) {
    fail(MPI_ERR_COMM, "invalid communicator");
    return;
  }
  inter_ = inter != 0;
  PMPI_Comm_rank(comm, &rank_);
  if (inter_)
    PMPI_Comm_remote_size(comm, &size_);
  else
    PMPI_Comm_size(comm, &size_);
}

// Inter-communicators: their root and count rules differ, and Loom moves no
// device data on them; host buffers go to the MPI untouched.
void Call::inter(const void* buf) {
  if (transport::memkind(buf) == transport::MemKind::kDevice)
    fail(MPI_ERR_COMM, "device buffers on an inter-communicator are not supported");
}

int Call::fail(int mpi_class, const char* what) {
  if (err_ == MPI_SUCCESS) {
    err_ = mpi_class;
    err_what_ = what;
  }
  return mpi_class;
}

void Call::add(const void* buf, int64_t count, MPI_Datatype type, bool in, bool out, Setter set) {
  if (!active_ || buf == MPI_IN_PLACE || err_) return;
  if (inter_) return inter(buf);
  if (count < 0) return void(fail(MPI_ERR_COUNT, "negative count"));
  if (type == MPI_DATATYPE_NULL) return void(fail(MPI_ERR_TYPE, "MPI_DATATYPE_NULL"));
  if (count == 0) return;
  const bool dev = count <= INT_MAX ? on_device(buf, static_cast<int>(count), type)
                                    : transport::memkind(buf) == transport::MemKind::kDevice;
  if (!dev && buf != nullptr) return;  // the common host case: no type queries
  TypeExtent e;
  if (int rc = type_extent(type, &e); rc != MPI_SUCCESS) return void(fail(rc, "invalid datatype"));
  Range r;
  r.add(e, count, 0);
  if (null_data(buf, r)) return void(fail(MPI_ERR_BUFFER, "null buffer with a nonzero count"));
  if (!dev || r.empty()) return;
  pending_.push_back(
      {static_cast<const char*>(buf), r.lo, r.hi, r.bytes == r.hi - r.lo, in, out, std::move(set)});
}

// The v and w forms: a mirror of the union of the blocks' ranges.
void Call::add_v(const void* buf, int n, const int* counts, const int* displs, MPI_Datatype type,
                 bool in, bool out, Setter set) {
  if (!active_ || buf == MPI_IN_PLACE || err_) return;
  if (inter_) return inter(buf);
  if (n > 0 && (!counts || !displs)) return void(fail(MPI_ERR_ARG, "null counts or displacements"));
  Range r;
  TypeExtent e;
  bool have_type = false;
  for (int i = 0; i < n; ++i) {
    if (counts[i] < 0) return void(fail(MPI_ERR_COUNT, "negative count"));
    if (counts[i] == 0) continue;
    if (!have_type) {
      if (int rc = type_extent(type, &e); rc != MPI_SUCCESS)
        return void(fail(rc, "invalid datatype"));
      have_type = true;
    }
    r.add(e, counts[i], static_cast<int64_t>(displs[i]) * e.ext);
  }
  add_range(buf, r, in, out, std::move(set));
}

void Call::add_w(const void* buf, int n, const int* counts, const MPI_Aint* displs,
                 const MPI_Datatype* types, bool in, bool out, Setter set) {
  if (!active_ || buf == MPI_IN_PLACE || err_) return;
  if (inter_) return inter(buf);
  if (n > 0 && (!counts || !displs || !types))
    return void(fail(MPI_ERR_ARG, "null counts, displacements or types"));
  Range r;
  for (int i = 0; i < n; ++i) {
    if (counts[i] < 0) return void(fail(MPI_ERR_COUNT, "negative count"));
    if (counts[i] == 0) continue;
    TypeExtent e;
    if (int rc = type_extent(types[i], &e); rc != MPI_SUCCESS)
      return void(fail(rc, "invalid datatype"));
    r.add(e, counts[i], displs[i]);
  }
  add_range(buf, r, in, out, std::move(set));
}

void Call::add_range(const void* buf, const Range& r, bool in, bool out, Setter set) {
  if (r.empty()) return;
  if (null_data(buf, r)) return void(fail(MPI_ERR_BUFFER, "null buffer with a nonzero count"));
  const auto* first = static_cast<const char*>(buf) + r.lo;
  if (transport::memkind(buf) != transport::MemKind::kDevice &&
      (buf == nullptr || transport::memkind(first) != transport::MemKind::kDevice))
    return;
  pending_.push_back(
      {static_cast<const char*>(buf), r.lo, r.hi, r.bytes == r.hi - r.lo, in, out, std::move(set)});
}

void Call::stage() {
  if (pending_.empty() || err_ != MPI_SUCCESS) return;
  auto at = [](const Pending& p) { return p.user + p.lo; };
  std::sort(pending_.begin(), pending_.end(),
            [&](const Pending& a, const Pending& b) { return at(a) < at(b); });
  if (!set_) set_ = std::make_shared<MirrorSet>();
  Runtime* rt = runtime();
  struct Group {
    size_t i, j;  // pendings [i, j)
    const char* lo;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < pending_.size();) {
    // Buffers whose data overlap (a halo's send and receive faces in one
    // grid) share a mirror: one copy down, one up, as the user would.
    const char* lo = at(pending_[i]);
    const char* hi = pending_[i].user + pending_[i].hi;
    size_t j = i + 1;
    while (j < pending_.size() && at(pending_[j]) < hi) {
      hi = std::max(hi, pending_[j].user + pending_[j].hi);
      ++j;
    }
    MirrorSet::Entry e;
    for (size_t k = i; k < j; ++k) {
      const Pending& p = pending_[k];
      // An output with gaps, or beside other buffers, goes down too: the MPI
      // leaves the rest alone, and the whole span comes back up.
      e.in = e.in || p.in || (p.out && (!p.dense || j - i > 1));
      e.out = e.out || p.out;
    }
    e.gaps = e.in;
    for (size_t k = i; k < j; ++k) e.gaps = e.gaps && !pending_[k].in;
    const auto bytes = static_cast<size_t>(hi - lo);
    e.mover = rt->mover_for(bytes);
    if (!e.mover) return void(fail(MPI_ERR_BUFFER, "device buffer, but no GPU mover is available"));
    auto s = e.mover->stage(bytes);
    if (!s) return void(fail(error_class(s.status().code()), "no staging for a device buffer"));
    e.staged = std::move(s.value());
    e.user = const_cast<char*>(lo);
    e.hi = static_cast<int64_t>(bytes);
    for (size_t k = i; k < j; ++k)
      pending_[k].mpi = static_cast<char*>(e.staged.host) + (pending_[k].user - lo);
    set_->entries.push_back(std::move(e));
    groups.push_back({i, j, lo});
    i = j;
  }
  // The MPI is given each buffer's origin in its mirror, which lies outside
  // the mirror where the data does not span it (a v collective's first
  // displacement, a type's positive lower bound): it may then be another
  // buffer's pointer, such as the start of the mirror staged just before.
  // MPIs compare buffer pointers (Open MPI's libnbc takes sendbuf == recvbuf
  // for MPI_IN_PLACE and skips the root's own block; MPICH refuses aliased
  // buffers), so such a mirror moves to new staging.
  const size_t first = set_->entries.size() - groups.size();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto [i, j, lo] = groups[g];
    bool clash = false;
    for (size_t k = i; k < j; ++k)
      clash = clash || aliases(pending_[k].mpi, pending_[k].user, i, j);
    if (!clash) continue;
    MirrorSet::Entry& e = set_->entries[first + g];
    const auto bytes = static_cast<size_t>(e.hi);
    // Each pointer the MPI is given can rule out one offset per buffer of
    // the mirror: one offset more than they can rule out always fits.
    const size_t others = static_cast<size_t>(n_args_) + pending_.size() + 2;
    auto s = e.mover->stage(bytes + kAliasStep * others * (j - i));
    if (!s) return void(fail(error_class(s.status().code()), "no staging for a device buffer"));
    if (!place(i, j, lo, std::move(s.value()), bytes, e))
      return void(fail(MPI_ERR_INTERN, "no unaliased place for a host mirror"));
  }
  for (Pending& p : pending_) p.set(const_cast<char*>(p.mpi));
  pending_.clear();
}

bool Call::place(size_t i, size_t j, const char* lo, transport::Staged s, size_t bytes,
                 MirrorSet::Entry& e) {
  for (size_t off = 0; off + bytes <= s.bytes; off += kAliasStep) {
    char* host = static_cast<char*>(s.host) + off;
    bool clash = false;
    for (size_t k = i; k < j && !clash; ++k)
      clash = aliases(host + (pending_[k].user - lo), pending_[k].user, i, j);
    if (clash) continue;
    for (size_t k = i; k < j; ++k) pending_[k].mpi = host + (pending_[k].user - lo);
    s.host = host;
    if (s.dev) s.dev = static_cast<char*>(s.dev) + off;
    s.bytes = bytes;
    e.staged = std::move(s);  // the first staging goes back
    return true;
  }
  return false;
}

bool Call::aliases(const char* mpi, const char* user, size_t i, size_t j) const {
  const void* m = mpi;
  if (m == MPI_IN_PLACE || m == MPI_BOTTOM) return true;
  auto mirrored = [&](const void* a) {
    for (const Pending& p : pending_)
      if (p.user == a) return true;
    return false;
  };
  for (int a = 0; a < n_args_; ++a)  // arguments the MPI gets as they are
    if (args_[a] == m && args_[a] != user && !mirrored(args_[a])) return true;
  for (size_t k = 0; k < pending_.size(); ++k)
    if ((k < i || k >= j) && pending_[k].mpi == mpi && pending_[k].user != user) return true;
  return false;
}

int Call::check_before_run() {
  stage();
  if (err_ != MPI_SUCCESS) {  // the handler reports the error; Loom's line says why
    const std::string what = std::string(fn_) + ": " + err_what_;
    if (inter_) LOOM_WARN(kMpi, "%s", what.c_str());  // what Loom does not support
    return raise(comm_, err_, what.c_str());
  }
  if (mirrored()) {
    if (Status s = set_->down(); !s) return raise(comm_, s);
  }
  return MPI_SUCCESS;
}

int Call::blocking(const std::function<int()>& mpi) {
  if (int rc = check_before_run(); rc != MPI_SUCCESS) return rc;
  const int rc = mpi();
  if (rc != MPI_SUCCESS || !mirrored()) return rc;
  if (Status s = set_->up(); !s) return raise(comm_, s);
  return rc;
}

int Call::nonblocking(MPI_Request* req, const std::function<int()>& mpi) {
  return with_request(req, mpi, false);
}

// The mirrors go down at _init too: an MPI may do a call's local copies
// there (MPICH 4.0 does); each MPI_Start copies the inputs again, and
// leaves what the MPI wrote into the outputs since.
int Call::persistent(MPI_Request* req, const std::function<int()>& mpi) {
  return with_request(req, mpi, true);
}

int Call::with_request(MPI_Request* req, const std::function<int()>& mpi, bool persistent) {
  if (mirrored() && !req) fail(MPI_ERR_REQUEST, "null request");
  if (int rc = check_before_run(); rc != MPI_SUCCESS) return rc;
  const int rc = mpi();
  if (rc != MPI_SUCCESS || !mirrored()) return rc;
  PendingOp op;
  op.kind = PendingOp::Kind::kColl;
  op.mirrors = set_;
  if (persistent)
    runtime()->requests.add_persistent(*req, std::move(op));
  else
    runtime()->requests.add(*req, std::move(op));
  return rc;
}

bool Call::neighbors(int* indegree, int* outdegree) {
  if (!active_ || err_ != MPI_SUCCESS) return false;
  if (int rc = neighbor_counts(comm_, indegree, outdegree); rc != MPI_SUCCESS)
    return fail(rc, "a neighbour collective on a communicator without a topology"), false;
  return true;
}

int neighbor_counts(MPI_Comm comm, int* indegree, int* outdegree) {
  int topo = MPI_UNDEFINED;
  if (PMPI_Topo_test(comm, &topo) != MPI_SUCCESS) return MPI_ERR_COMM;
  if (topo == MPI_CART) {
    int ndims = 0;
    PMPI_Cartdim_get(comm, &ndims);
    *indegree = *outdegree = 2 * ndims;
  } else if (topo == MPI_GRAPH) {
    int rank = 0, n = 0;
    PMPI_Comm_rank(comm, &rank);
    PMPI_Graph_neighbors_count(comm, rank, &n);
    *indegree = *outdegree = n;
  } else if (topo == MPI_DIST_GRAPH) {
    int weighted = 0;
    PMPI_Dist_graph_neighbors_count(comm, indegree, outdegree, &weighted);
  } else {
    return MPI_ERR_TOPOLOGY;
  }
  return MPI_SUCCESS;
}

}  // namespace loom::mpi
