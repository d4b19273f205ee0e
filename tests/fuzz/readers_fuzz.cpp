// libFuzzer target for dax's file readers (issue 46): the first byte of the input picks what reads
// the rest. Any file must give either an index every later read stays inside, or a dax::Error;
// anything else (another exception, a crash, an ASan or UBSan report, a broken invariant) aborts.
//   0, 1, 2  the whole reader, dax::detail::stored::read_index, on the rest written to a file named
//            .npy, .npz or .safetensors (the name picks the format when the magic bytes do not);
//            every array's data must lie inside the file, and the index's serialized form (what
//            rank 0 broadcasts) must read back to itself
//   3        the .npy header parser; a header it accepts, written again by dax, parses the same
//   4        the checkpoint sidecar's parser; a sidecar it accepts, written again, parses the same
// Built with clang -fsanitize=fuzzer,address,undefined (scripts/fuzz.sh), which seeds the corpus
// from files dax writes here (LLVMFuzzerInitialize) rather than from downloads.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <dax/core/error.hpp>
#include <dax/io/npy.hpp>
#include <dax/io/sidecar.hpp>
#include <dax/io/stored_file.hpp>

namespace {

namespace stored = dax::detail::stored;
namespace npy = dax::detail::npy;

std::string current_case;

[[noreturn]] void violation(const std::string& why) {
  std::fprintf(stderr, "readers_fuzz: invariant violated: %s\n  case: %s\n", why.c_str(), current_case.c_str());
  std::fflush(stderr);
  std::abort();
}

#define DAX_FUZZ_CHECK(cond, ...)                          \
  do {                                                     \
    if (!(cond)) violation(dax::detail::cat(__VA_ARGS__)); \
  } while (0)

const char* const extensions[] = {".npy", ".npz", ".safetensors"};

std::string scratch_path(int format) {
  const char* dir = std::getenv("TMPDIR");
  return dax::detail::cat(dir && *dir ? dir : "/tmp", "/dax_readers_fuzz_", ::getpid(), extensions[format]);
}

void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) violation("cannot write the scratch file " + path);
}

/// The whole reader on a file: each array it reports must lie inside the file.
void read_whole_file(int format, std::string_view bytes) {
  const std::string path = scratch_path(format);
  write_file(path, bytes);
  stored::Index idx;
  try {
    idx = stored::read_index(path);
  } catch (const dax::Error&) {
    return;
  }
  DAX_FUZZ_CHECK(idx.file_size == static_cast<int64_t>(bytes.size()), "file_size ", idx.file_size, " for ",
                 bytes.size(), " bytes");
  for (const stored::Located& l : idx.arrays) {
    int64_t count = 1;
    for (int64_t d : l.entry.shape) {
      DAX_FUZZ_CHECK(d >= 0, "a negative dimension in ", dax::to_string(l.entry.shape));
      if (d != 0 && count > INT64_MAX / d) {
        DAX_FUZZ_CHECK(!l.entry.element, "accepted ", dax::to_string(l.entry.shape), ", whose size overflows");
        count = -1;
        break;
      }
      count *= d;
    }
    if (!l.entry.element || count < 0) continue;  // not readable by dax: never read
    DAX_FUZZ_CHECK(l.item_size > 0, "item size ", l.item_size, " for ", l.entry.dtype);
    DAX_FUZZ_CHECK(count <= INT64_MAX / l.item_size, "accepted ", dax::to_string(l.entry.shape), " of ",
                   l.item_size, "-byte items, whose bytes overflow");
    const int64_t data = count * l.item_size;
    DAX_FUZZ_CHECK(l.offset >= 0 && l.offset <= idx.file_size && data <= idx.file_size - l.offset, "array '",
                   l.entry.name, "' at byte ", l.offset, " of ", data, " bytes leaves the ", idx.file_size,
                   "-byte file");
  }
  const std::string once = stored::serialize(idx);
  DAX_FUZZ_CHECK(stored::serialize(stored::deserialize(once)) == once, "the serialized index does not read back:\n",
                 once);
}

/// The .npy header parser; what it accepts, dax writes again and reads the same.
void parse_npy_header(std::string_view bytes) {
  npy::Header h;
  try {
    h = npy::parse_header(bytes);
  } catch (const dax::Error&) {
    return;
  }
  DAX_FUZZ_CHECK(h.data_offset >= 10 && h.data_offset <= static_cast<int64_t>(bytes.size()), "data offset ",
                 h.data_offset, " for ", bytes.size(), " bytes");
  bool swap = false;
  if (!stored::npy_element(h.descr, swap)) return;  // dax writes only what it reads
  bool negative = false;
  for (int64_t d : h.shape) negative = negative || d < 0;
  DAX_FUZZ_CHECK(!negative, "a negative dimension in ", dax::to_string(h.shape));
  const npy::Header again = npy::parse_header(npy::write_header(h.descr, h.shape));
  DAX_FUZZ_CHECK(again.descr == h.descr && again.shape == h.shape && !again.fortran_order,
                 "written again, the header reads as ", again.descr, " ", dax::to_string(again.shape));
}

