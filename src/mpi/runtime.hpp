// The one runtime object: every piece of Loom state that outlives a call
// lives here, created at MPI_Init (loom_init) and torn down at MPI_Finalize.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "coll/node_engine.hpp"
#include "model/cost.hpp"
#include "mpi/device_pull.hpp"
#include "mpi/probed.hpp"
#include "mpi/requests.hpp"
#include "mpi/type_registry.hpp"
#include "transport/mover.hpp"

namespace loom {

namespace stream {
class Engine;
}

class Runtime {
 public:
  Runtime();
  ~Runtime();

  mpi::TypeRegistry types;
  // Declared before the requests: staging held by requests goes back to it.
  transport::ReservedPool reserved;
  mpi::RequestTable requests;
  // The device method's handshake; null when the job does not use it (set
  // at loom_init, before the runtime is published, and never changed).
  std::unique_ptr<transport::Rendezvous> rv;
  // Messages probes took off the MPI's queue; exists exactly when rv does.
  std::unique_ptr<mpi::ProbedMessages> probed;
  // Stream-triggered operations (src/stream); set at loom_init after MPI_Init.
  std::unique_ptr<stream::Engine> streams;

  // How a device message moves: LOOM_METHOD when forced; in auto, the
  // measured model's fastest (loom-measure's profile), else the built-in
  // rule (device method from kDeviceMin to peers of this node, one-shot up
  // to kOneShotMax, staged above). kDevice only when `device_possible` (a
  // send to a peer of this node) and the message is at least a header long.
  transport::Method choose(const transport::Message& m, bool on_node, bool device_possible);
  // The model's prediction for m (null model: none); for introspection.
  bool predict(const transport::Message& m, bool on_node, bool device_possible,
               model::Prediction* out);
  // The mover of a method (kDevice: the staged mover, which packs into lent
  // segments). Null when no GPU mover can be made. GPU movers are made on
  // first use, on the device current then (after the application chose it).
  transport::Mover* mover(transport::Method m);
  // The mover for plain copies and whole spans of `bytes`.
  transport::Mover* mover_for(size_t bytes);
  // The host engine's mover (host buffers, whatever the mode).
  transport::Mover* host_mover() { return host_.get(); }
  // Called by Loom's stream thread (stream/engine.cpp) as it starts: device
  // messages it moves take GPU movers of its own, on non-blocking streams.
  // It runs while application streams wait for it, and a blocking stream
  // (or any use of the legacy stream) would wait for them in turn.
  static void mark_stream_thread();
  static bool in_stream_thread();
  // How collectives on device buffers run (LOOM_COLL_METHOD, read at
  // start-up; loom_set_coll_method), and the smallest call, in bytes each
  // rank receives, that `auto` gives the node-local engine.
  enum class CollMethod { kAuto, kNode, kMirror, kNccl, kStaged };
  static bool parse_coll(const std::string& name, CollMethod* out);
  std::atomic<CollMethod> coll_method{CollMethod::kAuto};
  int64_t coll_node_min = 32768;
  // Auto's smallest blocking call `fn` (MPI's name) on `ranks` ranks of a
  // node for the node engine: LOOM_COLL_NODE_MIN where the environment sets
  // it, else where the profile's measured node and mirror times cross
  // (model/coll_choice.hpp), else coll_node_min. Alike on the ranks of a
  // node (one profile). Says once per call and size, at LOOM_LOG=info, why.
  int64_t coll_node_min_for(const char* fn, int ranks);
  int64_t coll_schedule_min = 262144;     // nonblocking collectives' schedules, in auto
  bool coll_nccl_nonblocking = false;     // LOOM_COLL_NCCL_NONBLOCKING
  int64_t coll_lend_min = 4194304;        // LOOM_COLL_LEND_MIN; -1: never
  int64_t coll_pipeline_min = 1048576;    // pipelined staged collectives, in auto
  int64_t coll_pipeline_chunk = 1048576;  // their chunk
  // The node-local collectives' reductions: GPU kernels (made on first use),
  // or the host fold in the host test mode; null when none can be made.
  coll::Reducer* reducer();
  // Reads loom-measure's profile for this machine (at loom_init); `announce`:
  // this rank says what it found.
  void load_model(bool announce);
  const model::Model* model() const { return model_.get(); }
  const model::ChoiceCache& choices() const { return choices_; }
  // Staging, scratch and lent bytes not yet returned (zero when idle).
  size_t bytes_in_use() const;

  // Whether this rank wants the device method (LOOM_METHOD): all ranks must.
  bool wants_device_method() const;
  bool host_as_device() const { return host_as_device_; }
  // A staged message of `bytes` goes in pipelined chunks (rv->chunk_bytes()).
  bool pipelined(size_t bytes) const;
  // LOOM_PIPELINE_CHUNK as this rank wants it (0: off), for Rendezvous::create.
  size_t wanted_chunk() const;
  // loom_set_method: false for an unknown name or the device method off.
  bool set_method(const std::string& name);

