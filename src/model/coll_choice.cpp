#include "model/coll_choice.hpp"

#include <cctype>
#include <cmath>
#include <limits>

namespace loom::model {

std::string coll_call_name(std::string_view mpi_name) {
  if (mpi_name.substr(0, 4) == "MPI_") mpi_name.remove_prefix(4);
  std::string out(mpi_name);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

std::string coll_term(std::string_view engine, std::string_view call, int ranks) {
  return "coll_" + std::string(engine) + "_" + std::string(call) + "_np" + std::to_string(ranks);
}

double coll_node_from(const Profile& p, std::string_view call, int ranks) {
  const auto node = p.curves.find(coll_term("node", call, ranks));
  const auto mirror = p.curves.find(coll_term("mirror", call, ranks));
  if (node == p.curves.end() || mirror == p.curves.end() || node->second.empty() ||
      mirror->second.empty())
    return -1;
  // The node engine's sizes; the mirrors' curve is read between its points.
  const Curve& n = node->second;
  const auto diff = [&](double b) { return n.at(b) - mirror->second.at(b); };
  const size_t last = n.bytes.size() - 1;
  if (diff(n.bytes[last]) > 0) return std::numeric_limits<double>::infinity();
  size_t lose = SIZE_MAX;  // the largest size where the node engine loses
  for (size_t i = 0; i < last; ++i)
    if (diff(n.bytes[i]) > 0) lose = i;
  if (lose == SIZE_MAX) return 0;
  const double d0 = diff(n.bytes[lose]), d1 = diff(n.bytes[lose + 1]);
  const double t = d0 / (d0 - d1);  // d0 > 0 >= d1
  const double l0 = std::log(n.bytes[lose]), l1 = std::log(n.bytes[lose + 1]);
  return std::exp(l0 + t * (l1 - l0));
}

}  // namespace loom::model
