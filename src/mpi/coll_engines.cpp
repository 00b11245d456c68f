#include "mpi/coll_engines.hpp"

#include "coll/node_engine.hpp"
#include "coll/reduce_map.hpp"
#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/rendezvous.hpp"
#include "mpi/runtime.hpp"
#include "util/log.hpp"

namespace loom::mpi::engines {
namespace {

using Mode = Runtime::CollMethod;

Mode mode() {
  return runtime()->coll_method.load(std::memory_order_relaxed);
}

// Whether the node engine is tried for a call in which each rank receives
// `bytes`: only on what every rank of the communicator sees alike (settings,
// the communicator, the message size), so all enter its exchange or none.
bool gate(const Call& c, int64_t bytes, coll::NodeEnv* env) {
  Runtime* rt = runtime();
  if (!c.active() || c.inter_comm() || c.size() < 2 || !rt->rv || !rt->rv->lends()) return false;
  const Mode m = mode();
  if (m == Mode::kMirror) return false;
  if (m == Mode::kAuto && bytes < rt->coll_node_min) return false;
  if (!rt->rv->all_on_node(c.comm())) return false;
  env->comm = c.comm();
  env->rank = c.rank();
  env->size = c.size();
  env->mem = rt->rv->memory();
  env->mover = rt->mover(transport::Method::kDevice);
  env->reducer = rt->reducer();
  return true;
}

// A device buffer of `count` elements as the engine takes it; no message
// (this rank declines) for host memory, a null buffer or a type Loom does
// not read.
// `keep` holds the type's entry while the part is in use.
coll::Part part(const void* buf, int64_t count, MPI_Datatype t, TypeRegistry::Entry* keep,
                int64_t* extent = nullptr) {
  coll::Part p;
  p.in_place = buf == MPI_IN_PLACE;
  if (p.in_place) return p;
  p.user = const_cast<void*>(buf);
  if (count < 0 || count > INT32_MAX) return p;
  auto e = runtime()->types.lookup(t);
  if (!e) return p;
  *keep = e.value();
  if (extent) *extent = (*keep)->info.extent;
  if (!on_device(buf, static_cast<int>(count), t) && count > 0) return p;
  if (!fill_message(**keep, static_cast<int>(count), &p.msg)) p.msg.form = nullptr;
  return p;
}

int64_t type_size(MPI_Datatype t) {
  int size = 0;
  if (t == MPI_DATATYPE_NULL || PMPI_Type_size(t, &size) != MPI_SUCCESS) return -1;
  return size;
}

// A reduction as the GPU folds it: a predefined op on a predefined type
// (contiguous elements), the input (`in_count` elements; null in place) and
// the output (`out_count`, checked where `out_here`) on the device.
struct Fold {
  coll::ReduceOp op{};
  coll::Basic basic{};
  const void* in = nullptr;
  size_t count = 0;
  bool can = false;
  Fold(MPI_Op o, MPI_Datatype t, int in_count, const void* s, const void* r, int out_count,
       bool out_here) {
    in = s == MPI_IN_PLACE ? nullptr : s;
    can = in_count >= 0 && out_count >= 0 && coll::reduce_of(o, t, &op, &basic) &&
          coll::reduce_defined(op, basic) &&
          (s == MPI_IN_PLACE || (s && on_device(s, in_count, t))) &&
          (!out_here || on_device(r, out_count, t)) && (in || out_here);
    count = can ? static_cast<size_t>(out_count) : 0;
  }
};

// The outcome as the interposed call returns it; false: use the mirrors.
bool settle(const Call& c, coll::Outcome o, int* rc) {
  if (o == coll::Outcome::kDeclined) {
    LOOM_DEBUG(kMpi, "%s: the node engine declined (some rank cannot take part)", c.fn());
    return false;
  }
  LOOM_DEBUG(kMpi, "%s: node-local engine", c.fn());
  *rc = o == coll::Outcome::kDone ? MPI_SUCCESS
                                  : raise(c.comm(), MPI_ERR_OTHER, "node-local collective failed");
  return true;
}

}  // namespace

bool bcast(Call& c, void* buf, int count, MPI_Datatype t, int root, int* rc) {
  coll::NodeEnv env;
  if (root < 0 || root >= c.size()) return false;  // the MPI raises MPI_ERR_ROOT
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  TypeRegistry::Entry keep;
  return settle(c, coll::bcast(env, part(buf, count, t, &keep), root), rc);
}

bool allreduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int* rc) {
  coll::NodeEnv env;
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  Fold f(op, t, count, s, r, count, true);
  return settle(c, coll::allreduce(env, f.in, r, f.count, f.op, f.basic, f.can), rc);
}

