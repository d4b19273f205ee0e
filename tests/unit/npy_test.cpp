// The .npy header (NumPy's exact bytes, strict parsing, refusals), the checkpoint sidecar and the
// piece-wise checksum, all without MPI or files.
#include <catch2/catch.hpp>

#include <complex>
#include <cstring>
#include <random>
#include <string>

#include <dax/io/checksum.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/sidecar.hpp>
#include <dax/sharding/build.hpp>

#include "../common/error_of.hpp"
#include "../common/meshes.hpp"

namespace npy = dax::detail::npy;
namespace ck = dax::detail::checkpoint;
using dax::Shape;

namespace {

/// What numpy 1.24's np.save writes for a C-order array whose dict text is `dict` (checked by
/// hand against numpy: every header below is 128 bytes).
std::string numpy_header(const std::string& dict, size_t total = 128) {
  std::string out("\x93NUMPY\x01\x00", 8);
  const size_t length = total - 10;
  out += static_cast<char>(length & 0xff);
  out += static_cast<char>(length >> 8);
  out += dict;
  out.append(total - 10 - dict.size() - 1, ' ');
  return out + "\n";
}

std::string error_of(const std::string& bytes) {
  return dax::test::error_of([&] { npy::parse_header(bytes); });
}

std::string sidecar_error_of(const std::string& text) {
  return dax::test::error_of([&] { ck::parse_sidecar(text); });
}

}  // namespace

TEST_CASE("npy headers are NumPy's bytes", "[io][npy]") {
  CHECK(npy::write_header("<f4", {2, 3}) ==
        numpy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  CHECK(npy::write_header("<f8", {}) == numpy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (), }"));
  CHECK(npy::write_header("<i4", {5}) == numpy_header("{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }"));
  CHECK(npy::write_header("|b1", {0, 4}) ==
        numpy_header("{'descr': '|b1', 'fortran_order': False, 'shape': (0, 4), }"));
  CHECK(npy::write_header("<i8", {100000, 3}) ==
        numpy_header("{'descr': '<i8', 'fortran_order': False, 'shape': (100000, 3), }"));
  // The first dimension's growth room: 21 digits in all, so a long first dimension grows the header.
  const std::string big = npy::write_header("<f4", {123456789012345678, 2, 3, 4, 5, 6, 7});
  CHECK(big.size() % 64 == 0);
  CHECK(big.back() == '\n');
  CHECK(npy::descr_of<float>() == "<f4");
  CHECK(npy::descr_of<double>() == "<f8");
  CHECK(npy::descr_of<int32_t>() == "<i4");
  CHECK(npy::descr_of<int64_t>() == "<i8");
  CHECK(npy::descr_of<bool>() == "|b1");
}

TEST_CASE("npy headers parse back", "[io][npy]") {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{3, 5}, Shape{1, 0, 9}, Shape{2, 3, 4, 5, 6},
                             Shape{1000000000000}}) {
    for (const char* descr : {"<f4", "<f8", "<i4", "<i8", "|b1"}) {
      const std::string h = npy::write_header(descr, shape);
      const npy::Header parsed = npy::parse_header(h);
      CHECK(parsed.descr == descr);
      CHECK(parsed.shape == shape);
      CHECK_FALSE(parsed.fortran_order);
      CHECK(parsed.major == 1);
      CHECK(parsed.data_offset == static_cast<int64_t>(h.size()));
      CHECK(parsed.data_offset % 64 == 0);
      CHECK(npy::header_length(h) == parsed.data_offset);
    }
  }
  // What other writers may put there: other key orders, double quotes, no trailing comma, spaces,
  // Python 2 longs, the 16-byte alignment of old NumPy, versions 2.0 and 3.0.
  auto v1 = [](const std::string& dict) {
    std::string out("\x93NUMPY\x01\x00", 8);
    out += static_cast<char>((dict.size() + 1) & 0xff);
    out += static_cast<char>((dict.size() + 1) >> 8);
    return out + dict + "\n";
  };
  auto h = npy::parse_header(v1("{\"shape\": (4,3), \"fortran_order\": True, \"descr\": \">f8\"}"));
  CHECK(h.descr == ">f8");
  CHECK(h.fortran_order);
  CHECK(h.shape == Shape{4, 3});
  h = npy::parse_header(v1("{ 'descr' : '<i8' , 'fortran_order' : False , 'shape' : ( 6L , 2L , ) , }  "));
  CHECK(h.shape == Shape{6, 2});
  CHECK(h.data_offset == 10 + 76);
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }\n";
  for (int version : {2, 3}) {
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(version);
    out += '\0';
    out += static_cast<char>(dict.size());
    out += std::string(3, '\0');
    out += dict;
    h = npy::parse_header(out);
    CHECK(h.major == version);
    CHECK(h.shape == Shape{8});
    CHECK(h.data_offset == 12 + static_cast<int64_t>(dict.size()));
  }
}