  // A device-method message m goes from the sender's own buffer (at least
  // LOOM_ZCOPY_MIN bytes; contiguous, or any layout with LOOM_ZCOPY_TYPES;
  // and the handshake can lend it).
  // lend_as says how: its bytes as they lie from user + *base, or in the
  // message's own layout.
  enum class Lend { kNo, kContiguous, kTyped };
  Lend lend_as(const transport::Message& m, int64_t* base) const {
    // Its header is a full one: never under its size (Rendezvous::seal).
    if (!zero_copy_on() || m.bytes < zcopy_min_ || m.bytes < mpi::kHeaderBytes) return Lend::kNo;
    if (transport::contiguous_at(m, base)) return Lend::kContiguous;
    return zcopy_types_ >= 0 && lend_span_ok(m) ? Lend::kTyped : Lend::kNo;
  }
  bool zero_copy(const transport::Message& m) const {
    int64_t base = 0;
    return lend_as(m, &base) != Lend::kNo;
  }
  // A derived-type message's span is dense enough to lend (LOOM_ZCOPY_TYPES).
  // A receiver's kernel reading a peer's allocation scattered over hundreds
  // of MiB ran 1.3-1.5x slower than the segments' pack and unpack (a halo's
  // faces of 256^3 cells, one H100): peer mappings cost more per page.
  bool lend_span_ok(const transport::Message& m) const;
  static constexpr int64_t kLendSpanAlways = int64_t{2} << 20;
  // Zero-copy sends are on in this job (every rank agreed at MPI_Init): a
  // rank that blocks finishes the receives that land meanwhile, as their
  // senders wait for them to be read.
  bool zero_copy_on() const { return rv && rv->zero_copy(); }
  // This rank wants zero-copy sends (LOOM_ZCOPY_MIN; on by default).
  bool wants_zero_copy() const;

  static constexpr size_t kOneShotMax = size_t{1} << 20;
  // Since device-method sends stopped waiting for their packs, the method
  // beat one-shot for derived types from the header's size up on the H200
  // (vector ping-pong, 128 B-8 KiB: 18.3-19.2 us against 19.7-21.5 us; 2
  // H200s: 23.3-24.3 against 24.6-25.5; the halo: 2.4 against 4.7 ms). A
  // contiguous message below 8 KiB still goes faster one-shot across GPUs
  // (16-17 us against 20-21).
  static constexpr size_t kDeviceMin = 128;
  static constexpr size_t kDeviceMinContiguous = size_t{8} << 10;

 private:
  transport::Mover* gpu(transport::Method m);

  enum class Choice { kAuto, kOneShot, kStaged, kDevice };
  static bool parse(const std::string& name, Choice* out);
  std::atomic<Choice> choice_{Choice::kAuto};
  bool host_as_device_ = false;
  size_t pipeline_min_ = 0;
  int64_t zcopy_min_ = 0;      // LOOM_ZCOPY_MIN; -1: off
  bool zcopy_default_ = true;  // LOOM_ZCOPY_MIN unset
  int64_t zcopy_types_ = 16;   // LOOM_ZCOPY_TYPES: most span per data byte lent; 0: any; -1: off
  std::unique_ptr<transport::Mover> host_;
  std::mutex mu_;
  // LOOM_PROXY: the resident copy agent the GPU movers share (made with the
  // first of them; declared first, so it goes after them).
  std::unique_ptr<pack::ProxyQueue> proxy_;
  std::unique_ptr<transport::Mover> oneshot_, staged_;
  std::unique_ptr<transport::Mover> oneshot_nb_, staged_nb_;  // the stream thread's
  std::atomic<transport::Mover*> movers_[4] = {};             // the four above, once made
  bool gpu_failed_ = false;
  std::unique_ptr<coll::Reducer> reducer_;
  bool reducer_failed_ = false;
  std::unique_ptr<model::Model> model_;  // set at loom_init, before publishing
  std::map<std::pair<std::string, int>, int64_t> coll_node_from_;  // under mu_
  bool coll_node_min_set_ = false;  // LOOM_COLL_NODE_MIN in the environment (read at start-up)
  model::ChoiceCache choices_;
};

// The runtime, or null when Loom is not initialised (or disabled).
Runtime* runtime();

namespace mpi {
// The message of `count` elements of a type Loom reads (for introspection
// and benchmarks); *keep holds the type's entry. An MPI error code.
int message_of(MPI_Datatype type, int count, TypeRegistry::Entry* keep, transport::Message* m);
}  // namespace mpi

}  // namespace loom
