#include "transport/message_wire.hpp"

#include <cstring>

#include "type/wire.hpp"

namespace loom::transport {
namespace {

struct Head {
  int64_t count = 0, extent = 0, bytes = 0;
  int64_t lo = 0, span = 0;
};

}  // namespace

bool encode_message(const Message& m, std::vector<unsigned char>* out, size_t max) {
  if (!m.form) return false;
  const Span sp = message_span(m);
  Head h{m.count, m.extent, m.bytes, sp.lo, sp.size()};
  const size_t at = out->size();
  out->resize(at + sizeof h);
  std::memcpy(out->data() + at, &h, sizeof h);
  return type::encode(m.form, out, max);
}

Result<std::unique_ptr<PeerMessage>> decode_message(const unsigned char* p, size_t n) {
  Head h;
  if (n < sizeof h) return Status(Err::kInvalidArg, "a message layout too short");
  std::memcpy(&h, p, sizeof h);
  size_t used = 0;
  auto form = type::decode(p + sizeof h, n - sizeof h, &used);
  if (!form) return form.status();
  if (!form.value() || h.count <= 0 || h.span < 0 || form.value()->size * h.count != h.bytes)
    return Status(Err::kInvalidArg, "a message layout that is none");
  auto l = pack::make_layout(form.value());
  if (!l) return l.status();
  auto pm = std::make_unique<PeerMessage>();
  pm->one = std::move(l.value());
  pm->m.form = form.value();
  pm->m.one = &pm->one;
  pm->m.count = h.count;
  pm->m.extent = h.extent;
  pm->m.bytes = h.bytes;
  pm->lo = h.lo;
  pm->span = h.span;
  return pm;
}

}  // namespace loom::transport
