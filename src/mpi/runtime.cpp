#include "mpi/runtime.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "coll/nccl_engine.hpp"
#include "loom/loom.h"
#include "model/coll_choice.hpp"
#include "mpi/cuda_aware.hpp"
#include "stream/engine.hpp"
#include "transport/identity.hpp"
#include "transport/memtype.hpp"
#include "type/ir.hpp"
#include "util/knobs.hpp"
#include "util/log.hpp"
#include "util/stats.hpp"

namespace loom {
namespace {
std::atomic<Runtime*> g_runtime{nullptr};
}

Runtime* runtime() {
  return g_runtime.load(std::memory_order_acquire);
}

bool Runtime::parse(const std::string& name, Choice* out) {
  static const std::pair<const char*, Choice> names[] = {{"auto", Choice::kAuto},
                                                         {"oneshot", Choice::kOneShot},
                                                         {"staged", Choice::kStaged},
                                                         {"device", Choice::kDevice}};
  for (const auto& [n, c] : names)
    if (name == n) {
      *out = c;
      return true;
    }
  return false;
}

Runtime::Runtime() : host_(transport::make_host_mover()) {
  const std::string& m = knobs().method;
  Choice c = Choice::kAuto;
  if (!parse(m, &c))
    LOOM_WARN(kTransport, "LOOM_METHOD=%s is not known (device|oneshot|staged|auto): using auto",
              m.c_str());
  choice_ = c;
  host_as_device_ = knob_true(knobs().test_host_as_device);
  const long long min = std::atoll(knobs().pipeline_min.c_str());
  pipeline_min_ = min > 0 ? static_cast<size_t>(min) : 0;
  CollMethod cm = CollMethod::kAuto;
  if (!parse_coll(knobs().coll_method, &cm))
    LOOM_WARN(kTransport,
              "LOOM_COLL_METHOD=%s is not known (nccl|node|staged|mirror|auto): using auto",
              knobs().coll_method.c_str());
  coll_method = cm;
  coll_node_min = std::atoll(knobs().coll_node_min.c_str());
  // Set by the user: a value knobs() kept (an empty or a refused one is as unset).
  const char* node_min = std::getenv("LOOM_COLL_NODE_MIN");
  coll_node_min_set_ = node_min && *node_min && knobs().coll_node_min == node_min;
  coll_schedule_min = std::atoll(knobs().coll_schedule_min.c_str());
  coll_nccl_nonblocking = knob_true(knobs().coll_nccl_nonblocking);
  coll_lend_min = std::atoll(knobs().coll_lend_min.c_str());
  coll_pipeline_min = std::atoll(knobs().coll_pipeline_min.c_str());
  coll_pipeline_chunk = std::max<int64_t>(std::atoll(knobs().coll_pipeline_chunk.c_str()), 1);
  // LOOM_ZCOPY_MIN: unset, from the header's size up (below it the device
  // method does not run); negative or "off": never.
  const std::string& zc = knobs().zcopy_min;
  zcopy_default_ = zc.empty();
  if (zc == "off")
    zcopy_min_ = -1;
  else if (!zc.empty())
    zcopy_min_ = std::max<int64_t>(std::atoll(zc.c_str()), -1);
  const std::string& zt = knobs().zcopy_types;
  zcopy_types_ = zt == "all" ? 0 : zt == "off" ? -1 : std::max<int64_t>(std::atoll(zt.c_str()), -1);
  if (zcopy_types_ == 0 && zt != "all") zcopy_types_ = -1;  // "0" and words mean off
}

bool Runtime::parse_coll(const std::string& name, CollMethod* out) {
  if (name == "node")
    *out = CollMethod::kNode;
  else if (name == "mirror")
    *out = CollMethod::kMirror;
  else if (name == "nccl")
    *out = CollMethod::kNccl;
  else if (name == "staged")
    *out = CollMethod::kStaged;
  else if (name == "auto")
    *out = CollMethod::kAuto;
  else
    return false;
  return true;
}

bool Runtime::set_method(const std::string& name) {
  Choice c;
  if (!parse(name, &c) || (c == Choice::kDevice && !(rv && rv->lends()))) return false;
  choice_ = c;
  return true;
}

Runtime::~Runtime() {
  requests.drain();
  if (rv) rv->shutdown();
}

bool Runtime::lend_span_ok(const transport::Message& m) const {
  if (zcopy_types_ == 0) return true;
  const int64_t span = transport::message_span(m).size();
  int64_t most = 0;
  return span <= kLendSpanAlways ||
         (type::checked_mul(m.bytes, zcopy_types_, &most) && span <= most);
}

bool Runtime::wants_zero_copy() const {
  if (zcopy_min_ < 0) return false;
  if (!zcopy_default_) return true;
  // Not by default under MPI_THREAD_MULTIPLE: a multi-threaded soak stalled
  // once with zero-copy on (docs/interposer.md); LOOM_ZCOPY_MIN turns it on.
  int level = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&level);
  return level != MPI_THREAD_MULTIPLE;
}

