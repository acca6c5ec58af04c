#include "runner/data/token_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <system_error>
#include <utility>

#include "core/log.h"
#include "runner/data/dataset.h"
#include "runner/data/hash.h"
#include "runner/data/le_bytes.h"

namespace tailor::runner::data {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'T', 'L', 'R', 'T', 'O', 'K', 'C', '\0'};
constexpr std::uint64_t kHeaderBytes = 64;
// Far beyond any corpus (2^40 tokens = 4 TiB of ids); keeps the layout
// arithmetic of a corrupt header from overflowing.
constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 40;

struct CacheLayout {
  std::uint64_t offsets_at = 0, tokens_at = 0, trained_at = 0, values_at = 0, file_bytes = 0;
};

std::optional<CacheLayout> layout_of(std::uint64_t key_bytes, std::uint64_t documents, std::uint64_t tokens) {
  if (key_bytes > kMaxCount || documents > kMaxCount || tokens > kMaxCount) return std::nullopt;
  CacheLayout l;
  l.offsets_at = kHeaderBytes + pad8(key_bytes);
  l.tokens_at = l.offsets_at + 8 * (documents + 1);
  l.trained_at = l.tokens_at + pad8(4 * tokens);
  l.values_at = l.trained_at + pad8(tokens);
  l.file_bytes = l.values_at + pad8(4 * documents);
  return l;
}

// A read-only mapping of a whole file, unmapped with its last owner.
struct Mapping {
  void* addr = nullptr;
  std::size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr != nullptr) ::munmap(addr, size);
  }
};

struct Opened {
  enum class Kind { kMissing, kStale, kCorrupt, kValid } kind = Kind::kMissing;
  std::string why;
  TokenStore store;
};

Opened corrupt(std::string why) { return {Opened::Kind::kCorrupt, std::move(why), {}}; }

std::string errno_text(int err) { return std::strerror(err); }

Opened open_entry(const std::string& file, const std::string& key) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return {Opened::Kind::kMissing, "", {}};
    return corrupt("cannot open: " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return corrupt("cannot stat: " + errno_text(err));
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    return corrupt("truncated: " + std::to_string(size) + " bytes, shorter than the 64-byte header");
  }
  auto map = std::make_shared<Mapping>();
  // The checksum reads every page anyway: populating the mapping in one
  // call beats a page fault per 4 KiB (a 100 MB entry: 146 -> 49 ms here).
  void* addr = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED) return corrupt("cannot map: " + errno_text(map_err));
  map->addr = addr;
  map->size = static_cast<std::size_t>(size);
  const auto* p = static_cast<const unsigned char*>(addr);

  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) return corrupt("not a token cache entry (bad magic)");
  const std::uint64_t version = get_le(p + 8, 4);
  if (version != kTokenCacheVersion) {
    return {Opened::Kind::kStale, "format version " + std::to_string(version), {}};
  }
  if (get_le(p + 12, 4) != kHeaderBytes) return corrupt("bad header size");
  if (get_le(p + 56, 8) != checksum64(p, 56)) return corrupt("header checksum mismatch");
  const std::uint64_t key_bytes = get_le(p + 16, 8), documents = get_le(p + 24, 8), tokens = get_le(p + 32, 8);
  const std::uint64_t file_bytes = get_le(p + 40, 8);
  const auto layout = layout_of(key_bytes, documents, tokens);
  if (!layout || layout->file_bytes != file_bytes || file_bytes != size) {
    return corrupt("sizes do not add up (" + std::to_string(size) + " bytes on disk; the header says " +
                   std::to_string(file_bytes) + " bytes for " + std::to_string(documents) + " documents and " +
                   std::to_string(tokens) + " tokens, which need " +
                   (layout ? std::to_string(layout->file_bytes) : std::string("more than any corpus")) + ")");
  }
  if (get_le(p + 48, 8) != checksum64(p + kHeaderBytes, static_cast<std::size_t>(size - kHeaderBytes))) {
    return corrupt("payload checksum mismatch");
  }
  if (std::string_view(reinterpret_cast<const char*>(p + kHeaderBytes), key_bytes) != key) {
    return {Opened::Kind::kStale, "the data file or settings changed", {}};
  }
  // Sections are 8-byte aligned in a page-aligned mapping: the casts below
  // give naturally aligned arrays. The host is little-endian (checked by
  // the caller), like the file.
  const std::span<const std::int64_t> offsets(reinterpret_cast<const std::int64_t*>(p + layout->offsets_at),
                                              documents + 1);
  if (documents == 0) return corrupt("no documents");
  if (offsets.front() != 0 || offsets.back() != static_cast<std::int64_t>(tokens)) {
    return corrupt("document offsets do not span the tokens");
  }
  for (std::size_t d = 0; d < documents; ++d) {
    // The batcher needs BOS and EOS in every document.
    if (offsets[d + 1] - offsets[d] < 2) return corrupt("document " + std::to_string(d) + " is shorter than 2 tokens");
  }
  const std::span<const std::int32_t> ids(reinterpret_cast<const std::int32_t*>(p + layout->tokens_at), tokens);
  const std::span<const std::uint8_t> trained(p + layout->trained_at, tokens);
  const std::span<const float> values(reinterpret_cast<const float*>(p + layout->values_at), documents);
  return {Opened::Kind::kValid, "", TokenStore::from_views(std::move(map), ids, trained, offsets, values)};
}

