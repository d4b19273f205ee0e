// libFuzzer target for the pure layers: the fuzz input is decoded into a mesh, a global shape and
// two partition specs (invalid ones among them); invalid inputs must throw dax::Error, and valid
// ones must satisfy the sharding model's and the planner's invariants. Any violation aborts with
// the case and the reason. Built with clang -fsanitize=fuzzer,address,undefined (scripts/fuzz.sh).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <dax/reshard/explain.hpp>
#include <dax/reshard/planner.hpp>
#include <dax/sharding/build.hpp>
#include <dax/sharding/visualize.hpp>
#include "../common/simulate.hpp"

namespace {

using dax::Box;
using dax::Mesh;
using dax::NamedSharding;
using dax::PartitionSpec;
using dax::Shape;

// ---- reading the input ----

/// Bytes of the fuzz input, read front to back; zeros once they run out.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t next() { return pos_ < size_ ? data_[pos_++] : 0; }
  /// A number in [0, n).
  int pick(int n) { return n <= 1 ? 0 : next() % n; }
  /// True about once in `n` draws.
  bool rarely(int n) { return pick(n) == n - 1; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

/// What the case is, printed with any violation.
std::string current_case;

[[noreturn]] void violation(const std::string& why) {
  std::fprintf(stderr, "planner_fuzz: invariant violated: %s\n  case: %s\n", why.c_str(),
               current_case.c_str());
  std::fflush(stderr);
  std::abort();
}

#define DAX_FUZZ_CHECK(cond, ...)                          \
  do {                                                     \
    if (!(cond)) violation(dax::detail::cat(__VA_ARGS__)); \
  } while (0)

/// Runs `f`, which must throw dax::Error (and nothing else).
template <class F>
void expect_error(const char* what, F&& f) {
  try {
    f();
  } catch (const dax::Error&) {
    return;
  } catch (const std::exception& e) {
    violation(dax::detail::cat(what, " threw a non-dax exception: ", e.what()));
  }
  violation(dax::detail::cat(what, " did not throw dax::Error"));
}

// ---- decoding ----

const std::vector<std::string> kNames{"x", "y", "z"};

/// Mostly valid meshes of 1-8 devices with 1-3 axes (some of size 1), in row-major or permuted
/// device order; rarely an invalid one (size 0, a repeated or empty name, bad device ids).
Mesh decode_mesh(Bytes& in) {
  const int num_axes = 1 + in.pick(3);
  Shape shape;
  int64_t devices = 1;
  for (int a = 0; a < num_axes; ++a) {
    int64_t size = 1 + in.pick(static_cast<int>(8 / devices));
    if (in.rarely(64)) size = in.pick(2) - 1;  // 0 or -1
    shape.push_back(size);
    devices *= std::max<int64_t>(size, 1);
  }
  std::vector<std::string> names(kNames.begin(), kNames.begin() + num_axes);
  if (in.rarely(32)) {
    const std::vector<std::string> pool{"x", "y", "z", "w", ""};
    for (auto& n : names) n = pool[in.pick(static_cast<int>(pool.size()))];
  }
  const int order = in.pick(4);
  if (order == 0) return Mesh(shape, names);
  const int64_t n = dax::numel(shape);
  std::vector<int> ids(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  if (order >= 2)  // permuted
    for (size_t i = ids.size(); i > 1; --i)
      std::swap(ids[i - 1], ids[in.pick(static_cast<int>(i))]);
  if (order == 3) {  // sparse ids (ranks beyond the mesh), rarely an invalid list
    for (int& id : ids) id = 2 * id + 1;
    if (in.rarely(8) && !ids.empty()) ids[in.pick(static_cast<int>(ids.size()))] = in.pick(3) - 1;
    if (in.rarely(16)) ids.push_back(in.pick(4));
    if (in.rarely(16) && !ids.empty()) ids.pop_back();
  }
  return Mesh(shape, names, ids);
}

/// Rank 0-3, each dimension 0-9 (uneven and empty among them).
Shape decode_shape(Bytes& in) {
  Shape shape(in.pick(4));
  for (auto& d : shape) d = in.pick(10);
  return shape;
}

/// Mostly valid specs: each mesh axis used at most once, as a single name or in a tuple (one to
/// three axes), some unreduced; rarely an unknown or repeated axis, or more entries than the rank.
PartitionSpec decode_spec(Bytes& in, const Mesh& mesh, size_t rank) {
  std::vector<std::string> unused = mesh.axis_names();
  auto name = [&]() -> std::string {
    if (in.rarely(48)) return in.pick(2) ? "q" : mesh.axis_names()[in.pick(mesh.num_axes())];
    if (unused.empty()) return "";
    const size_t i = in.pick(static_cast<int>(unused.size()));
    std::string n = unused[i];
    unused.erase(unused.begin() + i);
    return n;
  };
  const size_t entries = std::min(rank + in.rarely(16), static_cast<size_t>(in.pick(5)));
  std::vector<PartitionSpec::Entry> spec;
  for (size_t d = 0; d < entries; ++d) {
    const int kind = in.pick(4);
    if (kind == 0) {
      spec.emplace_back(dax::none);
    } else if (kind == 3) {
      std::vector<std::string> names;
      for (int k = 1 + in.pick(3); k > 0; --k)
        if (auto n = name(); !n.empty()) names.push_back(n);
      spec.emplace_back(dax::axes(names));  // ('x',) and () among them
    } else if (auto n = name(); !n.empty()) {
      spec.emplace_back(n);
    } else {
      spec.emplace_back(dax::none);
    }
  }
  std::vector<std::string> unreduced;
  for (const auto& n : std::vector<std::string>(unused))
    if (in.pick(3) == 0) unreduced.push_back(n);
  if (in.rarely(48))
    unreduced.push_back(in.pick(2) ? "q" : mesh.axis_names()[in.pick(mesh.num_axes())]);
  return PartitionSpec(spec).with_unreduced(unreduced);
}

// ---- the sharding model ----

/// Mesh coordinates of `device` from its row-major position in mesh.devices().
std::vector<int64_t> reference_coords(const Mesh& mesh, int device) {
  const auto& ids = mesh.devices();
  int64_t p = std::find(ids.begin(), ids.end(), device) - ids.begin();
  std::vector<int64_t> c(mesh.num_axes());
  for (int a = mesh.num_axes() - 1; a >= 0; --a) {
    c[a] = p % mesh.axis_size(a);
    p /= mesh.axis_size(a);
  }
  return c;
}

/// The piece `device` holds, straight from the spec's names and the chunk rule.
Box reference_piece(const NamedSharding& s, const Shape& shape, int device) {
  const auto c = reference_coords(s.mesh(), device);
  Box box = dax::full_box(shape);
  for (size_t d = 0; d < s.spec().size(); ++d) {
    int64_t k = 1, piece = 0;
    for (const auto& name : s.spec()[d].axes()) {
      const int a = s.mesh().find_axis(name);
      k *= s.mesh().axis_size(a);
      piece = piece * s.mesh().axis_size(a) + c[a];
    }
    const int64_t chunk = (shape[d] + k - 1) / k;
    box[d] = {std::min(piece * chunk, shape[d]), std::min((piece + 1) * chunk, shape[d])};
  }
  return box;
}

void check_sharding(const NamedSharding& s, const Shape& shape) {
  const Mesh& mesh = s.mesh();
  const auto map = s.devices_indices_map(shape);
  DAX_FUZZ_CHECK(map.size() == static_cast<size_t>(mesh.size()), "devices_indices_map has ",
                 map.size(), " devices, the mesh ", mesh.size());

  int64_t pieces = 1, replicas = 1, partials = 1;
  for (size_t d = 0; d < shape.size(); ++d) pieces *= s.num_pieces(d);
  for (int a = 0; a < mesh.num_axes(); ++a) {
    if (s.is_unreduced_over(a))
      partials *= mesh.axis_size(a);
    else if (!s.splits(a))
      replicas *= mesh.axis_size(a);
  }
  DAX_FUZZ_CHECK(pieces * replicas * partials == mesh.size(), "pieces ", pieces, " x replicas ",
                 replicas, " x partials ", partials, " != ", mesh.size(), " devices");

  // Coverage, per copy of the data (replica id, coordinates on the unreduced axes): every element
  // exactly once.
  std::map<std::vector<int64_t>, std::vector<int>> coverage;
  const int64_t n = dax::numel(shape);
  for (int device : mesh.devices()) {
    DAX_FUZZ_CHECK(mesh.contains(device), "mesh does not contain its device ", device);
    const auto c = mesh.coords(device);
    DAX_FUZZ_CHECK(c == reference_coords(mesh, device), "coords of device ", device);
    DAX_FUZZ_CHECK(mesh.device_at(c) == device, "device_at(coords(", device, "))");
    const Box box = map.at(device);
    DAX_FUZZ_CHECK(box.size() == shape.size(), "piece of device ", device, " has rank ",
                   box.size());
    DAX_FUZZ_CHECK(box == s.device_indices(device, shape), "device_indices != devices_indices_map");
    DAX_FUZZ_CHECK(box == reference_piece(s, shape, device), "piece of device ", device, " is ",
                   dax::to_string(box), ", the chunk rule gives ",
                   dax::to_string(reference_piece(s, shape, device)));
    for (size_t d = 0; d < shape.size(); ++d)
      DAX_FUZZ_CHECK(0 <= box[d].start && box[d].start <= box[d].stop && box[d].stop <= shape[d],
                     "slice ", box[d].start, ":", box[d].stop, " of dimension ", d, " outside ",
                     shape[d]);
    const int replica = s.replica_id(device);
    DAX_FUZZ_CHECK(0 <= replica && replica < replicas, "replica_id ", replica, " of device ",
                   device, " not below ", replicas);
    std::vector<int64_t> copy{replica};
    for (int a : s.unreduced_axes()) copy.push_back(c[a]);
    auto& count = coverage[copy];
    count.resize(n, 0);
    dax::for_each_in_box(shape, box, [&](int64_t, int64_t flat) { ++count[flat]; });
  }
  DAX_FUZZ_CHECK(static_cast<int64_t>(coverage.size()) == replicas * partials, coverage.size(),
                 " copies of the data, expected ", replicas * partials);
  for (const auto& [copy, count] : coverage)
    for (int64_t i = 0; i < n; ++i)
      DAX_FUZZ_CHECK(count[i] == 1, "element ", i, " covered ", count[i], " times by copy ",
                     copy[0]);

  // Shard shape: the common piece shape when every split is even, else a dax::Error.
  bool even = true;
  for (size_t d = 0; d < shape.size(); ++d) even = even && shape[d] % s.num_pieces(d) == 0;
  if (even) {
    const Shape ss = s.shard_shape(shape);
    for (const auto& [device, box] : map)
      DAX_FUZZ_CHECK(dax::box_shape(box) == ss, "shard_shape ", dax::to_string(ss), " but device ",
                     device, " holds ", dax::to_string(dax::box_shape(box)));
  } else {
    expect_error("shard_shape of an uneven split", [&] { s.shard_shape(shape); });
  }
  if (s.is_fully_replicated())
    for (const auto& [device, box] : map)
      DAX_FUZZ_CHECK(box == dax::full_box(shape), "fully replicated, but device ", device,
                     " holds ", dax::to_string(box));

  // Value semantics: rebuilt from the spec or from mesh-axis indices, the same sharding.
  const NamedSharding again(mesh, s.spec());
  const NamedSharding built =
      dax::detail::make_sharding(mesh, dax::detail::dims_of(s, shape.size()), s.unreduced_axes());
  DAX_FUZZ_CHECK(again == s && again.hash() == s.hash(), "sharding rebuilt from its spec differs");
  DAX_FUZZ_CHECK(built == s && built.hash() == s.hash(),
                 "sharding rebuilt by make_sharding differs: ", dax::to_string(built));
  (void)dax::to_string(s);
  if (shape.size() <= 2)
    (void)dax::sharding_picture(shape, s);
  else
    expect_error("sharding_picture of rank > 2", [&] { (void)dax::sharding_picture(shape, s); });
}

// ---- the planner ----

/// Runs `steps` on simulated devices holding `partials` of a value sharded as `src`.
dax::test::Buffers run_steps(const Shape& shape, const NamedSharding& src,
                             const dax::test::Partials& partials,
                             const std::vector<dax::ReshardStep>& steps) {
  auto buffers = dax::test::pieces_of_partials(shape, partials, src);
  for (const auto& step : steps)
    DAX_FUZZ_CHECK(dax::test::simulate_step(shape, step, buffers), dax::to_string(step.kind),
                   ": a device's receive list disagrees with its peer's send list");
  return buffers;
}

/// Same pieces on every device and the same unreduced axes (the spellings may differ).
bool equivalent(const NamedSharding& a, const NamedSharding& b, const Shape& shape) {
  return a.unreduced_axes() == b.unreduced_axes() && dax::detail::same_layout(shape, a, b);
}

void check_plan(const NamedSharding& src, const NamedSharding& dst, const Shape& shape) {
  const auto plan = dax::detail::plan_reshard(shape, src, dst);
  current_case += "\n" + dax::detail::explain_plan(plan, 1);

  DAX_FUZZ_CHECK(plan.shape == shape && plan.src == src && plan.dst == dst, "plan key differs");
  int64_t sum = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const auto& step = plan.steps[i];
    DAX_FUZZ_CHECK(equivalent(step.from, i ? plan.steps[i - 1].to : src, shape), "step ", i + 1,
                   " does not start where the last ended");
    DAX_FUZZ_CHECK(step.elements >= 0, "step ", i + 1, " moves ", step.elements, " elements");
    DAX_FUZZ_CHECK(std::is_sorted(step.axes.begin(), step.axes.end()), "step axes not ascending");
    // (An axis of size 1, or any axis of an empty array, may be summed over without taking part.)
    for (int a : step.reduce_axes)
      DAX_FUZZ_CHECK(dax::detail::has_axis(step.axes, a) || src.mesh().axis_size(a) == 1 ||
                         dax::numel(shape) == 0,
                     "reduce axis ", a, " outside the step's group");
    sum += step.elements;
  }
  DAX_FUZZ_CHECK(equivalent(plan.steps.empty() ? src : plan.steps.back().to, dst, shape),
                 "the plan does not end at the target");
  DAX_FUZZ_CHECK(plan.elements == sum, "plan elements ", plan.elements, " != sum of steps ", sum);

  // The lower bound, from its definition: a device must receive what it lacks of its target
  // piece, and all of it when partial sums of it live on other devices.
  std::vector<int> reduce, kept;
  for (int a : src.unreduced_axes()) (dst.is_unreduced_over(a) ? kept : reduce).push_back(a);
  const int64_t reduce_group = dax::detail::group_size(src.mesh(), reduce);
  int64_t bound = 0;
  for (int d : src.mesh().devices()) {
    const Box have = src.device_indices(d, shape), want = dst.device_indices(d, shape);
    const int64_t lacks = reduce_group > 1
                              ? dax::numel(want)
                              : dax::numel(want) - dax::numel(dax::intersect(have, want));
    bound = std::max(bound, lacks);
  }
  DAX_FUZZ_CHECK(plan.lower_bound == bound, "lower bound ", plan.lower_bound, ", by definition ",
                 bound);
  DAX_FUZZ_CHECK(plan.lower_bound <= plan.elements, "plan moves ", plan.elements, " < lower bound ",
                 plan.lower_bound);
  DAX_FUZZ_CHECK(plan.elements <= plan.general_exchange_elements, "plan moves ", plan.elements,
                 " > general exchange ", plan.general_exchange_elements);
  if (!src.is_unreduced())
    DAX_FUZZ_CHECK(plan.elements == plan.lower_bound, "no reduction, yet ", plan.elements,
                   " > lower bound ", plan.lower_bound);

  // Simulated, the plan and the general exchange alone both give every device its target piece.
  std::mt19937 rng(static_cast<unsigned>(dax::numel(shape) * 31 + src.mesh().size()));
  const auto partials = dax::test::random_partials(shape, src, rng);
  const auto expected = dax::test::expected_pieces(shape, partials, dst);
  const auto by_plan = run_steps(shape, src, partials, plan.steps);
  DAX_FUZZ_CHECK(by_plan == expected, "the plan's result differs from the target pieces");
  const NamedSharding mid = dax::detail::with_unreduced_axes(dst, shape.size(), kept);
  const auto general = dax::detail::plan_general_exchange(shape, src, mid);
  DAX_FUZZ_CHECK(general.has_value(), "no general exchange");
  DAX_FUZZ_CHECK(general->elements == plan.general_exchange_elements, "general exchange moves ",
                 general->elements, ", the plan says ", plan.general_exchange_elements);
  std::vector<dax::ReshardStep> fallback{*general};
  if (!(mid == dst)) fallback.push_back(*dax::detail::plan_make_unreduced(shape, mid, dst));
  DAX_FUZZ_CHECK(run_steps(shape, src, partials, fallback) == by_plan,
                 "the general exchange's result differs from the plan's");
}

void run_case(Bytes& in) {
  current_case.clear();
  std::optional<Mesh> mesh;
  std::optional<NamedSharding> src, dst;
  Shape shape;
  try {
    mesh.emplace(decode_mesh(in));
    current_case = dax::to_string(*mesh);
    shape = decode_shape(in);
    current_case += " shape " + dax::to_string(shape);
    const auto a = decode_spec(in, *mesh, shape.size());
    const auto b = decode_spec(in, *mesh, shape.size());
    current_case += " " + dax::to_string(a) + " -> " + dax::to_string(b);
    src.emplace(*mesh, a);
    dst.emplace(*mesh, b);
  } catch (const dax::Error&) {
    return;  // invalid input, refused as it must be
  } catch (const std::exception& e) {
    violation(dax::detail::cat("construction threw a non-dax exception: ", e.what()));
  }
  if (src->spec_rank() > shape.size() || dst->spec_rank() > shape.size()) {
    const auto& longer = src->spec_rank() > shape.size() ? *src : *dst;
    expect_error("devices_indices_map with a spec longer than the rank",
                 [&] { longer.devices_indices_map(shape); });
    expect_error("plan_reshard with a spec longer than the rank",
                 [&] { dax::detail::plan_reshard(shape, *src, *dst); });
    return;
  }
  try {
    check_sharding(*src, shape);
    check_sharding(*dst, shape);
    check_plan(*src, *dst, shape);
  } catch (const std::exception& e) {
    violation(dax::detail::cat("valid input threw: ", e.what()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  run_case(in);
  return 0;
}
