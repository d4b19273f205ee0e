// Checkpoints across rank counts: `save DIR` (run at 4 ranks) writes a small model of every dtype
// from several shardings; `load DIR` (run at 1, 2, 3 ranks) loads each array into other shardings,
// on the whole world and on smaller meshes, and compares every element bit for bit with the values
// both modes compute from the same formulas (check_numpy.py computes them too).
#include <dax/dax.hpp>

#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

namespace {

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::Shape;

template <class T>
std::vector<T> values(const Shape& shape, const std::function<T(int64_t)>& f) {
  std::vector<T> v(dax::numel(shape));
  for (int64_t i = 0; i < dax::numel(shape); ++i) v[i] = f(i);
  return v;
}

// The model: name, shape, values. Formulas exact in their type, so Python computes the same bits.
const Shape w_shape{37, 6}, v_shape{10}, n_shape{5, 4, 3}, s_shape{}, m_shape{7}, e_shape{0, 5}, u_shape{6, 6};
std::vector<float> w() { return values<float>(w_shape, [](int64_t i) { return float((i * 37) % 101 - 50) / 8.0f; }); }
std::vector<double> v() { return values<double>(v_shape, [](int64_t i) { return double(i) / 3.0 - 1.0; }); }
std::vector<int32_t> n() {
  return values<int32_t>(n_shape, [](int64_t i) { return int32_t((i * 7919) % 65536 - 32768); });
}
std::vector<int64_t> s() { return {1234567890123456789}; }
std::vector<bool> m() {
  std::vector<bool> out(7);
  for (int i = 0; i < 7; ++i) out[i] = i % 3 == 1;
  return out;
}
std::vector<float> e() { return {}; }
std::vector<float> u() { return values<float>(u_shape, [](int64_t i) { return float(i) - 3.5f; }); }

int failures = 0;

template <class T, class Values>
void expect_piece(const std::string& what, const dax::DistArray<T>& x, const Values& global, const Shape& shape) {
  bool ok = x.shape() == shape;
  if (ok && x.is_addressable()) {
    std::vector<T> want;
    dax::for_each_in_box(shape, x.local_index(), [&](int64_t, int64_t flat) { want.push_back(global[flat]); });
    const auto got = x.local_data();
    ok = static_cast<int64_t>(got.size()) == static_cast<int64_t>(want.size());
    for (size_t i = 0; ok && i < want.size(); ++i) {
      const T expected = want[i];  // (std::vector<bool> has no element to point at)
      ok = std::memcmp(&got[i], &expected, sizeof(T)) == 0;
    }
  }
  if (!ok) {
    ++failures;
    std::cerr << "rank " << dax::Runtime::current().rank() << ": " << what << " into "
              << dax::to_string(x.sharding()) << " differs\n";
  }
}

template <class T>
dax::DistArray<T> put(const std::vector<T>& global, const Shape& shape, const NamedSharding& s) {
  return dax::make_array_from_callback<T>(shape, s, [&](const std::vector<dax::Slice>& index) {
    std::vector<T> piece;
    dax::for_each_in_box(shape, index, [&](int64_t, int64_t flat) { piece.push_back(global[flat]); });
    return piece;
  });
}

void save(const std::string& dir, int size) {
  if (size != 4) {
    std::cerr << "checkpoint_ranks save: run at 4 ranks, not " << size << "\n";
    std::exit(2);
  }
  const Mesh grid({2, 2}, {"a", "b"}), line({4}, {"x"});
  dax::save(dir, {{"w", put(w(), w_shape, NamedSharding(grid, P("a", "b")))},
                  {"v", put(v(), v_shape, NamedSharding(line, P("x")))},
                  {"n", put(n(), n_shape, NamedSharding(grid, P(dax::none, "b", "a")))},
                  {"s", put(s(), s_shape, NamedSharding(line, P()))},
                  {"m", put(m(), m_shape, NamedSharding(line, P("x")))},
                  {"e", put(e(), e_shape, NamedSharding(line, P("x")))},
                  {"u", put(u(), u_shape, NamedSharding(grid, P("a").with_unreduced("b")))}});
}

void load(const std::string& dir, int size) {
  const Mesh line({size}, {"x"}), smaller({std::max(1, size - 1)}, {"x"});
  std::vector<Mesh> meshes{line, smaller};
  if (size % 2 == 0) meshes.emplace_back(Shape{2, size / 2}, std::vector<std::string>{"p", "q"});
  for (const Mesh& mesh : meshes) {
    const std::string major = mesh.axis_names()[0], minor = mesh.axis_names().back();
    std::vector<P> specs{P(), P(major), P(dax::none, minor)};
    if (major != minor) specs.push_back(P(minor, major));
    for (const P& spec : specs) {
      auto fits = [&](size_t ndim) { return spec.size() <= ndim; };
      const auto path = [&](const char* name) { return dir + "/" + name + ".npy"; };
      const NamedSharding sh(mesh, spec);
      if (fits(2)) expect_piece("w", dax::load<float>(path("w"), sh), w(), w_shape);
      if (fits(1)) expect_piece("v", dax::load<double>(path("v"), sh), v(), v_shape);
      if (fits(3)) expect_piece("n", dax::load<int32_t>(path("n"), sh), n(), n_shape);
      if (fits(0)) expect_piece("s", dax::load<int64_t>(path("s"), sh), s(), s_shape);
      if (fits(1)) expect_piece("m", dax::load<bool>(path("m"), sh), m(), m_shape);
      if (fits(2)) expect_piece("e", dax::load<float>(path("e"), sh), e(), e_shape);
      if (fits(2)) expect_piece("u", dax::load<float>(path("u"), sh), u(), u_shape);
    }
  }
  // The dict form over the same files.
  const auto model = dax::load<float>(dir, {{"w", NamedSharding(line, P("x"))}, {"u", NamedSharding(line, P())}});
  expect_piece("w (dict)", model.at("w"), w(), w_shape);
  expect_piece("u (dict)", model.at("u"), u(), u_shape);
}

}  // namespace

int main(int argc, char** argv) {
  dax::Runtime rt(argc, argv);
  if (argc != 3 || (std::string(argv[1]) != "save" && std::string(argv[1]) != "load")) {
    if (rt.rank() == 0) std::cerr << "usage: checkpoint_ranks save|load DIR\n";
    return 2;
  }
  try {
    if (std::string(argv[1]) == "save") save(argv[2], rt.size());
    else load(argv[2], rt.size());
  } catch (const dax::Error& e) {
    std::cerr << "rank " << rt.rank() << ": " << e.what() << "\n";
    ++failures;
  }
  int any = 0;
  MPI_Allreduce(&failures, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rt.rank() == 0)
    std::cout << "checkpoint_ranks " << argv[1] << " at " << rt.size() << " rank(s): "
              << (any ? std::to_string(any) + " failure(s)" : "ok") << "\n";
  return any ? 1 : 0;
}
