// loom_type_describe and loom_explain: what Loom made of a datatype and how
// it moves it, as text.
#include <algorithm>
#include <cstring>
#include <string>

#include "loom/loom.h"
#include "mpi/device_message.hpp"
#include "mpi/errors.hpp"
#include "mpi/runtime.hpp"
#include "pack/layout.hpp"
#include "type/canonical.hpp"
#include "type/ir.hpp"

namespace {

int copy_out(const std::string& text, char* buf, size_t len) {
  size_t n = std::min(len - 1, text.size());
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
  return MPI_SUCCESS;
}

}  // namespace

namespace loom::mpi {

int message_of(MPI_Datatype type, int count, TypeRegistry::Entry* keep, transport::Message* m) {
  Runtime* rt = runtime();
  if (!rt) return MPI_ERR_OTHER;
  if (count < 0) return MPI_ERR_COUNT;
  auto e = rt->types.lookup(type);
  if (!e) return error_class(e.status().code());
  *keep = e.value();
  return fill_message(**keep, count, m) ? MPI_SUCCESS : MPI_ERR_COUNT;
}

}  // namespace loom::mpi

extern "C" int loom_explain(MPI_Datatype type, int count, int peer_on_node, char* buf, size_t len) {
  using namespace loom;
  if (!buf || len == 0) return MPI_ERR_ARG;
  Runtime* rt = runtime();
  if (!rt) return copy_out("Loom is not initialised or is disabled\n", buf, len);
  mpi::TypeRegistry::Entry keep;
  transport::Message m;
  const int rc = mpi::message_of(type, count, &keep, &m);
  if (rc == mpi::error_class(Err::kUnsupported))
    return copy_out("not accelerated: its whole span goes through the host, staged\n", buf, len);
  if (rc != MPI_SUCCESS) return rc;
  const bool on_node = peer_on_node != 0;
  std::string text = "form " + type::to_string(m.form) + " x " + std::to_string(count) + " (" +
                     std::to_string(m.bytes) + " bytes), layout " + keep->layout.describe() +
                     ", peer " + (on_node ? "on" : "off") + " node: ";
  model::Prediction pr;
  if (rt->predict(m, on_node, on_node, &pr))
    text += "predicted " + pr.explain();
  else
    text += "no profile (run loom-measure), built-in rule";
  text += std::string("; method ") + transport::method_name(rt->choose(m, on_node, on_node)) + "\n";
  return copy_out(text, buf, len);
}

extern "C" int loom_predict(MPI_Datatype type, int count, int peer_on_node, double usec[3],
                            int* method) {
  using namespace loom;
  Runtime* rt = runtime();
  if (!usec || !method) return MPI_ERR_ARG;
  if (!rt) return MPI_ERR_OTHER;
  mpi::TypeRegistry::Entry keep;
  transport::Message m;
  const int rc = mpi::message_of(type, count, &keep, &m);
  if (rc != MPI_SUCCESS) return rc;
  const bool on_node = peer_on_node != 0;
  model::Prediction pr;
  const bool have = rt->predict(m, on_node, on_node, &pr);
  const model::Method order[3] = {model::Method::kDevice, model::Method::kOneShot,
                                  model::Method::kStaged};
  for (int i = 0; i < 3; ++i) {
    const double t = pr.usec[static_cast<int>(order[i])];
    usec[i] = have && t < model::kUnusable ? t : -1;
  }
  switch (rt->choose(m, on_node, on_node)) {
    case transport::Method::kDevice:
      *method = 0;
      break;
    case transport::Method::kOneShot:
      *method = 1;
      break;
    default:
      *method = 2;
  }
  return MPI_SUCCESS;
}

extern "C" int loom_type_describe(MPI_Datatype type, char* buf, size_t len) {
  using namespace loom;
  if (!buf || len == 0) return MPI_ERR_ARG;
  Runtime* rt = runtime();
  std::string text;
  if (!rt) {
    text = "Loom is not initialised or is disabled\n";
  } else {
    auto e = rt->types.lookup(type);
    if (!e) {
      if (e.status().code() != Err::kUnsupported) return mpi::error_class(e.status().code());
      text = "not accelerated (handed to the MPI): " + e.status().message() + "\n";
    } else {
      text = e.value()->info.describe() + "layout: " + e.value()->layout.describe() + "\n";
    }
  }
  return copy_out(text, buf, len);
}
