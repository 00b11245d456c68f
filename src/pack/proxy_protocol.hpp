// The resident copy agent's protocol (pack/proxy_queue.hpp is the host side,
// pack/cuda/proxy.cu the kernel): a ring of copy requests and a control block
// in mapped pinned host memory, shared by the host and one small kernel that
// stays on the GPU while requests come and leaves when idle.
//
// Leaving must not lose a request posted at that moment. Both sides follow a
// store-then-load pattern (Dekker's): the host stores `head`, then loads
// `state`; the agent stores `state = 0`, then loads `head`. With a full fence
// between each store and load, at least one side sees the other's store:
// either the agent sees the new request and stays, or the host sees it going
// and waits until it has gone (or came back) before launching another.
//
// Host/device code: the kernel runs it, and the CPU tests run it in a thread.
#pragma once

#include <cstdint>

#include "pack/index_math.hpp"  // LOOM_HD

namespace loom::pack {

constexpr uint32_t kProxyRing = 64;  // requests in flight at most

// A request: three words, each a 48-bit value (a user-space address or a
// byte count) and the low 16 bits of the request's number. A word is read
// whole (8 bytes), so the agent can read all three in one trip over PCIe and
// know they belong to the same request: all three tags match the number it
// waits for.
struct ProxySlot {
  uint64_t w[4];  // dst, src, bytes, unused
};
constexpr int kProxyValueBits = 48;
LOOM_HD uint64_t proxy_tag(uint64_t seq) {
  return seq & 0xffffu;
}
LOOM_HD uint64_t proxy_word(uint64_t value, uint64_t seq) {
  return value | proxy_tag(seq) << kProxyValueBits;
}
LOOM_HD bool proxy_word_is(uint64_t w, uint64_t seq) {
  return w >> kProxyValueBits == proxy_tag(seq);
}
LOOM_HD uint64_t proxy_value(uint64_t w) {
  return w & ((uint64_t{1} << kProxyValueBits) - 1);
}

// Each field on a line of its own: the host and the GPU write different ones.
struct ProxyCtl {
  alignas(64) uint64_t head;   // requests posted (host)
  alignas(64) uint64_t tail;   // requests done (agent)
  alignas(64) uint32_t state;  // 1: an agent runs or is launched; 0: it has left or is leaving
  uint32_t stop;               // the host asks the agent to leave now
};

// The agent has been idle long enough and `tail` requests are done: may it
// leave? `M` gives loads with acquire order, stores, and a full (sequentially
// consistent) fence, for the GPU's system scope or the host's atomics.
template <class M>
LOOM_HD bool proxy_leave(ProxyCtl* c, uint64_t tail) {
  M::store32(&c->state, 0u);
  M::fence();
  if (M::load(&c->head) > tail) {  // a request came as it was leaving: stay
    M::store32(&c->state, 1u);
    return false;
  }
  return true;
}

}  // namespace loom::pack
