// With DAX_CHECK_COLLECTIVES=1 (set for the whole multi-rank suite), ranks that reach a
// collective with different calls get the same dax::Error on every rank, naming what each called,
// and the group stays usable afterwards.
#include <catch2/catch.hpp>

#include "helpers.hpp"

using dax::Mesh;
using dax::NamedSharding;
using dax::P;
using dax::test::error_of;

namespace {

bool checking() {
  if (dax::detail::collective_checks().fingerprints) return true;
  WARN("DAX_CHECK_COLLECTIVES is not set: the divergence checks are off, nothing to test");
  return false;
}

std::string ranks_text(int from, int to) {
  std::string s;
  for (int r = from; r < to; ++r) s += (r > from ? ", " : "") + std::to_string(r);
  return s;
}

}  // namespace

TEST_CASE("one rank reduces a different shape: every rank learns who called what", "[divergence]") {
  const int n = dax::test::world_size();
  if (n < 2 || !checking()) return;
  const Mesh mesh({n}, {"x"});
  const NamedSharding partial(mesh, P().with_unreduced("x"));
  const int64_t size = dax::test::world_rank() == 0 ? 4 : 6;
  const auto x = dax::ones<float>({size}, partial);
  const std::string error = error_of([&] { dax::reshard(x, NamedSharding(mesh, P())); });
  // The call's number on the group depends on what ran before; it is the same on every rank.
  const size_t at = error.find("(call #") + 7;
  const std::string number = error.substr(at, error.find(' ', at) - at);
  CHECK(error == "dax: ranks diverged on the group ('x',) (world ranks " + ranks_text(0, n) +
                     ") (DAX_CHECK_COLLECTIVES=1):\n"
                     "  world rank 0 called all_reduce of 4 float32 in reshard (4,) float32 P(unreduced={'x'}) -> P() "
                     "(call #" + number + " on this group)\n"
                     "  world rank" + (n > 2 ? "s " : " ") + ranks_text(1, n) +
                     " called all_reduce of 6 float32 in reshard (6,) float32 P(unreduced={'x'}) -> P() (call #" +
                     number + " on this group)");
  // Nothing ran, so the group goes on: the same call on every rank works.
  const auto y = dax::reshard(dax::ones<float>({5}, partial), NamedSharding(mesh, P()));
  CHECK(y.to_host() == std::vector<float>(5, 1.0f));  // ones() unreduced: the sum is one
}

TEST_CASE("one rank calls another collective: every rank throws", "[divergence]") {
  const int n = dax::test::world_size();
  if (n < 2 || !checking()) return;
  const Mesh mesh({n}, {"x"});
  const auto x = dax::ones<float>({2 * n}, NamedSharding(mesh, P("x")));
  const std::string error = error_of([&] {
    if (dax::test::world_rank() == n - 1) dax::sum(x);  // partial sums, then an all-reduce
    else dax::reshard(x, NamedSharding(mesh, P()));     // an all-gather
  });
  CHECK(error.find("dax: ranks diverged on the group ('x',)") == 0);
  CHECK(error.find("called all_gather of " + std::to_string(2 * n) + " float32 in reshard (" + std::to_string(2 * n) +
                   ",) float32 P('x') -> P()") != std::string::npos);
  CHECK(error.find("world rank " + std::to_string(n - 1) +
                   " called all_reduce of 1 float32 in reshard () float32 P(unreduced={'x'}) -> P()") != std::string::npos);
  CHECK(dax::sum(x).to_host() == std::vector<float>{float(2 * n)});
}

TEST_CASE("ppermute of another shape on one rank: every member throws, unpaired ones too", "[divergence]") {
  const int n = dax::test::world_size();
  if (n < 2 || !checking()) return;
  const Mesh mesh({n}, {"x"});
  const auto x = dax::ones<float>({n}, NamedSharding(mesh, P("x")));
  // Only devices 0 and 1 are paired; the others still take part in the call and learn of the error.
  const auto shift = [&](int64_t size) {
    return dax::shard_map(
        [size](const dax::DistArray<float>&) {
          return dax::ppermute(dax::ones<float>({size}, dax::local_sharding()), "x", {{0, 1}});
        },
        mesh, {P("x")}, P("x"))(x);
  };
  const int64_t size = dax::test::world_rank() == 0 ? 2 : 3;
  const std::string error = error_of([&] { shift(size); });
  const size_t at = error.find("(call #") + 7;
  const std::string number = error.substr(at, error.find(' ', at) - at);
  CHECK(error == "dax: ranks diverged on the group ('x',) (world ranks " + ranks_text(0, n) +
                     ") (DAX_CHECK_COLLECTIVES=1):\n"
                     "  world rank 0 called send_recv of 2 float32 in ppermute of (2,) float32 over ('x',) (call #" +
                     number + " on this group)\n"
                     "  world rank" + (n > 2 ? "s " : " ") + ranks_text(1, n) +
                     " called send_recv of 3 float32 in ppermute of (3,) float32 over ('x',) (call #" + number +
                     " on this group)");
  // The same call everywhere goes through: device 1 gets device 0's ones, the others zeros.
  std::vector<float> want(3 * n, 0.0f);
  if (n > 1) std::fill(want.begin() + 3, want.begin() + 6, 1.0f);
  CHECK(shift(3).to_host() == want);
}

TEST_CASE("one rank starts a reshard without waiting while the others block: every rank throws", "[divergence]") {
  const int n = dax::test::world_size();
  if (n < 2 || !checking()) return;
  const Mesh mesh({n}, {"x"});
  const auto x = dax::ones<float>({2 * n}, NamedSharding(mesh, P("x")));
  const NamedSharding whole(mesh, P());
  // MPI cannot match a nonblocking collective with a blocking one: the check must catch it first.
  const std::string error = error_of([&] {
    if (dax::test::world_rank() == n - 1) dax::reshard_async(x, whole).wait();
    else dax::reshard(x, whole);
  });
  CHECK(error.find("dax: ranks diverged on the group ('x',)") == 0);
  CHECK(error.find("all_gather (async) of " + std::to_string(2 * n) + " float32 in reshard_async") !=
        std::string::npos);
  CHECK(error.find("all_gather of " + std::to_string(2 * n) + " float32 in reshard") != std::string::npos);
  // Nothing ran: the group goes on, blocking and nonblocking alike.
  CHECK(dax::reshard(x, whole).to_host() == std::vector<float>(2 * n, 1.0f));
  CHECK(dax::reshard_async(x, whole).wait().to_host() == std::vector<float>(2 * n, 1.0f));
}
