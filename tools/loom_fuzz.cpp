// loom-fuzz: differential fuzzing of Loom's datatype engines against the
// MPI's own MPI_Pack / MPI_Unpack. Random types from every constructor
// (depth up to 5), random counts, every byte compared, gaps included. Ranks
// share the work (type i goes to rank i mod size). A failure is shrunk to a
// small type (fewer levels, fewer blocks, smaller numbers) and printed as a
// regression line: `<count> <type>` (random_types.hpp's text), which
// --replay checks again.
//
//   mpirun -np 2 loom-fuzz --count 1000000          # the 10^6 run
//   mpirun -np 1 loom-fuzz --seed 123 --count 1     # one type again
//   loom-fuzz --replay tests/fuzz/regressions.txt   # regression cases
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "fuzz_check.hpp"
#include "loom/loom.h"
#include "random_types.hpp"
#include "type/from_mpi.hpp"

namespace {

using loom::test::TypeNode;
using Clock = std::chrono::steady_clock;

struct Args {
  uint64_t seed = 1;
  int64_t count = -1;  // types in all ranks (-1: until --minutes, else 1000)
  double minutes = 0;  // wall-clock limit (0: none)
  int depth = 5;       // nesting depth at most
  bool gpu = false;
  bool shrink = true;
  bool verbose = false;  // each type before the MPI packs it (crashes inside the MPI)
  bool quiet = false;    // no progress counter
  int max_failures = 5;
  std::string save;    // append regression lines here
  std::string replay;  // check the lines of this file instead
  std::string inject;  // self-test: corrupt types holding this constructor
};

const char* kUsage =
    "usage: [mpirun -np N] loom-fuzz [options]\n"
    "  --seed S          first type's seed (type i has seed S+i; default 1)\n"
    "  --count N         types to check, all ranks together (default 1000,\n"
    "                    or unlimited with --minutes)\n"
    "  --minutes M       stop after M minutes\n"
    "  --depth D         constructors nested at most D deep (default 5)\n"
    "  --gpu             also the GPU engine (needs a CUDA build and a GPU)\n"
    "  --no-shrink       print failures as found\n"
    "  --max-failures K  stop after K failures per rank (default 5)\n"
    "  --save FILE       append each shrunk failure to FILE as a regression line\n"
    "  --replay FILE     check the regression lines of FILE (`<count> <type>`)\n"
    "  --inject OP       self-test: corrupt Loom's bytes for types using OP\n"
    "  --verbose         print each type before it is checked\n"
    "  --quiet           no progress counter on stderr (every 10 s otherwise)\n"
    "  -h, --help        this text\n"
    "Prints a summary line (and a line per failure, shrunk) on stdout; exits 1 on a\n"
    "failure.\n"
    "examples:\n"
    "  mpirun -np 2 loom-fuzz --count 1000000\n"
    "  mpirun -np 2 loom-fuzz --minutes 30 --gpu\n"
    "  loom-fuzz --replay tests/fuzz/regressions.txt\n";

// "" when fine, else what is wrong.
std::string parse_args(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&](const char** out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    const char* v = nullptr;
    if (k == "--gpu") {
      a->gpu = true;
    } else if (k == "--verbose") {
      a->verbose = true;
    } else if (k == "--no-shrink") {
      a->shrink = false;
    } else if (k == "--quiet") {
      a->quiet = true;
    } else if (k == "--seed" && val(&v)) {
      a->seed = std::strtoull(v, nullptr, 10);
    } else if (k == "--count" && val(&v)) {
      a->count = std::strtoll(v, nullptr, 10);
    } else if (k == "--minutes" && val(&v)) {
      a->minutes = std::atof(v);
    } else if (k == "--depth" && val(&v)) {
      a->depth = std::atoi(v);
    } else if (k == "--max-failures" && val(&v)) {
      a->max_failures = std::atoi(v);
    } else if (k == "--save" && val(&v)) {
      a->save = v;
    } else if (k == "--replay" && val(&v)) {
      a->replay = v;
    } else if (k == "--inject" && val(&v)) {
      a->inject = v;
    } else if (k == "--seed" || k == "--count" || k == "--minutes" || k == "--depth" ||
               k == "--max-failures" || k == "--save" || k == "--replay" || k == "--inject") {
      return k + " needs a value";
    } else {
      return "unknown option " + k;
    }
  }
  if (a->count < 0) a->count = a->minutes > 0 ? INT64_MAX : 1000;
  if (a->depth < 1 || a->depth > 8) return "--depth must be 1..8";
  return "";
}

