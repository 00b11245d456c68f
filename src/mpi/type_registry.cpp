#include "mpi/type_registry.hpp"

#include "mpi/next.hpp"
#include "mpi/runtime.hpp"
#include "type/from_mpi.hpp"
#include "util/log.hpp"

namespace loom::mpi {

using type::NodePtr;

NodePtr TypeRegistry::intern(const NodePtr& form) {
  if (!form) return form;
  auto [lo, hi] = forms_.equal_range(form->hash);
  for (auto it = lo; it != hi;) {
    NodePtr have = it->second.lock();
    if (!have) {
      it = forms_.erase(it);
      continue;
    }
    if (type::equal(*have, *form)) return have;
    ++it;
  }
  forms_.emplace(form->hash, form);
  return form;
}

Result<TypeRegistry::Entry> TypeRegistry::insert(MPI_Datatype t) {
  auto info = type::translate(t);
  std::unique_lock lk(mu_);
  if (!info) {
    // Anything Loom cannot read (unknown combiner, sizes past 64 bits, an MPI
    // query that failed) is handed back to the MPI, which may know better.
    if (info.status().code() == Err::kNullType) return info.status();
    Status s(Err::kUnsupported, info.status().message());
    unsupported_[t] = s;
    LOOM_INFO(kType, "type not accelerated: %s", s.message().c_str());
    return s;
  }
  auto layout = pack::make_layout(info->form);
  if (!layout) {
    Status s(Err::kUnsupported, layout.status().message());
    unsupported_[t] = s;
    return s;
  }
  info->form = intern(info->form);
  auto e =
      std::make_shared<const CommittedType>(std::move(info.value()), std::move(layout.value()));
  by_handle_[t] = e;
  unsupported_.erase(t);
  LOOM_DEBUG(kType, "commit: form %s hash %016llx", type::to_string(e->info.form).c_str(),
             (unsigned long long)e->info.hash());
  return e;
}

Result<TypeRegistry::Entry> TypeRegistry::commit(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return Status(Err::kNullType, "MPI_DATATYPE_NULL");
  return insert(t);
}

void TypeRegistry::mark_unsupported(MPI_Datatype t, Status why) {
  std::unique_lock lk(mu_);
  by_handle_.erase(t);
  unsupported_[t] = Status(Err::kUnsupported, why.message());
}

void TypeRegistry::release(MPI_Datatype t) {
  std::unique_lock lk(mu_);
  by_handle_.erase(t);
  unsupported_.erase(t);
}

void TypeRegistry::pin(MPI_Datatype t) {
  std::lock_guard<std::mutex> lk(pins_mu_);
  ++pins_[t].count;
}

bool TypeRegistry::unpin(MPI_Datatype t) {
  std::lock_guard<std::mutex> lk(pins_mu_);
  auto it = pins_.find(t);
  if (it == pins_.end() || --it->second.count > 0) return false;
  const bool freed = it->second.freed;
  pins_.erase(it);
  return freed;
}

bool TypeRegistry::defer_free(MPI_Datatype t) {
  std::lock_guard<std::mutex> lk(pins_mu_);
  auto it = pins_.find(t);
  if (it == pins_.end() || it->second.freed) return false;
  it->second.freed = true;
  return true;
}

Result<TypeRegistry::Entry> TypeRegistry::lookup(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return Status(Err::kNullType, "MPI_DATATYPE_NULL");
  {
    std::shared_lock lk(mu_);
    auto it = by_handle_.find(t);
    if (it != by_handle_.end()) return it->second;
    auto u = unsupported_.find(t);
    if (u != unsupported_.end()) return u->second;
  }
  // Only C predefined types are read on first use; any other unknown handle
  // (never committed, or freed) is not passed to the MPI from here.
  if (type::is_predefined(t)) return insert(t);
  return Status(Err::kNullType, "datatype not committed through Loom");
}

size_t TypeRegistry::size() const {
  std::shared_lock lk(mu_);
  return by_handle_.size();
}

size_t TypeRegistry::interned_forms() const {
  std::shared_lock lk(mu_);
  return forms_.size();
}

TypePin::TypePin(MPI_Datatype t) {
  Runtime* rt = runtime();
  if (!rt || t == MPI_DATATYPE_NULL || type::is_predefined(t)) return;
  rt->types.pin(t);
  t_ = t;
}

TypePin::~TypePin() {
  Runtime* rt = runtime();
  if (t_ == MPI_DATATYPE_NULL || !rt || !rt->types.unpin(t_)) return;
  rt->types.release(t_);
  int done = 0;  // a schedule's last reference may go at exit
  if (PMPI_Finalized(&done) == MPI_SUCCESS && !done) LOOM_NEXT(MPI_Type_free)(&t_);
}

}  // namespace loom::mpi