TEST_CASE("bad npy headers are refused", "[io][npy]") {
  const std::string good = npy::write_header("<f4", {2, 3});
  CHECK(error_of("hello, world\n") ==
        "is not a .npy file: expected the magic string \\x93NUMPY, found \"hello,\"");
  CHECK(error_of("PK\x03") ==
        "is not a .npy file: expected the magic string \\x93NUMPY, found \"PK\\x03\" (the whole file)");
  CHECK(error_of("") == "is not a .npy file: expected the magic string \\x93NUMPY, found \"\" (the whole file)");
  CHECK(error_of(good.substr(0, 9)) == "is not a .npy file: it ends after 9 bytes, inside the .npy preamble");
  std::string v4 = good;
  v4[6] = 4;
  CHECK(error_of(v4) == "has .npy format version 4.0; dax reads versions 1.0, 2.0 and 3.0");
  v4[6] = 1;
  v4[7] = 1;
  CHECK(error_of(v4) == "has .npy format version 1.1; dax reads versions 1.0, 2.0 and 3.0");
  CHECK(error_of(good.substr(0, 100)) == "is truncated: its .npy header is 128 bytes long but the file ends after 100");
  std::string huge = good;
  huge[6] = 2;
  huge[8] = 0, huge[9] = 0, huge[10] = 0x20, huge[11] = 0;  // 2 MiB
  CHECK(error_of(huge) == "has a .npy header of 2097152 bytes; dax reads headers of up to 1048576");

  auto with_dict = [&](std::string dict) {
    dict.resize(good.size() - 11, ' ');
    return good.substr(0, 10) + dict + "\n";
  };
  const std::string prefix = "has a malformed .npy header: ";
  CHECK(error_of(with_dict("['descr', '<f4']")) == prefix + "expected '{' at byte 10, found '['");
  CHECK(error_of(with_dict("{'descr': '<f4', 'fortran_order': False}")) == prefix + "the key 'shape' is missing");
  CHECK(error_of(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}")) ==
        prefix + "unexpected key 'x' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
  CHECK(error_of(with_dict("{'descr': '<f4', 'descr': '<f4'}")) == prefix + "the key 'descr' appears twice");
  CHECK(error_of(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}")) ==
        prefix + "expected ',' or ')' in the shape at byte 63, found '3'");
  CHECK(error_of(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (5)}")) ==
        prefix + "a one-element shape tuple needs a trailing comma: (5,)");
  CHECK(error_of(with_dict("{'descr': '<f4', 'fortran_order': false, 'shape': (5,)}")) ==
        prefix + "expected True or False at byte 44, found 'f'");
  CHECK(error_of(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (-5,)}")) ==
        prefix + "expected a dimension size at byte 61, found '-'");
  CHECK(error_of(with_dict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (5,)}")) ==
        prefix + "expected a string at byte 20, found '['");
  CHECK(error_of(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}")) ==
        prefix + "a dimension size does not fit in 64 bits");
  // A flipped padding byte: only spaces may follow the dict.
  std::string flipped = good;
  flipped[100] = '!';
  CHECK(error_of(flipped) == prefix + "expected only spaces after the closing '}' at byte 100, found '!'");
  std::string unterminated = good;
  unterminated[20] = 'x';  // the quote opening '<f4': the value is not a string
  CHECK(error_of(unterminated) == prefix + "expected a string at byte 20, found 'x'");
  std::string key = good;
  key[13] = 'x';
  CHECK(error_of(key) ==
        prefix + "unexpected key 'dxscr' (a .npy header has exactly 'descr', 'fortran_order' and 'shape')");
}

TEST_CASE("descr names", "[io][npy]") {
  CHECK(npy::descr_name("<f4") == "float32");
  CHECK(npy::descr_name("<i8") == "int64");
  CHECK(npy::descr_name("|b1") == "bool");
  CHECK(npy::descr_name(">f8") == "float64, big-endian");
  CHECK(npy::descr_name("<c8") == "complex64");
  CHECK(npy::descr_name(">c16") == "complex128, big-endian");
  CHECK(npy::descr_name("<c32") == "'<c32'");  // NumPy's complex256: no dax type
  CHECK(npy::data_bytes({2, 3}, 4) == 24);
  CHECK(npy::data_bytes({}, 8) == 8);
  CHECK(npy::data_bytes({int64_t(1) << 40, int64_t(1) << 30}, 4) == -1);
}

TEST_CASE("splitmix64's finalizer gives its known outputs", "[io][checksum]") {
  // splitmix64 seeded with 0: its first outputs are mix64 of multiples of the golden step.
  CHECK(ck::mix64(1 * ck::index_step) == 0xe220a8397b1dcdafull);
  CHECK(ck::mix64(2 * ck::index_step) == 0x6e789e6aa1b965f4ull);
  CHECK(ck::mix64(3 * ck::index_step) == 0x06c45d188009454full);
  CHECK(ck::hex64(0x06c45d188009454full) == "06c45d188009454f");
}

template <class T>
void vector_kernels_agree(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> data(1000);
  for (auto& x : data) {
    const uint64_t r = rng();
    std::memcpy(&x, &r, sizeof(T));
  }
  for (int64_t count : {0, 1, 3, 4, 7, 8, 9, 15, 16, 17, 100, 1000})
    for (int64_t first : {int64_t(0), int64_t(5), int64_t(1) << 40}) {
      const uint64_t want = ck::run_checksum_scalar(data.data(), count, first);
      CHECK(ck::run_checksum(data.data(), count, first) == want);
#ifdef DAX_CHECKSUM_X86
      if (ck::checksum_kernel() >= 1) CHECK(ck::run_checksum_avx2(data.data(), count, first) == want);
      if (ck::checksum_kernel() >= 2) CHECK(ck::run_checksum_avx512(data.data(), count, first) == want);
#endif
    }
}

TEST_CASE("the vector checksum kernels compute the definition", "[io][checksum]") {
  vector_kernels_agree<float>(1);
  vector_kernels_agree<double>(2);
  vector_kernels_agree<int32_t>(3);
  vector_kernels_agree<int64_t>(4);
}

TEST_CASE("the checksum is the same for every tiling and sees every change", "[io][checksum]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(-50, 50);
  for (const Shape& shape : {Shape{}, Shape{13}, Shape{6, 5}, Shape{3, 1, 7}, Shape{4, 0, 2}}) {
    std::vector<float> global(dax::numel(shape));
    for (auto& x : global) x = static_cast<float>(value(rng)) * 0.5f;
    const uint64_t whole = ck::piece_checksum(global.data(), shape, dax::full_box(shape));
    uint64_t reference = 0;
    for (size_t i = 0; i < global.size(); ++i) reference += ck::element_term(i, ck::bits_of(global[i]));
    CHECK(whole == reference);
    // Every sharding of every mesh of up to 8 devices: the replica-0 pieces add up to the whole.
    for (const dax::Mesh& mesh : dax::test::all_meshes()) {
      for (const dax::NamedSharding& s : dax::test::all_shardings(mesh, shape.size(), false)) {
        uint64_t sum = 0;
        for (int device : mesh.devices()) {
          if (s.replica_id(device) != 0) continue;
          const dax::Box box = s.device_indices(device, shape);
          std::vector<float> piece;
          dax::for_each_in_box(shape, box, [&](int64_t, int64_t flat) { piece.push_back(global[flat]); });
          if (dax::numel(box) > 0) sum += ck::piece_checksum(piece.data(), shape, box);
        }
        CHECK(sum == whole);
      }
    }
    if (global.size() < 2) continue;
    // One changed bit, anywhere, changes the sum; so does swapping two different values.
    for (size_t i = 0; i < global.size(); ++i) {
      auto changed = global;
      uint32_t bits;
      std::memcpy(&bits, &changed[i], 4);
      bits ^= 1u << (i % 32);
      std::memcpy(&changed[i], &bits, 4);
      CHECK(ck::piece_checksum(changed.data(), shape, dax::full_box(shape)) != whole);
    }
    auto swapped = global;
    size_t j = 1;
    while (j < swapped.size() && swapped[j] == swapped[0]) ++j;
    if (j < swapped.size()) {
      std::swap(swapped[0], swapped[j]);
      CHECK(ck::piece_checksum(swapped.data(), shape, dax::full_box(shape)) != whole);
    }
  }
  // -0.0 and 0.0 differ in their bits, and the checksum says so.
  const float zero = 0.0f, negative_zero = -0.0f;
  CHECK(ck::piece_checksum(&zero, {}, {}) != ck::piece_checksum(&negative_zero, {}, {}));
}

TEST_CASE("sidecars", "[io][sidecar]") {
  const ck::Sidecar s{"<f4", {16, 8}, 128, 512, 0x0123456789abcdefull};
  const std::string text = ck::sidecar_text(s);
  CHECK(text ==
        "{\"format\": \"dax.checkpoint\", \"version\": 1, \"dtype\": \"float32\", \"descr\": \"<f4\", \"shape\": "
        "[16, 8], \"header_bytes\": 128, \"data_bytes\": 512, \"checksum_kind\": \"sum-mix64\", \"checksum\": "
        "\"0123456789abcdef\"}\n");
  CHECK(ck::parse_sidecar(text) == s);
  const ck::Sidecar scalar{"|b1", {}, 128, 1, ~0ull};
  CHECK(ck::parse_sidecar(ck::sidecar_text(scalar)) == scalar);
  // Keys a later version might add are skipped.
  std::string extra = text;
  extra.insert(1, "\"note\": \"hi\", \"list\": [1, 2], \"n\": -3, ");
  CHECK(ck::parse_sidecar(extra) == s);

  CHECK(sidecar_error_of("") == "expected '{' at byte 0, found the end");
  CHECK(sidecar_error_of("hello") == "expected '{' at byte 0, found 'h'");
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return sidecar_error_of(t);
  };
  CHECK(replaced("dax.checkpoint", "other") == "its format is \"other\", expected \"dax.checkpoint\"");
  CHECK(replaced("\"version\": 1", "\"version\": 2") == "its version is 2, expected 1");
  CHECK(replaced("\"descr\": \"<f4\", ", "") == "it has no \"descr\"");
  CHECK(replaced("[16, 8]", "[16 8]") == "expected ',' or ']' at byte 92, found '8'");
  CHECK(replaced("[16, 8]", "[16, -8]") == "its shape has a negative dimension");
  CHECK(replaced("0123456789abcdef", "0123456789abcdeg") ==
        "its checksum \"0123456789abcdeg\" is not 16 lowercase hex digits");
  CHECK(replaced("sum-mix64", "crc32") == "its checksum kind is \"crc32\", expected \"sum-mix64\"");
  CHECK(replaced("}\n", "} x") == "unexpected text after the closing '}'");
  CHECK(replaced("\"checksum\": ", "\"checksum\" ") == "expected ':' at byte 178, found '\"'");
}

TEST_CASE("swap_bytes reverses each number, each half of a complex one on its own", "[io][npy]") {
  // A big-endian '>c8' file holds each float of the pair big-endian, real first.
  const float re = 1.5f, im = -3.25f;
  uint32_t re_bits, im_bits;
  std::memcpy(&re_bits, &re, 4);
  std::memcpy(&im_bits, &im, 4);
  const uint32_t stored[2] = {__builtin_bswap32(re_bits), __builtin_bswap32(im_bits)};
  std::complex<float> z;
  std::memcpy(&z, stored, 8);
  npy::swap_bytes(&z, 1);
  CHECK(z == std::complex<float>(1.5f, -3.25f));
  double d = 2.0;
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  bits = __builtin_bswap64(bits);
  std::memcpy(&d, &bits, 8);
  npy::swap_bytes(&d, 1);
  CHECK(d == 2.0);
}