/// The checkpoint sidecar's parser; what it accepts, dax writes again and reads the same.
void parse_sidecar(std::string_view text) {
  dax::detail::checkpoint::Sidecar s;
  try {
    s = dax::detail::checkpoint::parse_sidecar(text);
  } catch (const dax::Error&) {
    return;
  }
  const std::string again = dax::detail::checkpoint::sidecar_text(s);
  DAX_FUZZ_CHECK(dax::detail::checkpoint::parse_sidecar(again) == s, "written again, the sidecar reads differently: ", again);
}

// ---- seeds: files dax and numpy would write ----

void put_le(std::string& out, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

std::string npy_file(const std::string& descr, const dax::Shape& shape, int64_t item_size) {
  std::string out = npy::write_header(descr, shape);
  out.append(static_cast<size_t>(dax::numel(shape) * item_size), '\x01');
  return out;
}

/// A stored (uncompressed) zip of .npy entries, as numpy.savez writes.
std::string npz_file(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string body, central;
  for (const auto& [name, data] : entries) {
    const uint64_t local = body.size();
    put_le(body, 0x04034b50, 4);
    put_le(body, 20, 2);  // version needed
    put_le(body, 0, 2);   // flags
    put_le(body, 0, 2);   // stored
    put_le(body, 0, 4);   // time, date
    put_le(body, 0, 4);   // crc-32 (dax does not check it)
    put_le(body, data.size(), 4);
    put_le(body, data.size(), 4);
    put_le(body, name.size(), 2);
    put_le(body, 0, 2);
    body += name + data;
    put_le(central, 0x02014b50, 4);
    put_le(central, 20, 2);
    put_le(central, 20, 2);
    put_le(central, 0, 2);
    put_le(central, 0, 2);
    put_le(central, 0, 4);
    put_le(central, 0, 4);
    put_le(central, data.size(), 4);
    put_le(central, data.size(), 4);
    put_le(central, name.size(), 2);
    put_le(central, 0, 2);  // extra
    put_le(central, 0, 2);  // comment
    put_le(central, 0, 2);  // disk
    put_le(central, 0, 2);  // internal attributes
    put_le(central, 0, 4);  // external attributes
    put_le(central, local, 4);
    central += name;
  }
  std::string out = body + central;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);  // disks
  put_le(out, entries.size(), 2);
  put_le(out, entries.size(), 2);
  put_le(out, central.size(), 4);
  put_le(out, body.size(), 4);
  put_le(out, 0, 2);
  return out;
}

std::string safetensors_file() {
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})";
  std::string out;
  put_le(out, json.size(), 8);
  out += json;
  out.append(32, '\x02');
  return out;
}

void write_seeds(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || !std::filesystem::is_empty(dir, ec)) return;
  const std::string f4 = npy_file("<f4", {2, 3}, 4), i8 = npy_file("<i8", {5}, 8), bf = npy_file("|V2", {3, 1}, 2);
  dax::detail::checkpoint::Sidecar side;
  side.descr = "<f4";
  side.shape = {2, 3};
  side.header_bytes = 128;
  side.data_bytes = 24;
  side.checksum = 0x0123456789abcdefull;
  const std::vector<std::string> seeds = {
      std::string(1, '\0') + f4,
      std::string(1, '\0') + npy_file(">f8", {}, 8),
      std::string(1, '\1') + npz_file({{"w.npy", f4}, {"b.npy", i8}}),
      std::string(1, '\1') + npz_file({{"x.npy", bf}}),
      std::string(1, '\2') + safetensors_file(),
      std::string(1, '\3') + npy::write_header("<i4", {7, 0, 2}),
      std::string(1, '\4') + dax::detail::checkpoint::sidecar_text(side),
  };
  for (size_t i = 0; i < seeds.size(); ++i) write_file((dir / ("seed" + std::to_string(i))).string(), seeds[i]);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i)
    if ((*argv)[i][0] != '-') write_seeds((*argv)[i]);  // the corpus directories
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int what = data[0] % 5;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  current_case = dax::detail::cat("reader ", what, ", ", rest.size(), " bytes");
  switch (what) {
    case 0:
    case 1:
    case 2: read_whole_file(what, rest); break;
    case 3: parse_npy_header(rest); break;
    default: parse_sidecar(rest); break;
  }
  return 0;
}