Status write_all(int fd, const void* data, std::size_t size, Checksum64& sum, const std::string& file) {
  sum.update(data, size);
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::io_error(file + ": write failed: " + errno_text(errno));
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return Status::ok();
}

// Writes `data` followed by zeros up to a multiple of 8 bytes.
Status write_padded(int fd, const void* data, std::size_t size, Checksum64& sum, const std::string& file) {
  TAILOR_RETURN_IF_ERROR(write_all(fd, data, size, sum, file));
  static constexpr char kZeros[8] = {};
  return write_all(fd, kZeros, pad8(size) - size, sum, file);
}

Status write_body(int fd, const std::string& tmp, const std::string& key, const TokenStore& store) {
  unsigned char header[kHeaderBytes] = {};
  Checksum64 ignored;
  TAILOR_RETURN_IF_ERROR(write_all(fd, header, sizeof header, ignored, tmp));  // filled in below
  Checksum64 payload;
  const auto offsets = store.offsets();
  const auto tokens = store.all_tokens();
  const auto trained = store.all_trained();
  TAILOR_RETURN_IF_ERROR(write_padded(fd, key.data(), key.size(), payload, tmp));
  TAILOR_RETURN_IF_ERROR(write_padded(fd, offsets.data(), offsets.size_bytes(), payload, tmp));
  TAILOR_RETURN_IF_ERROR(write_padded(fd, tokens.data(), tokens.size_bytes(), payload, tmp));
  TAILOR_RETURN_IF_ERROR(write_padded(fd, trained.data(), trained.size_bytes(), payload, tmp));
  std::vector<float> values(store.documents(), 0.0f);
  for (std::size_t d = 0; d < values.size(); ++d)
    values[d] = store.value(d);
  TAILOR_RETURN_IF_ERROR(write_padded(fd, values.data(), values.size() * sizeof(float), payload, tmp));

  const auto layout = layout_of(key.size(), store.documents(), tokens.size());
  TAILOR_CHECK(layout.has_value());
  std::memcpy(header, kMagic, sizeof kMagic);
  put_le(header + 8, kTokenCacheVersion, 4);
  put_le(header + 12, kHeaderBytes, 4);
  put_le(header + 16, key.size(), 8);
  put_le(header + 24, store.documents(), 8);
  put_le(header + 32, tokens.size(), 8);
  put_le(header + 40, layout->file_bytes, 8);
  put_le(header + 48, payload.finish(), 8);
  put_le(header + 56, checksum64(header, 56), 8);
  if (::pwrite(fd, header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    return Status::io_error(tmp + ": write failed: " + errno_text(errno));
  }
  return Status::ok();
}

Status write_entry(const std::string& file, const std::string& key, const TokenStore& store) {
  std::string tmp = file + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return Status::io_error("cannot create " + tmp + ": " + errno_text(errno));
  ::fchmod(fd, 0644);  // mkstemp makes 0600; the entry holds nothing secret beyond the data file
  Status s = write_body(fd, tmp, key, store);
  if (::close(fd) != 0 && s.is_ok()) s = Status::io_error(tmp + ": close failed: " + errno_text(errno));
  if (s.is_ok() && ::rename(tmp.c_str(), file.c_str()) != 0) {
    s = Status::io_error("cannot rename " + tmp + " to " + file + ": " + errno_text(errno));
  }
  if (!s.is_ok()) ::unlink(tmp.c_str());
  return s;
}

// A field of the key: name=<length>:<value>, so no value can forge another.
void add_field(std::string& key, std::string_view name, std::string_view value) {
  key.append(name).append("=").append(std::to_string(value.size())).append(":").append(value).append("\n");
}

// The key without the file's size and mtime: what names the entry.
std::string entry_name_key(const FileIdentity& file, const dsl::DataSpec& spec, const Tokenizer& tok,
                           const ChatSetup* chat) {
  std::string key = "tailor token cache\n";
  add_field(key, "cache_version", std::to_string(kTokenCacheVersion));
  add_field(key, "dataset_version", std::to_string(kDatasetFormatVersion));
  add_field(key, "path", file.absolute_path);
  add_field(key, "format", dsl::to_string(spec.format));
  if (dsl::has_records_of_fields(spec.format)) {  // the fields mean nothing to text and tokens files
    add_field(key, "field", spec.field);
    add_field(key, "prompt_field", spec.prompt_field);
    add_field(key, "completion_field", spec.completion_field);
  }
  if (spec.preference) {  // two documents a pair; a prompt that fills seq_len is a bad record
    add_field(key, "preference", "prompt/chosen/rejected");
    add_field(key, "chosen_field", spec.chosen_field);
    add_field(key, "rejected_field", spec.rejected_field);
    add_field(key, "seq_len", std::to_string(spec.seq_len));
    add_field(key, "prompt_of", spec.unpaired ? "each row" : "both rows");
    add_field(key, "margin_field", spec.margin_field);
    // kto's labelled completions: one document a record, its label the value.
    if (dsl::is_labelled(spec)) add_field(key, "label_field", spec.label_field);
  }
  if (dsl::is_chat(spec) && chat != nullptr) {  // what a conversation renders to and trains
    add_field(key, "chat", dsl::to_string(spec.chat));
    for (const auto& [k, v] : spec.fields) add_field(key, "chat_field." + k, v);
    for (const auto& [k, v] : spec.roles) add_field(key, "chat_role." + k, v);
    add_field(key, "chat_template", chat->template_text);
    add_field(key, "chat_variables", chat->variables.dump());
    add_field(key, "train_on", dsl::to_string(chat->train_on));
    add_field(key, "train_on_eos", dsl::to_string(chat->train_on_eos));
  }
  add_field(key, "tokenizer", tok.fingerprint());
  return key;
}

}  // namespace