bool holds_op(const TypeNode& n, const std::string& op) {
  if (op.empty()) return false;
  if (n.op == op) return true;
  for (const TypeNode& k : n.kids)
    if (holds_op(k, op)) return true;
  return false;
}

// Builds, commits and checks a description at one count. `built` false: the
// MPI refused it, or (with need_trusted) it is a shape the MPI is known to
// pack wrongly, so there is nothing to compare.
struct Outcome {
  bool built = false;
  std::string failure;
};

Outcome check_node(const TypeNode& n, int count, uint64_t seed, bool need_trusted,
                   const loom::fuzz::CheckOptions& opt, loom::fuzz::CheckStats& stats) {
  Outcome o;
  bool trusted = true;
  MPI_Datatype t = MPI_DATATYPE_NULL;
  if (loom::test::build_type(n, &t, &trusted) != MPI_SUCCESS) return o;
  const bool named = loom::type::is_named(t);
  if (need_trusted && !trusted) {
    if (!named) MPI_Type_free(&t);
    return o;
  }
  if (!named && MPI_Type_commit(&t) != MPI_SUCCESS) {
    MPI_Type_free(&t);
    return o;
  }
  MPI_Count size, text, tlb;
  MPI_Type_size_x(t, &size);
  MPI_Type_get_true_extent_x(t, &tlb, &text);
  // Shrinking may widen a type (a resized level gone): keep buffers sane.
  if (size != MPI_UNDEFINED && size * count <= (64 << 20) && text <= (64 << 20)) {
    o.built = true;
    o.failure = loom::fuzz::check(t, count, seed, holds_op(n, opt.inject), opt, stats);
  }
  if (!named) MPI_Type_free(&t);  // free as we go: the oracle must not be the thing that is wrong
  return o;
}

// The description, printed and parsed back, rebuilds the same type (same
// bounds, same packed bytes): saved cases replay what was found.
std::string rebuilds(const TypeNode& n, MPI_Datatype t) {
  TypeNode back;
  std::string err;
  if (!loom::test::parse_type(loom::test::to_text(n), &back, &err)) return "does not parse: " + err;
  MPI_Datatype u = MPI_DATATYPE_NULL;
  if (loom::test::build_type(back, &u) != MPI_SUCCESS) return "the MPI refuses its rebuild";
  const bool named = loom::type::is_named(u);
  if (!named) MPI_Type_commit(&u);
  MPI_Count s1, s2, lb1, lb2, e1, e2;
  MPI_Type_size_x(t, &s1);
  MPI_Type_size_x(u, &s2);
  MPI_Type_get_true_extent_x(t, &lb1, &e1);
  MPI_Type_get_true_extent_x(u, &lb2, &e2);
  std::string why;
  if (s1 != s2 || (s1 > 0 && (lb1 != lb2 || e1 != e2))) {
    why = "its rebuild has other bounds";
  } else if (s1 > 0) {
    std::vector<unsigned char> src(static_cast<size_t>(e1) + 1);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
    std::vector<unsigned char> p1(static_cast<size_t>(s1)), p2(p1.size());
    int a = 0, b = 0;
    PMPI_Pack(src.data() - lb1, 1, t, p1.data(), static_cast<int>(s1), &a, MPI_COMM_SELF);
    PMPI_Pack(src.data() - lb1, 1, u, p2.data(), static_cast<int>(s1), &b, MPI_COMM_SELF);
    if (p1 != p2) why = "its rebuild packs other bytes";
  }
  if (!named) MPI_Type_free(&u);
  return why;
}

