#include "type/type_cache.hpp"

#include "type/from_mpi.hpp"
#include "util/log.hpp"

namespace loom::type {
namespace {

bool is_named(MPI_Datatype t) {
  int ni, na, nt, comb;
#if MPI_VERSION >= 4
  MPI_Count cni, cna, cnc, cnt;
  if (MPI_Type_get_envelope_c(t, &cni, &cna, &cnc, &cnt, &comb) != MPI_SUCCESS) return false;
  (void)ni, (void)na, (void)nt;
#else
  if (MPI_Type_get_envelope(t, &ni, &na, &nt, &comb) != MPI_SUCCESS) return false;
#endif
  return comb == MPI_COMBINER_NAMED;
}

}  // namespace

NodePtr TypeCache::intern(const NodePtr& form) {
  if (!form) return form;
  auto [lo, hi] = forms_.equal_range(form->hash);
  for (auto it = lo; it != hi;) {
    NodePtr have = it->second.lock();
    if (!have) {
      it = forms_.erase(it);
      continue;
    }
    if (equal(*have, *form)) return have;
    ++it;
  }
  forms_.emplace(form->hash, form);
  return form;
}

Result<TypeCache::Entry> TypeCache::insert(MPI_Datatype t) {
  auto info = translate(t);
  std::unique_lock lk(mu_);
  if (!info) {
    if (info.status().code() == Err::kUnsupported) unsupported_[t] = info.status();
    LOOM_INFO(kType, "type not accelerated: %s", info.status().message().c_str());
    return info.status();
  }
  info->form = intern(info->form);
  auto e = std::make_shared<const TypeInfo>(std::move(info.value()));
  by_handle_[t] = e;
  unsupported_.erase(t);
  LOOM_DEBUG(kType, "commit: form %s hash %016llx", to_string(e->form).c_str(),
             (unsigned long long)e->hash());
  return e;
}

Result<TypeCache::Entry> TypeCache::commit(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return Status(Err::kNullType, "MPI_DATATYPE_NULL");
  return insert(t);
}

void TypeCache::release(MPI_Datatype t) {
  std::unique_lock lk(mu_);
  by_handle_.erase(t);
  unsupported_.erase(t);
}

Result<TypeCache::Entry> TypeCache::lookup(MPI_Datatype t) {
  if (t == MPI_DATATYPE_NULL) return Status(Err::kNullType, "MPI_DATATYPE_NULL");
  {
    std::shared_lock lk(mu_);
    auto it = by_handle_.find(t);
    if (it != by_handle_.end()) return it->second;
    auto u = unsupported_.find(t);
    if (u != unsupported_.end()) return u->second;
  }
  if (is_named(t)) return insert(t);
  return Status(Err::kNullType, "datatype was not committed");
}

size_t TypeCache::size() const {
  std::shared_lock lk(mu_);
  return by_handle_.size();
}

size_t TypeCache::interned_forms() const {
  std::shared_lock lk(mu_);
  return forms_.size();
}

}  // namespace loom::type
