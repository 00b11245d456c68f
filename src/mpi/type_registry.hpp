// The type registry (the form cache): what Loom made of each committed
// datatype, keyed by handle, with the one-element layout ready for the
// engines so a pack call does no tree work. Entries are built at commit and
// dropped at free; users of an entry hold a shared_ptr, so a type freed while
// a message using it is in flight stays valid for that message (MPI allows
// freeing such types). Equal canonical forms are interned: two handles with
// the same layout share one form node, so caches further down can key by
// form pointer.
#pragma once

#include <mpi.h>

#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "pack/layout.hpp"
#include "type/type_info.hpp"
#include "util/status.hpp"

namespace loom::mpi {

// enable_shared_from_this: a message of the type keeps it (and its layout)
// while a pack still to run reads it, after the user freed the type.
struct CommittedType : std::enable_shared_from_this<CommittedType> {
  CommittedType(type::TypeInfo i, pack::Layout l) : info(std::move(i)), layout(std::move(l)) {}
  type::TypeInfo info;
  pack::Layout layout;  // one element
};

class TypeRegistry {
 public:
  using Entry = std::shared_ptr<const CommittedType>;

  // Reads a just-committed type. Types Loom cannot read are remembered as
  // unsupported (lookup says kUnsupported: hand them back to the MPI).
  Result<Entry> commit(MPI_Datatype t);
  // Declines a type (a layer above found it cannot serve it): lookups hand it
  // back to the MPI from now on.
  void mark_unsupported(MPI_Datatype t, Status why);
  // At MPI_Type_free: forgets the handle (the MPI may reuse it).
  void release(MPI_Datatype t);
  // The entry of a committed type; C predefined types are read on first use.
  // kNullType for MPI_DATATYPE_NULL and for any other handle Loom has not
  // seen committed (callers hand those to the MPI, which knows them or not).
  Result<Entry> lookup(MPI_Datatype t);

  size_t size() const;
  size_t interned_forms() const;

  // A handle an operation will pass to the MPI later (a stream-enqueued
  // send or receive, posted when its stream gets there): MPI_Type_free of it
  // meanwhile is deferred until the last unpin, as MPI lets a type be freed
  // while communication that uses it is pending. unpin() returns true when
  // a free was deferred: the caller frees the handle now.
  void pin(MPI_Datatype t);
  bool unpin(MPI_Datatype t);
  // At MPI_Type_free: true when t is pinned (its free is left to unpin()).
  bool defer_free(MPI_Datatype t);

 private:
  Result<Entry> insert(MPI_Datatype t);
  type::NodePtr intern(const type::NodePtr& form);

  mutable std::shared_mutex mu_;
  std::unordered_map<MPI_Datatype, Entry> by_handle_;
  std::unordered_map<MPI_Datatype, Status> unsupported_;
  std::unordered_multimap<uint64_t, std::weak_ptr<const type::Node>> forms_;
  struct Pin {
    int count = 0;
    bool freed = false;
  };
  std::mutex pins_mu_;
  std::unordered_map<MPI_Datatype, Pin> pins_;
};

// Holds a user's datatype for an operation that passes it to the MPI later
// (a direct send or receive, an MPIS request, a persistent collective's
// starts): an MPI_Type_free meanwhile takes effect when the last holder
// lets go (TypeRegistry::pin).
class TypePin {
 public:
  explicit TypePin(MPI_Datatype t);
  ~TypePin();
  TypePin(const TypePin&) = delete;
  TypePin& operator=(const TypePin&) = delete;

 private:
  MPI_Datatype t_ = MPI_DATATYPE_NULL;
};

}  // namespace loom::mpi