std::string default_token_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v == nullptr ? std::string() : std::string(v);
  };
  if (const std::string dir = env("TAILOR_CACHE_DIR"); !dir.empty()) return dir;
  // XDG Base Directory Specification: $XDG_CACHE_HOME, default $HOME/.cache.
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return (fs::path(xdg) / "tailor" / "tokens").string();
  if (const std::string home = env("HOME"); !home.empty()) {
    return (fs::path(home) / ".cache" / "tailor" / "tokens").string();
  }
  return {};
}

Result<TokenCacheEntryInfo> read_token_cache_entry_info(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::invalid_argument("cannot open: " + errno_text(errno));
  unsigned char header[kHeaderBytes];
  std::string key;
  const auto read_at = [&](void* to, std::size_t n, off_t at) {
    return ::pread(fd, to, n, at) == static_cast<ssize_t>(n);
  };
  const bool header_read = read_at(header, sizeof header, 0);
  const std::uint64_t key_bytes = header_read ? get_le(header + 16, 8) : 0;
  // A key is text of settings and a chat template: far below this.
  const bool key_sane = key_bytes <= (std::uint64_t{64} << 20);
  if (header_read && key_sane) {
    key.resize(static_cast<std::size_t>(key_bytes));
    if (!read_at(key.data(), key.size(), static_cast<off_t>(kHeaderBytes))) key.clear();
  }
  ::close(fd);
  if (!header_read) return Status::invalid_argument("truncated: shorter than the 64-byte header");
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) return Status::invalid_argument("not a token cache entry");
  if (get_le(header + 8, 4) != kTokenCacheVersion) {
    return Status::invalid_argument("format version " + std::to_string(get_le(header + 8, 4)) + ", not " +
                                    std::to_string(kTokenCacheVersion));
  }
  if (get_le(header + 56, 8) != checksum64(header, 56)) return Status::invalid_argument("header checksum mismatch");
  if (!key_sane || key.size() != key_bytes) return Status::invalid_argument("truncated key");
  TokenCacheEntryInfo info;
  info.documents = get_le(header + 24, 8);
  info.tokens = get_le(header + 32, 8);
  // The key's fields, each name=<length>:<value> on a line of its own.
  std::size_t at = key.find('\n');
  while (at != std::string::npos && at + 1 < key.size()) {
    const std::size_t eq = key.find('=', at + 1), colon = eq == std::string::npos ? eq : key.find(':', eq);
    if (colon == std::string::npos) break;
    const std::string name = key.substr(at + 1, eq - at - 1);
    const std::uint64_t length = std::strtoull(key.c_str() + eq + 1, nullptr, 10);
    if (length > key.size() - colon - 1) break;
    const std::string value = key.substr(colon + 1, static_cast<std::size_t>(length));
    if (name == "path") info.data_path = value;
    if (name == "format") info.format = value;
    at = colon + 1 + static_cast<std::size_t>(length);
  }
  if (info.data_path.empty()) return Status::invalid_argument("its key names no data file");
  return info;
}