// How big a failing case is: levels first, then nodes, arguments, values, count.
struct Weight {
  int64_t depth = 0, nodes = 0, args = 0, values = 0, not_bytes = 0;
  void add(const TypeNode& n) {
    ++nodes;
    not_bytes += n.kids.empty() && n.op != "BYTE";
    for (const auto& a : n.args) {
      args += static_cast<int64_t>(a.size());
      for (int64_t v : a) values += v < 0 ? -v : v;
    }
    for (const TypeNode& k : n.kids) add(k);
  }
};
bool lighter(const TypeNode& a, int ca, const TypeNode& b, int cb) {
  Weight wa, wb;
  wa.depth = a.depth();
  wb.depth = b.depth();
  wa.add(a);
  wb.add(b);
  auto key = [](const Weight& w, int c) {
    return std::vector<int64_t>{w.depth, w.nodes, w.args, w.values, c, w.not_bytes};
  };
  return key(wa, ca) < key(wb, cb);
}

// Every description one step smaller than n: a level dropped (a node
// replaced by one of its kids), a block, field or dimension dropped, a leaf
// made BYTE, a number moved towards zero.
void smaller(const TypeNode& n, std::vector<TypeNode>& out) {
  for (const TypeNode& k : n.kids) out.push_back(k);
  if (n.op != "BYTE" && n.kids.empty()) out.push_back(TypeNode{"BYTE", false, {}, {}});
  if (n.large) {
    TypeNode m = n;
    m.large = false;
    out.push_back(m);
  }
  // Drop element i of the parallel lists (blocks, fields, dimensions).
  std::vector<size_t> lists;
  if (n.op == "indexed" || n.op == "hindexed" || n.op == "struct") lists = {0, 1};
  if (n.op == "indexed_block" || n.op == "hindexed_block") lists = {1};
  if (n.op == "subarray") lists = {0, 1, 2};
  if (n.op == "darray") lists = {2, 3, 4, 5};
  if (!lists.empty()) {
    const size_t len = n.args[lists[0]].size();
    for (size_t i = 0; i < len && len > 1; ++i) {
      TypeNode m = n;
      for (size_t l : lists) m.args[l].erase(m.args[l].begin() + static_cast<long>(i));
      if (n.op == "struct") m.kids.erase(m.kids.begin() + static_cast<long>(i));
      if (n.op == "darray") {  // the process grid shrinks with it
        int64_t procs = 1;
        for (int64_t p : m.args[5]) procs *= p;
        m.args[0][0] = procs;
        m.args[1][0] %= procs;
      }
      out.push_back(m);
    }
  }
  // Numbers towards zero (the MPI refuses what makes no sense).
  for (size_t a = 0; a < n.args.size(); ++a)
    for (size_t j = 0; j < n.args[a].size(); ++j) {
      const int64_t v = n.args[a][j];
      for (int64_t w : {int64_t{0}, int64_t{1}, v / 2, v > 0 ? v - 1 : v + 1}) {
        if (w == v || (w < 0 ? -w : w) >= (v < 0 ? -v : v)) continue;
        TypeNode m = n;
        m.args[a][j] = w;
        out.push_back(m);
      }
    }
  // The same steps inside each kid.
  for (size_t i = 0; i < n.kids.size(); ++i) {
    std::vector<TypeNode> ks;
    smaller(n.kids[i], ks);
    for (TypeNode& k : ks) {
      TypeNode m = n;
      m.kids[i] = std::move(k);
      out.push_back(std::move(m));
    }
  }
}

// Greedy: take any smaller description (or count) that still fails, until
// none does.
void shrink(TypeNode& n, int& count, std::string& failure, uint64_t seed,
            const loom::fuzz::CheckOptions& opt) {
  loom::fuzz::CheckStats scratch;
  for (bool progress = true; progress;) {
    progress = false;
    std::vector<std::pair<TypeNode, int>> cands;
    for (int c : {1, count / 2, count - 1})
      if (c >= 0 && c < count) cands.emplace_back(n, c);
    std::vector<TypeNode> ms;
    smaller(n, ms);
    for (TypeNode& m : ms) cands.emplace_back(std::move(m), count);
    for (auto& [m, c] : cands) {
      if (!lighter(m, c, n, count)) continue;
      Outcome o = check_node(m, c, seed, true, opt, scratch);
      if (o.built && !o.failure.empty()) {
        n = m;
        count = c;
        failure = o.failure;
        progress = true;
        break;
      }
    }
  }
}

int rank_of() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