bool reduce(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op, int root,
            int* rc) {
  coll::NodeEnv env;
  if (root < 0 || root >= c.size()) return false;
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  Fold f(op, t, count, s, r, count, c.rank() == root);
  return settle(c, coll::reduce(env, f.in, r, f.count, f.op, f.basic, f.can, root), rc);
}

bool reduce_scatter_block(Call& c, const void* s, void* r, int count, MPI_Datatype t, MPI_Op op,
                          int* rc) {
  coll::NodeEnv env;
  if (!gate(c, int64_t{count} * type_size(t), &env)) return false;
  // In place, the input is the whole receive buffer, and the result its first block.
  Fold f(op, t, count * c.size(), s, r, s == MPI_IN_PLACE ? count * c.size() : count, true);
  return settle(c,
                coll::reduce_scatter_block(env, f.in, r, f.can ? static_cast<size_t>(count) : 0,
                                           f.op, f.basic, f.can),
                rc);
}

bool allgather(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount,
               MPI_Datatype rt, int* rc) {
  coll::NodeEnv env;
  if (!gate(c, int64_t{rcount} * type_size(rt) * c.size(), &env)) return false;
  TypeRegistry::Entry ks, kr;
  int64_t stride = 0;
  const coll::Part recv = part(r, rcount, rt, &kr, &stride);
  const coll::Part send = part(s, sc, st, &ks);
  return settle(c, coll::allgather(env, send, recv, stride * rcount), rc);
}

bool alltoall(Call& c, const void* s, int sc, MPI_Datatype st, void* r, int rcount, MPI_Datatype rt,
              int* rc) {
  coll::NodeEnv env;
  if (!gate(c, int64_t{rcount} * type_size(rt) * c.size(), &env)) return false;
  TypeRegistry::Entry ks, kr;
  int64_t stride = 0;
  const coll::Part recv = part(r, rcount, rt, &kr, &stride);
  const coll::Part send = part(s, int64_t{sc} * c.size(), st, &ks);
  return settle(c, coll::alltoall(env, send, recv, stride * rcount), rc);
}

bool reduce_local(Call& c, const void* in, void* inout, int count, MPI_Datatype t, MPI_Op op,
                  int* rc) {
  Runtime* rt = runtime();
  coll::ReduceOp rop{};
  coll::Basic b{};
  if (!c.active() || count <= 0 || mode() == Mode::kMirror || !coll::reduce_of(op, t, &rop, &b) ||
      !coll::reduce_defined(rop, b) || !on_device(in, count, t) || !on_device(inout, count, t))
    return false;
  coll::Reducer* red = rt->reducer();
  if (!red) return false;
  // MPI_Reduce_local: inout = in op inout.
  const void* inputs[2] = {in, inout};
  Status s = red->reduce(rop, b, inputs, 2, inout, static_cast<size_t>(count));
  *rc = s.is_ok() ? MPI_SUCCESS : raise(MPI_COMM_WORLD, s);
  return true;
}

}  // namespace loom::mpi::engines

extern "C" int loom_set_coll_method(const char* name) {
  loom::Runtime* rt = loom::runtime();
  loom::Runtime::CollMethod m;
  if (!rt || !name || !loom::Runtime::parse_coll(name, &m)) return MPI_ERR_ARG;
  rt->coll_method.store(m, std::memory_order_relaxed);
  return MPI_SUCCESS;
}