bool Runtime::wants_device_method() const {
  // In the host test mode only when forced, so the other test modes keep
  // their wire format.
  const Choice c = choice_.load(std::memory_order_relaxed);
  return c == Choice::kDevice || (c == Choice::kAuto && !host_as_device_);
}

namespace {

transport::Method from_model(model::Method m) {
  switch (m) {
    case model::Method::kOneShot:
      return transport::Method::kOneShot;
    case model::Method::kDevice:
      return transport::Method::kDevice;
    case model::Method::kStaged:
      break;
  }
  return transport::Method::kStaged;
}

// The model's view of a message: its size and typical block.
model::Shape shape_of(const transport::Message& m, bool on_node, bool device_ok, size_t chunk) {
  model::Shape s;
  s.chunk_bytes = static_cast<double>(chunk);
  s.bytes = static_cast<double>(m.bytes);
  s.on_node = on_node;
  s.device_allowed = device_ok;
  const pack::Layout* one = m.one;
  s.contiguous = !one || (one->kind == pack::LayoutKind::kContiguous &&
                          (m.count <= 1 || m.extent == one->total));
  if (s.contiguous) {
    s.block_bytes = s.bytes;
  } else if (one->kind == pack::LayoutKind::kStrided) {
    s.block_bytes = static_cast<double>(one->block_len);
  } else {
    const int64_t blocks = one->nblocks_total();
    s.block_bytes = static_cast<double>(blocks > 0 ? one->total / blocks : one->total);
  }
  return s;
}

}  // namespace

bool Runtime::predict(const transport::Message& m, bool on_node, bool device_possible,
                      model::Prediction* out) {
  if (!model_ || !m.form) return false;
  const bool device_ok = device_possible && rv && rv->lends() && m.bytes >= rv->device_min();
  // Equal forms with other extents pack other layouts: the extent is keyed too.
  const uint64_t key = m.form->hash ^ (static_cast<uint64_t>(m.extent) * 0x9e3779b97f4a7c15ull);
  bool missed = false;
  *out = choices_.get(*model_, key, m.count,
                      shape_of(m, on_node, device_ok,
                               pipelined(static_cast<size_t>(m.bytes)) ? rv->chunk_bytes() : 0),
                      &missed);
  if (missed && log_enabled(LogLevel::kInfo, Subsys::kModel))
    LOOM_INFO(kModel, "%s x %lld (%s, %s): %s -> %s", type::to_string(m.form).c_str(),
              static_cast<long long>(m.count), m.one ? m.one->describe().c_str() : "?",
              on_node ? "peer on node" : "peer off node", out->explain().c_str(),
              model::method_name(out->best));
  return true;
}

