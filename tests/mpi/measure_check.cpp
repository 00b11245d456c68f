// Checks the profile `loom-measure --quick` wrote in the host test mode
// (ctest mpi.measure.check, after mpi.measure.quick): it reads back, is
// marked as the host test's, and has every term the model needs except
// the ones one node cannot give (mpi_off_node).
//
//   loom_measure_check PROFILE
#include <cmath>
#include <cstdio>
#include <string>

#include "model/coll_choice.hpp"
#include "model/cost.hpp"
#include "model/profile.hpp"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "measure_check: FAIL: %s\n", what.c_str());
  ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: loom_measure_check PROFILE\n");
    return 2;
  }
  namespace model = loom::model;
  auto read = model::read_profile(argv[1], nullptr);
  if (!read) {
    std::fprintf(stderr, "measure_check: FAIL: %s\n", read.status().message().c_str());
    return 1;
  }
  const model::Profile& p = read.value();
  expect(p.id.gpu == "host-test", "gpu is \"" + p.id.gpu + "\", not host-test");
  expect(!p.id.mpi.empty() && p.id.mpi.find('\n') == std::string::npos,
         "mpi identity is one non-empty line");
  expect(!p.date.empty() && p.date.back() == 'Z', "date is ISO 8601 UTC: " + p.date);
  expect(!p.host.empty() && !p.loom_version.empty(), "host and loom_version are set");

  const model::Model m(p);
  for (const std::string& t : m.missing())
    expect(t == model::term::kMpiOffNode, "term missing: " + t);
  for (const char* t : {model::term::kMpiOverhead, model::term::kMpiGap})
    expect(p.curves.count(t) && !p.curves.at(t).empty(), std::string("curve missing: ") + t);
  expect(p.loggop.count(model::term::kMpiOnNode) == 1, "no LogGOP fit of mpi_on_node");
  auto hb = p.scalars.find(model::term::kHeaderBytes);
  expect(hb != p.scalars.end() && hb->second == model::kDefaultHeaderBytes, "header_bytes 128");
  for (const char* s : {model::term::kOverheadDevicePacked, model::term::kOverheadOneshotPacked,
                        model::term::kOverheadStagedPacked, model::term::kOverheadDevice,
                        model::term::kOverheadOneshot, model::term::kOverheadStaged}) {
    auto it = p.scalars.find(s);
    expect(it != p.scalars.end() && std::isfinite(it->second),
           std::string(s) + " is a finite time (negative: overlap of the terms' fixed costs)");
  }
  for (const char* s : {model::term::kScaleDevicePacked, model::term::kScaleDevice}) {
    auto it = p.scalars.find(s);
    expect(it != p.scalars.end() && it->second >= 0.25 && it->second <= 2,
           std::string(s) + " is a scale in [0.25, 2]");
  }
  // Every method has a finite prediction once all terms are there.
  const model::Prediction pr = m.predict({1 << 20, 8, false, true, true});
  for (double us : pr.usec) expect(std::isfinite(us) && us > 0, "prediction " + pr.explain());

  // The collectives, on 2 ranks (the point-to-point run) and 3 (a run of
  // their own, which kept every term above).
  for (int ranks : {2, 3})
    for (const char* call : model::kCollCalls) {
      const std::string node = model::coll_term("node", call, ranks),
                        mirror = model::coll_term("mirror", call, ranks);
      expect(p.curves.count(node) && p.curves.count(mirror), "curves missing: " + node);
      if (!p.curves.count(node) || !p.curves.count(mirror)) continue;
      expect(p.curves.at(node).bytes == p.curves.at(mirror).bytes &&
                 p.curves.at(node).bytes.size() >= 3,
             node + " and " + mirror + ": the same sizes, 3 at least");
      expect(model::coll_node_from(p, call, ranks) >= 0, "no choice from " + node);
    }

  if (failures) return 1;
  std::printf("measure_check: %s: ok (%zu curves, %zu surfaces); 2D 8 B x 1 MiB: %s\n", argv[1],
              p.curves.size(), p.surfaces.size(), pr.explain().c_str());
  return 0;
}
