#include "runner/io/logp_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "platform/files.h"
#include "runner/data/hash.h"
#include "runner/data/le_bytes.h"

namespace tailor::runner::io {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'T', 'L', 'R', 'L', 'O', 'G', 'P', '\0'};
constexpr std::uint64_t kHeaderBytes = 64;
constexpr std::uint64_t kEntryBytes = 16;

using data::pad8;

// The file's bytes as the le_bytes helpers read and write them.
void put_le(std::string& s, std::size_t at, std::uint64_t v, int bytes) {
  data::put_le(reinterpret_cast<unsigned char*>(s.data()) + at, v, bytes);
}
std::uint64_t get_le(const std::string& s, std::size_t at, int bytes) {
  return data::get_le(reinterpret_cast<const unsigned char*>(s.data()) + at, bytes);
}

// Row r's inputs and targets up to its end.
void add_row(data::Checksum64& sum, const data::Batch& b, std::int64_t r) {
  const std::size_t from = static_cast<std::size_t>(r * b.seq_len);
  const std::int64_t len = b.row_length(r);
  const std::uint64_t n = static_cast<std::uint64_t>(len);
  sum.update(&n, sizeof n);
  sum.update(b.inputs.data() + from, static_cast<std::size_t>(len) * sizeof(std::int32_t));
  sum.update(b.targets.data() + from, static_cast<std::size_t>(len) * sizeof(std::int32_t));
}

}  // namespace

std::uint64_t pair_key(const data::Batch& b, std::int64_t pair) {
  data::Checksum64 sum(0x7461696c6f72ULL);  // "tailor"
  add_row(sum, b, pair);
  add_row(sum, b, b.rows / 2 + pair);
  return sum.finish();
}

std::string logp_cache_file(const std::string& dir, const std::string& identity) {
  return (fs::path(dir) / ("reference-" + data::hex64(data::fnv1a64(identity)) + ".logps")).string();
}

LoadedLogps read_logp_cache(const std::string& file, const std::string& identity) {
  LoadedLogps out;
  std::error_code ec;
  if (!fs::exists(file, ec)) return out;
  std::ifstream in(file, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    out.problem = "cannot be read";
    return out;
  }
  if (s.size() < kHeaderBytes) {
    out.problem = "truncated (" + std::to_string(s.size()) + " bytes, shorter than its header)";
    return out;
  }
  if (std::memcmp(s.data(), kMagic, sizeof kMagic) != 0) {
    out.problem = "not a log-probability cache (bad magic)";
    return out;
  }
  if (get_le(s, 56, 8) != data::checksum64(s.data(), 56)) {
    out.problem = "its header's checksum does not match";
    return out;
  }
  if (get_le(s, 8, 4) != kLogpCacheVersion || get_le(s, 12, 4) != kHeaderBytes) {
    out.problem = "format version " + std::to_string(get_le(s, 8, 4)) + ", not " + std::to_string(kLogpCacheVersion);
    return out;
  }
  const std::uint64_t key_bytes = get_le(s, 16, 8), entries = get_le(s, 24, 8), file_bytes = get_le(s, 32, 8);
  // Sizes first, without overflow: a damaged count must not wrap around.
  if (key_bytes > s.size() || entries > s.size() / kEntryBytes ||
      file_bytes != kHeaderBytes + pad8(key_bytes) + kEntryBytes * entries) {
    out.problem = "its sizes do not add up";
    return out;
  }
  if (s.size() != file_bytes) {
    out.problem = "truncated or extended (" + std::to_string(s.size()) + " bytes, the header says " +
                  std::to_string(file_bytes) + ")";
    return out;
  }
  if (get_le(s, 40, 8) != data::checksum64(s.data() + kHeaderBytes, s.size() - kHeaderBytes)) {
    out.problem = "its checksum does not match (damaged)";
    return out;
  }
  if (s.compare(kHeaderBytes, key_bytes, identity) != 0 || key_bytes != identity.size()) {
    out.problem = "written for another reference (its key differs)";
    return out;
  }
  std::size_t at = kHeaderBytes + pad8(key_bytes);
  out.table.reserve(entries);
  for (std::uint64_t i = 0; i < entries; ++i, at += kEntryBytes) {
    PairLogps v;
    v.chosen = std::bit_cast<float>(static_cast<std::uint32_t>(get_le(s, at + 8, 4)));
    v.rejected = std::bit_cast<float>(static_cast<std::uint32_t>(get_le(s, at + 12, 4)));
    out.table.emplace(get_le(s, at, 8), v);
  }
  (void)::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);  // its time of use; read-only folders keep the old one
  return out;
}