transport::Method Runtime::choose(const transport::Message& m, bool on_node, bool device_possible) {
  const bool device_ok = device_possible && rv && rv->lends() && m.bytes >= rv->device_min();
  switch (choice_.load(std::memory_order_relaxed)) {
    case Choice::kOneShot:
      return transport::Method::kOneShot;
    case Choice::kStaged:
      return transport::Method::kStaged;
    case Choice::kDevice:  // below a header's size one-shot: its stream waits for no batch
      if (device_ok) return transport::Method::kDevice;
      return m.bytes < mpi::kHeaderBytes ? transport::Method::kOneShot : transport::Method::kStaged;
    case Choice::kAuto:
      break;
  }
  // A contiguous message the receiver copies straight out of the sender's
  // buffer pays one copy in all: no method the model knows does better.
  if (device_ok && zero_copy(m)) return transport::Method::kDevice;
  model::Prediction pr;
  if (predict(m, on_node, device_ok, &pr)) return from_model(pr.best);
  const size_t bytes = static_cast<size_t>(m.bytes);
  int64_t base = 0;
  // Non-contiguous messages under a header's size too, where slabs carry
  // them: their packs batch, where a staged one waits for the GPU alone.
  const size_t device_min = transport::contiguous_at(m, &base) ? kDeviceMinContiguous
                            : rv ? std::min(kDeviceMin, static_cast<size_t>(rv->device_min()))
                                 : kDeviceMin;
  if (device_ok && bytes >= device_min) return transport::Method::kDevice;
  return bytes <= kOneShotMax ? transport::Method::kOneShot : transport::Method::kStaged;
}

size_t Runtime::wanted_chunk() const {
  const std::string& v = knobs().pipeline_chunk;
  // Off unless asked for: on one node it gained nothing against the MPI's
  // shared-memory copy, and slowed later messages (docs/interposer.md).
  if (v.empty()) return 0;
  const long long n = std::atoll(v.c_str());
  return n > 0 ? static_cast<size_t>(n) : 0;
}

bool Runtime::pipelined(size_t bytes) const {
  return rv && rv->chunk_bytes() != 0 && bytes >= pipeline_min_ && bytes > rv->chunk_bytes();
}

transport::Mover* Runtime::mover(transport::Method m) {
  if (host_as_device_) return host_.get();
  return gpu(m == transport::Method::kOneShot ? transport::Method::kOneShot
                                              : transport::Method::kStaged);
}

void Runtime::load_model(bool announce) {
  const model::Identity id = transport::machine_identity(host_as_device_);
  const std::string path = model::profile_path(id);
  const char* how = "run `mpirun -np 2 loom-measure` once on this machine to make one";
  if (path.empty()) {
    if (announce)
      LOOM_INFO(kModel,
                "no cache directory for profiles (set LOOM_CACHE_DIR); auto uses the "
                "built-in rule");
    return;
  }
  auto p = model::read_profile(path, &id);
  if (!p) {
    if (p.status().code() == Err::kNotFound) {
      if (announce)
        LOOM_INFO(kModel, "no profile for %s / %s (%s): auto uses the built-in rule; %s",
                  id.gpu.c_str(), id.mpi.c_str(), path.c_str(), how);
    } else if (announce) {
      LOOM_WARN(kModel, "%s; auto uses the built-in rule", p.status().message().c_str());
    }
    return;
  }
  model_ = std::make_unique<model::Model>(std::move(p.value()));
  if (!announce) return;
  std::string lacks;
  for (const std::string& t : model_->missing()) lacks += " " + t;
  LOOM_INFO(kModel, "profile %s, measured %s on %s%s%s", path.c_str(),
            model_->profile().date.c_str(), model_->profile().host.c_str(),
            lacks.empty() ? "" : "; it lacks:", lacks.c_str());
}

namespace {
thread_local bool tl_stream_thread = false;
}

void Runtime::mark_stream_thread() {
  tl_stream_thread = true;
}

bool Runtime::in_stream_thread() {
  return tl_stream_thread;
}

