// How planning scales with the device count (issue 17), in one process: the planner and the rules
// are pure, so meshes of 8 ... 16,384 devices are simulated without any rank. Per mesh size: the
// time of a new reshard plan (with its explain text) for rows->cols, rows->replicated (1-d mesh),
// 2-d->rows, unreduced->rows, a general exchange between unrelated splits and a mesh axis moving
// to another dimension (2-d mesh); a new matmul rule (1-d and 2-d meshes); and cached lookups
// (rule cache, plan cache, group table). "New" means new: each timed call first forgets the step
// geometries and facts the planner remembers between calls (forget_step_memos).
// At 8 and 64 devices the brute-force planner the library used before (kept as the tests' oracle)
// runs the same reshards, as a ratio. Prints a table and writes JSON.
// Usage: plan_scale [--json plan_scale.json] [--max 16384]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <dax/ops/matmul_rule.hpp>
#include <dax/ops/rule_cache.hpp>
#include <dax/reshard/explain.hpp>
#include <dax/reshard/plan_cache.hpp>
#include <dax/reshard/planner.hpp>
#include <dax/runtime/group_table.hpp>
#include "../tests/common/oracle_planner.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;

namespace {

/// Microseconds per call: the best of 5 batches, each repeated until it takes >= 20 ms (at least once).
template <class F>
double best_us(F&& f) {
  double best = 1e300;
  for (int batch = 0; batch < 5; ++batch) {
    int n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      f();
      ++n;
      elapsed = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < 20000);
    best = std::min(best, elapsed / n);
    if (elapsed > 2e6) break;  // one slow call is enough
  }
  return best;
}

volatile size_t sink = 0;

struct Row {
  std::string what;
  int64_t devices;
  double us;
  double oracle_us = 0;  // the brute-force planner on the same reshard (small meshes only)
};

}  // namespace

