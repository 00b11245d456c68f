// A message's layout as bytes, for a peer that reads a buffer lent in that
// layout (zero-copy typed messages of the device method, MPIS pairs read in
// place): the sender's canonical form, count, extent and size, with the
// span its bytes cover. The peer rebuilds a Message it can pack from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "pack/layout.hpp"
#include "transport/mover.hpp"
#include "util/status.hpp"

namespace loom::transport {

// A message rebuilt from its bytes: `m` addresses the sender's buffer from
// its user pointer; its bytes cover [user + lo, user + lo + span).
struct PeerMessage {
  pack::Layout one;
  Message m;
  int64_t lo = 0, span = 0;
};

// Appends m's layout to *out; false where its form takes more than `max` bytes.
bool encode_message(const Message& m, std::vector<unsigned char>* out, size_t max);
// Reads what encode_message wrote at [p, p + n).
Result<std::unique_ptr<PeerMessage>> decode_message(const unsigned char* p, size_t n);

}  // namespace loom::transport