transport::Mover* Runtime::gpu(transport::Method m) {
  const bool nb = tl_stream_thread;
  // Made once, kept to the end: read without the lock (every device call asks).
  std::atomic<transport::Mover*>& made_once =
      movers_[(m == transport::Method::kOneShot ? 2 : 0) + (nb ? 1 : 0)];
  if (transport::Mover* mv = made_once.load(std::memory_order_acquire)) return mv;
  std::lock_guard<std::mutex> lk(mu_);
  auto& slot = m == transport::Method::kOneShot ? (nb ? oneshot_nb_ : oneshot_)
                                                : (nb ? staged_nb_ : staged_);
  if (!slot && !gpu_failed_) {
    if (!proxy_ && knob_true(knobs().proxy)) {
      const long long idle_us = std::max(0LL, std::atoll(knobs().proxy_idle_us.c_str()));
      if (auto p = pack::make_gpu_proxy(static_cast<uint64_t>(idle_us) * 1000))
        proxy_ = std::move(p.value());
      else
        LOOM_WARN(kTransport, "LOOM_PROXY: no copy agent (%s)", p.status().message().c_str());
    }
    const long long proxy_max = std::max(0LL, std::atoll(knobs().proxy_max.c_str()));
    auto made = transport::make_gpu_mover(m, nb, proxy_.get(), static_cast<size_t>(proxy_max));
    if (made) {
      slot = std::move(made.value());
      made_once.store(slot.get(), std::memory_order_release);
    } else {
      gpu_failed_ = true;
      LOOM_LOG(kError, kTransport, "no GPU mover: %s", made.status().message().c_str());
    }
  }
  return slot.get();
}

int64_t Runtime::coll_node_min_for(const char* fn, int ranks) {
  if (coll_node_min_set_ || !model_) return coll_node_min;
  std::string call = model::coll_call_name(fn);
  std::lock_guard<std::mutex> lk(mu_);
  auto key = std::make_pair(std::move(call), ranks);
  if (auto it = coll_node_from_.find(key); it != coll_node_from_.end()) return it->second;
  const double from = model::coll_node_from(model_->profile(), key.first, ranks);
  int64_t min = coll_node_min;
  if (from < 0) {
    LOOM_INFO(kModel,
              "%s on %d ranks: the node engine from %lld bytes a rank (built-in rule: "
              "the profile has no times of this call on %d ranks)",
              fn, ranks, static_cast<long long>(min), ranks);
  } else {
    min = std::isinf(from) ? INT64_MAX : static_cast<int64_t>(std::ceil(from));
    if (std::isinf(from))
      LOOM_INFO(kModel,
                "%s on %d ranks: the mirrors at every size (the profile's node engine "
                "loses at its largest size)",
                fn, ranks);
    else
      LOOM_INFO(kModel,
                "%s on %d ranks: the node engine from %lld bytes a rank (where the "
                "profile's node and mirror times cross)",
                fn, ranks, static_cast<long long>(min));
  }
  coll_node_from_.emplace(std::move(key), min);
  return min;
}

coll::Reducer* Runtime::reducer() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!reducer_ && host_as_device_) reducer_ = coll::make_host_reducer();
  if (!reducer_ && !reducer_failed_) {
    auto made = coll::make_gpu_reducer();
    if (made) {
      reducer_ = std::move(made.value());
    } else {
      reducer_failed_ = true;
      LOOM_WARN(kTransport, "no GPU reducer (%s): reductions on device buffers go to the MPI",
                made.status().message().c_str());
    }
  }
  return reducer_.get();
}

transport::Mover* Runtime::mover_for(size_t bytes) {
  const Choice c = choice_.load(std::memory_order_relaxed);
  const bool oneshot = c == Choice::kOneShot || (c == Choice::kAuto && bytes <= kOneShotMax);
  return mover(oneshot ? transport::Method::kOneShot : transport::Method::kStaged);
}