void report_failure(const Args& a, const TypeNode& found, int count, uint64_t seed,
                    const std::string& failure, const loom::fuzz::CheckOptions& opt) {
  std::printf("FAIL seed %llu count %d: %s\n  type: %s\n", static_cast<unsigned long long>(seed),
              count, failure.c_str(), loom::test::to_text(found).c_str());
  // The type is the seed's and the depth's (RandomTypes draws nothing else).
  std::printf("  again: loom-fuzz --seed %llu --count 1%s%s\n",
              static_cast<unsigned long long>(seed),
              a.depth != Args{}.depth ? (" --depth " + std::to_string(a.depth)).c_str() : "",
              a.gpu ? " --gpu" : "");
  TypeNode n = found;
  int c = count;
  std::string why = failure;
  if (a.shrink) {
    shrink(n, c, why, seed, opt);
    std::printf("  shrunk to depth %d: %d %s\n  which fails with: %s\n", n.depth(), c,
                loom::test::to_text(n).c_str(), why.c_str());
  }
  if (!a.save.empty()) {
    std::ofstream f(a.save, std::ios::app);
    f << "# seed " << seed << ": " << why << "\n" << c << " " << loom::test::to_text(n) << "\n";
  }
  std::fflush(stdout);
}

// --replay: `<count> <type>` a line; '#' starts a comment.
int replay(const Args& a, const loom::fuzz::CheckOptions& opt) {
  std::ifstream f(a.replay);
  if (!f) {
    std::fprintf(stderr, "loom-fuzz: cannot read %s\n", a.replay.c_str());
    return 2;
  }
  loom::fuzz::CheckStats stats;
  int cases = 0, failed = 0, skipped = 0, lineno = 0;
  std::string line;
  while (std::getline(f, line)) {
    ++lineno;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    char* end = nullptr;
    const long count = std::strtol(line.c_str(), &end, 10);
    TypeNode n;
    std::string err;
    if (end == line.c_str() || count < 0 || !loom::test::parse_type(end, &n, &err)) {
      std::printf("line %d: not a case (%s)\n", lineno, err.c_str());
      ++failed;
      continue;
    }
    MPI_Datatype t = MPI_DATATYPE_NULL;
    bool trusted = true;
    if (loom::test::build_type(n, &t, &trusted) != MPI_SUCCESS) {
      std::printf("line %d: the MPI refused %s\n", lineno, loom::test::to_text(n).c_str());
      ++failed;
      continue;
    }
    if (!loom::type::is_named(t)) MPI_Type_free(&t);
    if (!trusted) {
      std::printf("line %d: skipped, this MPI is known to pack it wrongly\n", lineno);
      ++skipped;
      continue;
    }
    ++cases;
    // The case's count, and a few more: an element repeated is its own test.
    for (int c : {static_cast<int>(count), 1, 3}) {
      Outcome o = check_node(n, c, static_cast<uint64_t>(lineno), true, opt, stats);
      if (!o.built) {
        std::printf("line %d: %s too big at count %d\n", lineno, loom::test::to_text(n).c_str(), c);
        ++failed;
        break;
      }
      if (!o.failure.empty()) {
        std::printf("line %d count %d: FAIL %s\n  type: %s\n", lineno, c, o.failure.c_str(),
                    loom::test::to_text(n).c_str());
        ++failed;
        break;
      }
    }
  }
  std::printf("loom-fuzz replay: %d cases, %lld checks (%lld with unpack), %d skipped, %d failed\n",
              cases, static_cast<long long>(stats.checks), static_cast<long long>(stats.unpacks),
              skipped, failed);
  return failed || cases == 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = loom::tools::cli;
  Args a;
  if (cli::help_asked(argc, argv)) return cli::print_help(kUsage);
  if (const std::string bad = parse_args(argc, argv, &a); !bad.empty())
    return cli::usage_error("loom-fuzz", bad);
  MPI_Init(&argc, &argv);
  loom_init();
  // Shrinking builds types the MPI may refuse: errors come back as codes.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  const int rank = rank_of();
  int nranks;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  loom::fuzz::CheckOptions opt;
  opt.inject = a.inject;
  opt.gpu = a.gpu;
  if (a.gpu && !loom::fuzz::gpu_usable()) {
    if (rank == 0)
      std::printf("loom-fuzz: --gpu: no usable GPU in this build or machine: skipped\n");
    MPI_Finalize();
    return 77;
  }
  if (!a.replay.empty()) {
    int rc = rank == 0 ? replay(a, opt) : 0;
    MPI_Finalize();
    return rc;
  }

  loom::test::RandomOptions ropt;
  ropt.wide = true;
  // A million types in minutes: elements stay small (the sizes that break
  // layouts are reached by nesting, not by bulk).
  ropt.max_size = 64 << 10;
  ropt.max_true_extent = 1 << 20;
  loom::fuzz::CheckStats stats;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(a.minutes * 60.0));
  int64_t types = 0, failures = 0, depth_hist[9] = {};
  cli::enable_progress(rank == 0 && !a.quiet);
  auto next_report = t0 + std::chrono::seconds(10);
  for (int64_t i = rank; i < a.count; i += nranks) {
    if ((types & 63) == 0) {
      const auto now = Clock::now();
      if (a.minutes > 0 && now >= deadline) break;
      if (now >= next_report) {
        const double s = std::chrono::duration<double>(now - t0).count();
        cli::progress("loom-fuzz", "rank 0: %lld types, %.0f types/s, %lld failures, %.0f s",
                      static_cast<long long>(types), types / s, static_cast<long long>(failures),
                      s);
        next_report = now + std::chrono::seconds(10);
      }
    }
    const uint64_t seed = a.seed + static_cast<uint64_t>(i);
    loom::test::RandomTypes gen(seed, ropt);
    const int depth = 1 + static_cast<int>(seed % static_cast<uint64_t>(a.depth));
    MPI_Datatype t = gen.make(depth);
    MPI_Type_commit(&t);
    ++types;
    ++depth_hist[gen.node().depth()];
    if (a.verbose) {
      std::fprintf(stderr, "seed %llu: %s\n", static_cast<unsigned long long>(seed),
                   gen.recipe().c_str());
      std::fflush(stderr);
    }
    if (i % 16 == 0) {
      const std::string r = rebuilds(gen.node(), t);
      if (!r.empty()) {
        std::printf("FAIL seed %llu: the description %s: %s\n",
                    static_cast<unsigned long long>(seed), r.c_str(), gen.recipe().c_str());
        ++failures;
      }
    }
    // One element, and a count drawn per type (zero included).
    const int counts[2] = {1, static_cast<int>(gen.rng()() % 6)};
    for (int count : counts) {
      std::string f = loom::fuzz::check(t, count, seed, holds_op(gen.node(), a.inject), opt, stats);
      if (f.empty()) continue;
      ++failures;
      MPI_Type_free(&t);
      report_failure(a, gen.node(), count, seed, f, opt);
      break;
    }
    if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
    if (failures >= a.max_failures) break;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();

  int64_t mine[8] = {types,
                     failures,
                     stats.checks,
                     stats.unpacks,
                     stats.gpu_checks,
                     stats.handed_back,
                     stats.mpi_self_inconsistent,
                     0};
  int64_t all[8];
  MPI_Reduce(mine, all, 8, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  int64_t hist[9];
  MPI_Reduce(depth_hist, hist, 9, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  double slowest = 0;
  MPI_Reduce(&secs, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf(
        "loom-fuzz: %lld types (seeds %llu..), %d ranks, %.1f s, %.0f types/s; %lld checks, "
        "%lld with unpack, %lld on the GPU; %lld handed to the MPI; MPI count pack contradicted "
        "its per-element pack %lld times; %lld failures\n",
        static_cast<long long>(all[0]), static_cast<unsigned long long>(a.seed), nranks, slowest,
        slowest > 0 ? all[0] / slowest : 0.0, static_cast<long long>(all[2]),
        static_cast<long long>(all[3]), static_cast<long long>(all[4]),
        static_cast<long long>(all[5]), static_cast<long long>(all[6]),
        static_cast<long long>(all[1]));
    std::printf("  depth:");
    for (int d = 0; d <= 8; ++d)
      if (hist[d]) std::printf(" %d:%lld", d, static_cast<long long>(hist[d]));
    std::printf("\n");
  }
  // Rare MPI quirks, not a way to pass.
  const bool quirky = all[6] > all[0] / 20 + 1;
  if (rank == 0 && quirky) std::printf("loom-fuzz: too many MPI self-contradictions\n");
  const int rc = rank == 0 && (all[1] > 0 || quirky) ? 1 : 0;
  MPI_Finalize();
  return rc;
}