std::string token_cache_key(const FileIdentity& file, const dsl::DataSpec& spec, const Tokenizer& tok,
                            const ChatSetup* chat) {
  std::string key = entry_name_key(file, spec, tok, chat);
  add_field(key, "size", std::to_string(file.size_bytes));
  add_field(key, "mtime_ns", std::to_string(file.mtime_ns));
  return key;
}

Result<TokenizedData> load_tokenized(const std::string& path, const dsl::DataSpec& spec, const Tokenizer& tok,
                                     const std::string& cache_dir, const ChatSetup* chat) {
  TokenizedData out;
  auto warn = [&](std::string message) {
    log_warning("token cache: " + message);
    out.warnings.push_back(std::move(message));
  };
  auto uncached = [&]() -> Result<TokenizedData> {
    TAILOR_ASSIGN_OR_RETURN(out.store, tokenize_file(path, spec, tok, chat, &out.skipped));
    out.source = TokenizedData::Source::kUncached;
    return std::move(out);
  };
  // The entry holds the host's arrays as they are in memory.
  if constexpr (std::endian::native != std::endian::little) return uncached();
  if (cache_dir.empty()) return uncached();

  TAILOR_ASSIGN_OR_RETURN(const FileIdentity before, file_identity(path));
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec) {
    warn("cannot create folder " + cache_dir + ": " + ec.message() + "; tokenizing in memory");
    return uncached();
  }
  const std::string key = token_cache_key(before, spec, tok, chat);
  const std::string file =
      (fs::path(cache_dir) / ("tokens-" + hex64(fnv1a64(entry_name_key(before, spec, tok, chat))) + ".bin")).string();

  Opened opened = open_entry(file, key);
  switch (opened.kind) {
    case Opened::Kind::kValid:
      out.store = std::move(opened.store);
      out.source = TokenizedData::Source::kCache;
      out.cache_file = file;
      // Its time of use, for the least-recently-used order of `tailor
      // cache prune`; a read-only cache folder keeps the old time.
      (void)::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);
      return out;
    case Opened::Kind::kCorrupt:
      warn(file + ": " + opened.why + "; ignoring it and tokenizing " + path + " again");
      break;
    case Opened::Kind::kStale:
      log_info("token cache: " + file + " is stale (" + opened.why + "); tokenizing " + path + " again");
      break;
    case Opened::Kind::kMissing:
      break;
  }

  TAILOR_ASSIGN_OR_RETURN(out.store, tokenize_file(path, spec, tok, chat, &out.skipped));
  out.source = TokenizedData::Source::kUncached;
  if (out.skipped.count > 0) {
    warn(path + ": " + std::to_string(out.skipped.count) + " bad records skipped (data.on_bad_record: skip); not "
         "caching it, so that every run reports them");
    return out;
  }
  // A file rewritten while we read it may have given a mix of old and new
  // content: usable this once, but not to be remembered under either key.
  const auto after = file_identity(path);
  if (!after.is_ok() || !(*after == before)) {
    warn(path + " changed while being tokenized; not caching it");
    return out;
  }
  if (Status s = write_entry(file, key, out.store); !s.is_ok()) {
    warn(s.message() + "; continuing without a cache");
    return out;
  }
  out.source = TokenizedData::Source::kTokenized;
  out.cache_file = file;
  return out;
}

}  // namespace tailor::runner::data