size_t Runtime::bytes_in_use() const {
  if (rv) rv->progress();  // first: finished chunk sends return their staging
  size_t n = host_->bytes_in_use();
  if (rv) n += rv->bytes_lent();
  if (oneshot_) n += oneshot_->bytes_in_use();
  if (staged_) n += staged_->bytes_in_use();
  if (oneshot_nb_) n += oneshot_nb_->bytes_in_use();
  if (staged_nb_) n += staged_nb_->bytes_in_use();
  return n;
}

}  // namespace loom

extern "C" int loom_init(void) {
  using namespace loom;
  if (runtime()) return MPI_SUCCESS;
  knobs_reload();
  log_reload();
  if (knob_true(knobs().disable)) return MPI_SUCCESS;
  int rank = -1, up = 0;
  MPI_Initialized(&up);
  if (up) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  log_set_rank(rank);
  // Each rank: one whose environment differs would otherwise run with
  // another value of an all-ranks-alike setting, unsaid.
  for (const std::string& p : knob_problems()) LOOM_WARN(kMpi, "%s", p.c_str());
  stats::enable(knob_true(knobs().stats));
  transport::memtype_init();
  auto* rt = new Runtime();
  if (up) {
    std::string why;
    const bool native = mpi::mpi_moves_device_memory(&why);
    LOOM_INFO(kMpi, "the MPI %s device memory: %s", native ? "moves" : "does not move",
              why.c_str());
    rt->rv = mpi::Rendezvous::create(rt->wants_device_method(), rt->wants_zero_copy(),
                                     rt->wanted_chunk(), rt->host_as_device(), native);
  }
  if (rt->rv) rt->probed = std::make_unique<mpi::ProbedMessages>(*rt->rv);
  if (up) mpi::detect_peek_deactivates();
  if (up) rt->streams = std::make_unique<stream::Engine>();
  rt->load_model(rank <= 0);
  if (up) {  // said once a node
    const transport::GpuSharing gs = transport::gpu_sharing(rt->host_as_device());
    if (const std::string w = transport::sharing_warning(gs); !w.empty() && gs.first_on_node)
      LOOM_WARN(kTransport, "%s", w.c_str());
  }
  Runtime* expected = nullptr;
  if (!g_runtime.compare_exchange_strong(expected, rt)) delete rt;
  LOOM_INFO(kMpi, "Loom %d.%d initialised", LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR);
  return MPI_SUCCESS;
}

extern "C" int loom_finalize(void) {
  // Detached receives finish (and may pull device-method messages) while the
  // runtime is still published.
  if (loom::Runtime* live = loom::runtime()) {
    if (live->streams) live->streams->shutdown();  // first: its operations use requests
    live->requests.drain();
    if (live->rv) live->rv->shutdown();
    loom::coll::nccl::shutdown();  // before the MPI frees the communicators they live on
  }
  loom::Runtime* rt = loom::g_runtime.exchange(nullptr);
  if (rt) {
    int rank = -1, up = 0;
    MPI_Initialized(&up);
    if (up) PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    loom::stats::print(rank);
  }
  if (rt && rt->bytes_in_use() != 0)
    LOOM_WARN(kMpi, "finalize with %zu staging bytes still in use", rt->bytes_in_use());
  delete rt;
  return MPI_SUCCESS;
}

extern "C" int loom_set_method(const char* name) {
  loom::Runtime* rt = loom::runtime();
  if (!rt || !name || !rt->set_method(name)) return MPI_ERR_ARG;
  return MPI_SUCCESS;
}

extern "C" int loom_type_commit(MPI_Datatype type) {
  loom::Runtime* rt = loom::runtime();
  if (!rt) return MPI_SUCCESS;
  auto e = rt->types.commit(type);
  // Unsupported types are fine: they are handed back to the MPI later.
  if (!e && e.status().code() == loom::Err::kNullType) return MPI_ERR_TYPE;
  return MPI_SUCCESS;
}

extern "C" int loom_type_free(MPI_Datatype type) {
  if (loom::Runtime* rt = loom::runtime()) rt->types.release(type);
  return MPI_SUCCESS;
}
