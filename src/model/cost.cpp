#include "model/cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>

namespace loom::model {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

template <class T>
T find_or_empty(const std::map<std::string, T>& m, const char* name) {
  auto it = m.find(name);
  return it == m.end() ? T{} : it->second;
}

double scalar_or(const Profile& p, const char* name, double dflt) {
  auto it = p.scalars.find(name);
  return it == p.scalars.end() ? dflt : it->second;
}

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

const char* method_name(Method m) {
  switch (m) {
    case Method::kOneShot:
      return "oneshot";
    case Method::kStaged:
      return "staged";
    case Method::kDevice:
      return "device";
  }
  return "unknown";
}

std::string Prediction::explain() const {
  int order[kNumMethods] = {0, 1, 2};
  std::stable_sort(order, order + kNumMethods, [&](int a, int b) { return usec[a] < usec[b]; });
  std::string out;
  for (int k = 0; k < kNumMethods; ++k) {
    int i = order[k];
    if (k > 0) out += usec[order[k - 1]] == usec[i] ? " = " : " < ";
    out += method_name(static_cast<Method>(i));
    char buf[48];
    if (std::isinf(usec[i]))
      std::snprintf(buf, sizeof buf, " n/a");
    else
      std::snprintf(buf, sizeof buf, usec[i] < 10 ? " %.2f us" : " %.1f us", usec[i]);
    out += buf;
  }
  if (std::isinf(usec[order[0]])) out += " (none usable: staged by default)";
  return out;
}

Model::Model(Profile p) : profile_(std::move(p)) {
  pack_dev_ = find_or_empty(profile_.surfaces, term::kPackDev);
  unpack_dev_ = find_or_empty(profile_.surfaces, term::kUnpackDev);
  pack_host_ = find_or_empty(profile_.surfaces, term::kPackHost);
  unpack_host_ = find_or_empty(profile_.surfaces, term::kUnpackHost);
  d2h_ = find_or_empty(profile_.curves, term::kD2H);
  h2d_ = find_or_empty(profile_.curves, term::kH2D);
  mpi_on_ = find_or_empty(profile_.curves, term::kMpiOnNode);
  mpi_off_ = find_or_empty(profile_.curves, term::kMpiOffNode);
  ipc_ = find_or_empty(profile_.curves, term::kIpcCopy);
  over_device_ = scalar_or(profile_, term::kOverheadDevice, kInf);
  over_oneshot_ = scalar_or(profile_, term::kOverheadOneshot, kInf);
  over_staged_ = scalar_or(profile_, term::kOverheadStaged, kInf);
  over_device_packed_ = scalar_or(profile_, term::kOverheadDevicePacked, over_device_);
  over_oneshot_packed_ = scalar_or(profile_, term::kOverheadOneshotPacked, over_oneshot_);
  over_staged_packed_ = scalar_or(profile_, term::kOverheadStagedPacked, over_staged_);
  header_bytes_ = scalar_or(profile_, term::kHeaderBytes, kDefaultHeaderBytes);
  const char* scales[kNumMethods][2] = {{term::kScaleOneshot, term::kScaleOneshotPacked},
                                        {term::kScaleStaged, term::kScaleStagedPacked},
                                        {term::kScaleDevice, term::kScaleDevicePacked}};
  for (int m = 0; m < kNumMethods; ++m) {
    scale_[m][0] = scalar_or(profile_, scales[m][0], 1.0);
    scale_[m][1] = scalar_or(profile_, scales[m][1], scale_[m][0]);
  }
}

Prediction Model::predict(const Shape& s) const {
  Prediction p;
  double n = std::max(s.bytes, 0.0);
  double blk = s.contiguous || !(s.block_bytes > 0) ? n : s.block_bytes;
  const Curve& mpi = s.on_node || mpi_off_.empty() ? mpi_on_ : mpi_off_;
  double mpi_n = mpi.at(n);  // +inf when missing, like every term below

  // The fixed overhead plus the scaled terms, but never less than the
  // slowest term (scaled).
  const int packed = s.contiguous ? 0 : 1;
  auto total = [&](Method m, double over, std::initializer_list<double> terms) {
    const double k = scale_[static_cast<int>(m)][packed];
    double sum = 0, slowest = 0;
    for (double t : terms) {
      sum += t;
      slowest = std::max(slowest, t);
    }
    return std::max(over + k * sum, k * slowest);
  };
  p.usec[static_cast<int>(Method::kOneShot)] =
      total(Method::kOneShot, s.contiguous ? over_oneshot_ : over_oneshot_packed_,
            {pack_host_.at(blk, n), mpi_n, unpack_host_.at(blk, n)});
  double pack = pack_dev_.at(blk, n), unpack = unpack_dev_.at(blk, n);
  p.usec[static_cast<int>(Method::kStaged)] =
      total(Method::kStaged, s.contiguous ? over_staged_ : over_staged_packed_,
            {pack, d2h_.at(n), mpi_n, h2d_.at(n), unpack});
  if (s.chunk_bytes > 0 && n > s.chunk_bytes) {  // the copies and sends of chunks overlap
    const double c = s.chunk_bytes, k = std::ceil(n / c);
    const double d = d2h_.at(c), t = mpi.at(c), h = h2d_.at(c);
    const double pipe = d + t + h + (k - 1) * std::max({d, t, h});
    p.usec[static_cast<int>(Method::kStaged)] = total(
        Method::kStaged, s.contiguous ? over_staged_ : over_staged_packed_, {pack, pipe, unpack});
  }
  // A contiguous message is copied from the peer's segment straight into the
  // user's buffer: no unpack after the copy.
  p.usec[static_cast<int>(Method::kDevice)] =
      s.on_node && s.device_allowed && n >= header_bytes_
          ? total(Method::kDevice, s.contiguous ? over_device_ : over_device_packed_,
                  {pack, mpi_on_.at(header_bytes_), ipc_.at(n), s.contiguous ? 0.0 : unpack})
          : kInf;

  p.best = Method::kStaged;
  double best = kInf;
  for (int i = 0; i < kNumMethods; ++i) {
    if (p.usec[i] < best) {
      best = p.usec[i];
      p.best = static_cast<Method>(i);
    }
  }
  return p;
}

std::vector<std::string> Model::missing() const {
  std::vector<std::string> out;
  for (const char* name : {term::kPackDev, term::kUnpackDev, term::kPackHost, term::kUnpackHost}) {
    auto it = profile_.surfaces.find(name);
    if (it == profile_.surfaces.end() || it->second.empty()) out.push_back(name);
  }
  for (const char* name :
       {term::kD2H, term::kH2D, term::kMpiOnNode, term::kMpiOffNode, term::kIpcCopy}) {
    auto it = profile_.curves.find(name);
    if (it == profile_.curves.end() || it->second.empty()) out.push_back(name);
  }
  for (const char* name : {term::kOverheadDevice, term::kOverheadOneshot, term::kOverheadStaged})
    if (!profile_.scalars.count(name)) out.push_back(name);
  return out;
}

size_t ChoiceCache::KeyHash::operator()(const Key& k) const {
  uint64_t flags = (k.on_node ? 1u : 0u) | (k.device_allowed ? 2u : 0u);
  return static_cast<size_t>(
      mix(k.form ^ mix(static_cast<uint64_t>(k.count) * 4 + flags + 0x9e3779b97f4a7c15ull)));
}

ChoiceCache::ChoiceCache(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)), shards_(new Shard[kShards]) {}