Result<LogpCacheInfo> read_logp_cache_info(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::invalid_argument("cannot open");
  std::string s(kHeaderBytes, '\0');
  if (!in.read(s.data(), static_cast<std::streamsize>(s.size()))) {
    return Status::invalid_argument("truncated: shorter than its header");
  }
  if (std::memcmp(s.data(), kMagic, sizeof kMagic) != 0) return Status::invalid_argument("not a log-probability cache");
  if (get_le(s, 56, 8) != data::checksum64(s.data(), 56)) return Status::invalid_argument("header checksum mismatch");
  if (get_le(s, 8, 4) != kLogpCacheVersion) {
    return Status::invalid_argument("format version " + std::to_string(get_le(s, 8, 4)) + ", not " +
                                    std::to_string(kLogpCacheVersion));
  }
  const std::uint64_t key_bytes = get_le(s, 16, 8);
  if (key_bytes > (std::uint64_t{1} << 20)) return Status::invalid_argument("its sizes do not add up");
  LogpCacheInfo info;
  info.pairs = get_le(s, 24, 8);
  info.identity.resize(static_cast<std::size_t>(key_bytes));
  if (!in.read(info.identity.data(), static_cast<std::streamsize>(key_bytes))) {
    return Status::invalid_argument("truncated key");
  }
  return info;
}

Status write_logp_cache(const std::string& file, const std::string& identity, const LogpTable& table) {
  std::vector<std::pair<std::uint64_t, PairLogps>> sorted(table.begin(), table.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::uint64_t file_bytes = kHeaderBytes + pad8(identity.size()) + kEntryBytes * sorted.size();
  std::string s(file_bytes, '\0');
  std::memcpy(s.data() + kHeaderBytes, identity.data(), identity.size());
  std::size_t at = kHeaderBytes + pad8(identity.size());
  for (const auto& [key, v] : sorted) {
    put_le(s, at, key, 8);
    put_le(s, at + 8, std::bit_cast<std::uint32_t>(v.chosen), 4);
    put_le(s, at + 12, std::bit_cast<std::uint32_t>(v.rejected), 4);
    at += kEntryBytes;
  }
  std::memcpy(s.data(), kMagic, sizeof kMagic);
  put_le(s, 8, kLogpCacheVersion, 4);
  put_le(s, 12, kHeaderBytes, 4);
  put_le(s, 16, identity.size(), 8);
  put_le(s, 24, sorted.size(), 8);
  put_le(s, 32, file_bytes, 8);
  put_le(s, 40, data::checksum64(s.data() + kHeaderBytes, s.size() - kHeaderBytes), 8);
  put_le(s, 56, data::checksum64(s.data(), 56), 8);
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  if (ec) return Status::io_error("cannot create folder " + fs::path(file).parent_path().string() + ": " + ec.message());
  // Written under a name of this process's own, then renamed over the file:
  // jobs that share a reference (a sweep) may finish their passes at once,
  // and each leaves a whole file (the last one's).
  const std::string mine = file + ".part-" + std::to_string(::getpid());
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic(mine, s));
  if (::rename(mine.c_str(), file.c_str()) != 0) {
    const int err = errno;
    ::unlink(mine.c_str());
    return Status::io_error("writing " + file + ": " + std::strerror(err));
  }
  return Status::ok();
}

}  // namespace tailor::runner::io
