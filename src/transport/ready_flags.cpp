#include "transport/ready_flags.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace loom::transport {
namespace {

std::string page_name(uint64_t nonce, int rank) {
  char name[64];
  std::snprintf(name, sizeof(name), "/loom.%016llx.%d.ready",
                static_cast<unsigned long long>(nonce), rank);
  return name;
}

uint32_t load(const uint32_t* w) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(w)->load(std::memory_order_acquire);
}

}  // namespace

Result<std::unique_ptr<ReadyFlags>> ReadyFlags::create(uint64_t nonce, int world_rank) {
  const std::string name = page_name(nonce, world_rank);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status(Err::kNoMemory, std::string("ready flags: ") + std::strerror(errno));
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(page_bytes())) == 0)
    p = mmap(nullptr, page_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return Status(Err::kNoMemory, std::string("ready flags: ") + std::strerror(err));
  }
  std::unique_ptr<ReadyFlags> f(new ReadyFlags());
  f->nonce_ = nonce;
  f->rank_ = world_rank;
  f->words_ = static_cast<uint32_t*>(p);  // zero-filled: seq 0 is never used
  f->linked_ = true;
  return f;
}

ReadyFlags::~ReadyFlags() {
  unlink();
  // The page stays mapped: the GPU may have it registered until the process
  // ends, and peers' pages are tiny.
}

bool ReadyFlags::own_ready(uint64_t seq) const {
  return flag_reached(load(&words_[seq % kWords]), static_cast<uint32_t>(seq));
}

Result<bool> ReadyFlags::peer_ready(int peer, uint64_t seq) {
  if (peer == rank_) return own_ready(seq);
  const uint32_t* page = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = peers_.find(peer);
    if (it != peers_.end()) {
      page = it->second;
    } else {
      const std::string name = page_name(nonce_, peer);
      const int fd = shm_open(name.c_str(), O_RDONLY, 0);
      if (fd < 0)
        return Status(Err::kInvalidArg, std::string("peer's ready flags: ") + std::strerror(errno));
      void* p = mmap(nullptr, page_bytes(), PROT_READ, MAP_SHARED, fd, 0);
      close(fd);
      if (p == MAP_FAILED) return Status(Err::kNoMemory, "mapping a peer's ready flags");
      page = static_cast<const uint32_t*>(p);
      peers_.emplace(peer, page);
    }
  }
  return flag_reached(load(&page[seq % kWords]), static_cast<uint32_t>(seq));
}

void ReadyFlags::unlink() {
  if (!linked_) return;
  linked_ = false;
  shm_unlink(page_name(nonce_, rank_).c_str());
}

}  // namespace loom::transport