Prediction ChoiceCache::get(const Model& model, uint64_t form_hash, int64_t count,
                            const Shape& shape, bool* missed) {
  if (missed) *missed = false;
  Key key{form_hash, count, shape.on_node, shape.device_allowed};
  // High bits pick the shard; the map buckets by the low ones.
  Shard& sh = shards_[(KeyHash{}(key) >> 32) % kShards];
  {
    std::lock_guard<std::mutex> lk(sh.mu);
    auto it = sh.map.find(key);
    if (it != sh.map.end()) {
      ++sh.hits;
      return it->second;
    }
    ++sh.misses;
  }
  if (missed) *missed = true;
  Prediction p = model.predict(shape);  // outside the lock: others keep hitting
  // Emptied without holding a shard lock, so two threads never wait on each other.
  if (entries_.load(std::memory_order_relaxed) >= capacity_) clear();
  std::lock_guard<std::mutex> lk(sh.mu);
  if (sh.map.emplace(key, p).second) entries_.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void ChoiceCache::clear() {
  for (int i = 0; i < kShards; ++i) {
    std::lock_guard<std::mutex> lk(shards_[i].mu);
    entries_.fetch_sub(shards_[i].map.size(), std::memory_order_relaxed);
    shards_[i].map.clear();
  }
}

size_t ChoiceCache::size() const {
  size_t n = 0;
  for (int i = 0; i < kShards; ++i) {
    std::lock_guard<std::mutex> lk(shards_[i].mu);
    n += shards_[i].map.size();
  }
  return n;
}

size_t ChoiceCache::hits() const {
  size_t n = 0;
  for (int i = 0; i < kShards; ++i) {
    std::lock_guard<std::mutex> lk(shards_[i].mu);
    n += shards_[i].hits;
  }
  return n;
}

size_t ChoiceCache::misses() const {
  size_t n = 0;
  for (int i = 0; i < kShards; ++i) {
    std::lock_guard<std::mutex> lk(shards_[i].mu);
    n += shards_[i].misses;
  }
  return n;
}

}  // namespace loom::model
