#include "transport/shared_page.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace loom::transport {

std::string shared_page_name(uint64_t nonce, int rank, const char* what) {
  char name[80];
  std::snprintf(name, sizeof(name), "/loom.%016llx.%d.%s", static_cast<unsigned long long>(nonce),
                rank, what);
  return name;
}

Result<void*> shared_page_create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Status(Err::kNoMemory, name + ": " + std::strerror(errno));
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0)
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return Status(Err::kNoMemory, name + ": " + std::strerror(err));
  }
  return p;
}

Result<void*> shared_page_map(const std::string& name, size_t bytes, bool writable) {
  const int fd = shm_open(name.c_str(), writable ? O_RDWR : O_RDONLY, 0);
  if (fd < 0) return Status(Err::kInvalidArg, "a peer's " + name + ": " + std::strerror(errno));
  void* p = mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return Status(Err::kNoMemory, "mapping a peer's " + name);
  return p;
}

void shared_page_unlink(const std::string& name) {
  shm_unlink(name.c_str());
}

}  // namespace loom::transport
