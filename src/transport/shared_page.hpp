// Pages of POSIX shared memory that processes of one node map by name: the
// name carries the job's nonce, the owner's world rank and what the page is
// for, so concurrent jobs and different uses never collide. Owners create
// their page; peers map it on first use and keep it mapped (pages are small,
// and a GPU may have them registered until the process ends).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/status.hpp"

namespace loom::transport {

std::string shared_page_name(uint64_t nonce, int rank, const char* what);
// Creates the page (zero-filled); fails where the name exists.
Result<void*> shared_page_create(const std::string& name, size_t bytes);
// Maps a peer's page, read-only or for writing too.
Result<void*> shared_page_map(const std::string& name, size_t bytes, bool writable);
void shared_page_unlink(const std::string& name);

}  // namespace loom::transport