int main(int argc, char** argv) {
  std::string json = "plan_scale.json";
  int64_t max_devices = 16384;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--json") json = argv[i + 1];
    else if (flag == "--max") max_devices = std::stoll(argv[i + 1]);
  }
  std::vector<Row> rows;
  for (int64_t p : {8, 64, 512, 1024, 4096, 16384}) {
    if (p > max_devices) break;
    int64_t r = 1;
    while (r * r < p) r *= 2;
    const Mesh line({p}, {"x"});
    const Mesh grid({r, p / r}, {"x", "y"});
    auto on = [](const Mesh& m, P spec) { return NamedSharding(m, spec); };
    // Uneven on purpose: the last pieces are short.
    const Shape shape{8 * p + 3, 8 * p + 5};
    struct Case {
      std::string name;
      NamedSharding from, to;
    };
    const std::vector<Case> cases{
        {"rows->cols (1-d)", on(line, P("x")), on(line, P(dax::none, "x"))},
        {"rows->replicated (1-d)", on(line, P("x")), on(line, P())},
        {"unreduced->rows (1-d)", on(line, P().with_unreduced("x")), on(line, P("x"))},
        {"2-d->rows (2-d)", on(grid, P("x", "y")), on(grid, P(dax::axes("x", "y")))},
        {"2-d->replicated rows (2-d)", on(grid, P("x", "y")), on(grid, P("x"))},
        {"general: x->y (2-d)", on(grid, P("x")), on(grid, P("y"))},
        {"x moves to dim 1: P('x')->P('y','x') (2-d)", on(grid, P("x")), on(grid, P("y", "x"))},
    };
    for (const Case& c : cases) {
      Row row{"reshard " + c.name, p, best_us([&] {
                dax::detail::forget_step_memos();  // a new plan: nothing remembered from the last call
                const auto plan = dax::detail::plan_reshard(shape, c.from, c.to);
                sink = sink + dax::detail::explain_plan(plan, 4).size();
              })};
      if (p <= 64)
        row.oracle_us = best_us([&] {
          const auto plan = dax::oracle::plan_reshard(shape, c.from, c.to);
          sink = sink + dax::detail::explain_plan(plan, 4).size();
        });
      rows.push_back(row);
    }
    // New matmul rules: a data-parallel layer on the line, a data x model layer on the grid.
    const Shape a{64 * p + 7, 4096}, b{4096, 1024};
    rows.push_back({"matmul rule (1-d) P('x') @ P()", p, best_us([&] {
                      dax::detail::forget_step_memos();
                      const auto rule = dax::detail::matmul_rule(a, on(line, P("x")), b, on(line, P()),
                                                                 std::nullopt, false, false);
                      sink = sink + rule.chosen;
                    })});
    rows.push_back({"matmul rule (2-d) P('x') @ P(None,'y')", p, best_us([&] {
                      dax::detail::forget_step_memos();
                      const auto rule = dax::detail::matmul_rule(a, on(grid, P("x")), b, on(grid, P(dax::none, "y")),
                                                                 std::nullopt, false, false);
                      sink = sink + rule.chosen;
                    })});
    rows.push_back({"matmul rule (2-d) P(None,'y') @ P('y') -> P()", p, best_us([&] {
                      dax::detail::forget_step_memos();
                      const auto rule = dax::detail::matmul_rule(a, on(grid, P(dax::none, "y")), b, on(grid, P("y")),
                                                                 on(grid, P()), false, false);
                      sink = sink + rule.chosen;
                    })});
    // Cached lookups, with keys built the way the ops build them (an equal mesh made anew interns
    // to the same data, so its comparisons stay pointer comparisons).
    const Mesh again({r, p / r}, {"x", "y"});
    dax::detail::RuleCache<int> rule_cache;
    rule_cache.get(dax::detail::RuleKey{1, {a, b}, {on(grid, P("x")), on(grid, P())}, {}}, [] { return 1; });
    const NamedSharding from2 = on(again, P("x")), to2 = on(again, P());
    rows.push_back({"cached rule lookup", p, best_us([&] {
                      sink = sink + rule_cache.get(dax::detail::RuleKey{1, {a, b}, {from2, to2}, {}}, [] { return 2; });
                    })});
    dax::detail::PlanCache<int> plan_cache;
    plan_cache.get(shape, on(grid, P("x")), on(grid, P()), 4, [](const auto&) { return 1; });
    rows.push_back({"cached plan lookup", p, best_us([&] {
                      sink = sink + plan_cache.get(shape, from2, to2, 4, [](const auto&) { return 2; }).extra;
                    })});
    dax::detail::GroupTable<int> groups;
    groups.insert(grid, {0}, 1);
    groups.insert(grid, {1}, 2);
    groups.insert(grid, {0, 1}, 3);
    const std::vector<int> axes{1};
    rows.push_back({"cached group lookup", p, best_us([&] { sink = sink + *groups.find(again, axes); })});
  }

  // The table: one row per case, one column per device count.
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  for (const Row& r : rows) {
    if (std::find(names.begin(), names.end(), r.what) == names.end()) names.push_back(r.what);
    if (std::find(counts.begin(), counts.end(), r.devices) == counts.end()) counts.push_back(r.devices);
  }
  auto at = [&](const std::string& what, int64_t p) -> const Row* {
    for (const Row& r : rows)
      if (r.what == what && r.devices == p) return &r;
    return nullptr;
  };
  std::cout << "# microseconds per new plan / rule (best of 5 batches), one process, simulated meshes\n";
  std::cout << "| case |";
  for (int64_t p : counts) std::cout << " " << p << " |";
  std::cout << " 16384/1024 | old planner (x slower) at 8, 64 |\n|---|";
  for (size_t i = 0; i < counts.size() + 2; ++i) std::cout << "---|";
  std::cout << "\n";
  std::ostringstream js;
  js << "{\"unit\": \"us\", \"rows\": [";
  bool first = true;
  for (const auto& what : names) {
    std::cout << "| " << what << " |";
    for (int64_t p : counts) {
      const Row* r = at(what, p);
      char buf[32];
      std::snprintf(buf, sizeof buf, r && r->us < 10 ? " %.2f |" : " %.1f |", r ? r->us : 0.0);
      std::cout << buf;
      if (r) {
        js << (first ? "" : ", ") << "{\"case\": \"" << what << "\", \"devices\": " << p << ", \"us\": " << r->us;
        if (r->oracle_us > 0) js << ", \"old_planner_us\": " << r->oracle_us;
        js << "}";
        first = false;
      }
    }
    const Row *lo = at(what, 1024), *hi = at(what, 16384);
    char ratio[32] = " - |";
    if (lo && hi) std::snprintf(ratio, sizeof ratio, " %.2f |", hi->us / lo->us);
    std::cout << ratio;
    const Row *o8 = at(what, 8), *o64 = at(what, 64);
    if (o8 && o8->oracle_us > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " %.1f, %.1f |", o8->oracle_us / o8->us, o64 ? o64->oracle_us / o64->us : 0.0);
      std::cout << buf;
    } else {
      std::cout << " - |";
    }
    std::cout << "\n";
  }
  js << "]}\n";
  std::ofstream(json) << js.str();
  std::cout << "# JSON in " << json << "\n";
  return 0;
}
