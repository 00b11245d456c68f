// The IR on the wire: a canonical form as bytes another process rebuilds
// (a sender's layout, which a receiver reads straight out of its memory).
// Little-endian 64-bit fields, pre-order; decode() checks every field, so
// bytes from anywhere give a tree or an error, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "type/ir.hpp"
#include "util/status.hpp"

namespace loom::type {

// Appends n's encoding to *out; false (out unchanged) when it would make
// *out longer than `max` bytes.
bool encode(const NodePtr& n, std::vector<unsigned char>* out, size_t max);
// The tree encoded in [p, p + n); *used: bytes it took. kInvalidArg for
// bytes that are no encoding (truncated, nested too deep, bad counts),
// kOverflow where the tree's sizes do not fit 64 bits.
Result<NodePtr> decode(const unsigned char* p, size_t n, size_t* used);

}  // namespace loom::type
