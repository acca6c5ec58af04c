#include "runner/io/cache_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <system_error>

#include "runner/data/token_cache.h"
#include "runner/io/logp_cache.h"

namespace tailor::runner::io {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSecond = 1'000'000'000;

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The kind of a file of Tailor's name; nothing for any other file.
std::optional<CacheEntryKind> kind_of(const std::string& name) {
  const bool tokens = starts_with(name, "tokens-"), reference = starts_with(name, "reference-");
  if (!tokens && !reference) return std::nullopt;
  const std::string ext = tokens ? ".bin" : ".logps";
  if (ends_with(name, ext)) return tokens ? CacheEntryKind::kTokens : CacheEntryKind::kReference;
  // token_cache.cpp's mkstemp names and logp_cache.cpp's per-process ones.
  if (name.find(ext + ".tmp-") != std::string::npos || name.find(ext + ".part-") != std::string::npos) {
    return CacheEntryKind::kPartial;
  }
  return std::nullopt;
}

// The identity's lines after its title, joined: "weights ..., dtype ...".
std::string reference_summary(const std::string& identity) {
  std::string out;
  std::size_t at = identity.find('\n');
  while (at != std::string::npos && at + 1 < identity.size()) {
    const std::size_t end = identity.find('\n', at + 1);
    const std::string line = identity.substr(at + 1, end == std::string::npos ? end : end - at - 1);
    if (!line.empty()) out += (out.empty() ? "" : ", ") + line;
    at = end;
  }
  return out;
}

// Its size and modification time (ns since the epoch), from one stat;
// false when it is gone or is not a regular file.
bool stat_entry(CacheEntry& e) {
  struct stat st {};
  if (::stat(e.file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  e.bytes = static_cast<std::uint64_t>(st.st_size);
  e.last_used_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * kSecond + st.st_mtim.tv_nsec;
  return true;
}

std::string format_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, v < 10 && std::fmod(v, 1.0) != 0 ? "%.1f" : "%.0f", v);
  return text;
}

}  // namespace

const char* to_string(CacheEntryKind k) {
  switch (k) {
    case CacheEntryKind::kTokens: return "tokens";
    case CacheEntryKind::kReference: return "reference";
    case CacheEntryKind::kPartial: return "partial";
  }
  return "?";
}

Result<std::vector<CacheEntry>> list_cache(const std::string& dir) {
  std::vector<CacheEntry> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  fs::directory_iterator it(dir, ec);
  if (ec) return Status::io_error("cannot read the cache folder " + dir + ": " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return Status::io_error("cannot read the cache folder " + dir + ": " + ec.message());
    const std::string name = it->path().filename().string();
    const auto kind = kind_of(name);
    if (!kind) continue;
    CacheEntry e;
    e.file = it->path().string();
    e.kind = *kind;
    // Gone between the listing and the look (another prune, a rename), or not a file.
    if (!stat_entry(e)) continue;
    std::error_code file_ec;
    if (e.kind == CacheEntryKind::kTokens) {
      auto info = data::read_token_cache_entry_info(e.file);
      if (info.is_ok()) {
        e.data_path = info->data_path;
        e.documents = info->documents;
        e.tokens = info->tokens;
        e.data_missing = !fs::exists(e.data_path, file_ec) && !file_ec;
      } else {
        e.problem = info.status().message();
      }
    } else if (e.kind == CacheEntryKind::kReference) {
      auto info = read_logp_cache_info(e.file);
      if (info.is_ok()) {
        e.pairs = info->pairs;
        e.reference = reference_summary(info->identity);
      } else {
        e.problem = info.status().message();
      }
    }
    out.push_back(std::move(e));
  }
  std::sort(out.begin(), out.end(), [](const CacheEntry& a, const CacheEntry& b) {
    return a.last_used_ns != b.last_used_ns ? a.last_used_ns > b.last_used_ns : a.file < b.file;
  });
  return out;
}

PruneResult prune_cache(const std::vector<CacheEntry>& entries, const PruneRules& rules, std::int64_t now_ns,
                        bool dry_run) {
  PruneResult out;
  std::vector<const CacheEntry*> rest;
  const auto remove = [&](const CacheEntry& e, std::string why) {
    std::error_code ec;
    if (!dry_run && !fs::remove(e.file, ec) && ec) {
      out.errors.push_back(e.file + ": " + ec.message());
      out.kept.push_back(e);
      return;
    }
    out.removed.push_back({e, std::move(why)});
  };
  for (const CacheEntry& e : entries) {
    const std::int64_t age = now_ns - e.last_used_ns;
    if (e.kind == CacheEntryKind::kPartial) {
      // A writer at work keeps its file; one older than the grace stopped.
      if (age > rules.partial_grace_ns) {
        remove(e, "left by a writer that stopped " + format_age(age) + " ago");
      } else {
        out.kept.push_back(e);
      }
    } else if (rules.all) {
      remove(e, "clear");
    } else if (!e.problem.empty()) {
      remove(e, "unreadable (" + e.problem + ")");
    } else if (rules.orphaned && e.data_missing) {
      remove(e, "its data file " + e.data_path + " is gone");
    } else if (rules.unused_for_ns && age > *rules.unused_for_ns) {
      remove(e, "unused for " + format_age(age));
    } else {
      rest.push_back(&e);
    }
  }
  // Least recently used first until what is left fits (`entries` come most
  // recently used first, so from the back).
  std::uint64_t total = 0;
  for (const CacheEntry* e : rest)
    total += e->bytes;
  std::vector<bool> evicted(rest.size(), false);
  if (rules.max_bytes) {
    for (std::size_t i = rest.size(); i-- > 0 && total > *rules.max_bytes;) {
      total -= rest[i]->bytes;
      evicted[i] = true;
    }
  }
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (evicted[i]) {
      remove(*rest[i], "least recently used beyond the size limit");
    } else {
      out.kept.push_back(*rest[i]);
    }
  }
  return out;
}

Result<std::int64_t> parse_age(const std::string& text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9')
    ++digits;
  const std::string unit = text.substr(digits);
  std::int64_t scale = 0;
  if (unit == "d") scale = 86400;
  if (unit == "h") scale = 3600;
  if (unit == "m") scale = 60;
  if (unit == "s") scale = 1;
  const std::int64_t most = std::numeric_limits<std::int64_t>::max() / kSecond / std::max<std::int64_t>(scale, 1);
  if (digits == 0 || digits > 12 || scale == 0 || std::stoll(text.substr(0, digits)) > most) {
    return Status::invalid_argument("\"" + text + "\" is not an age: a whole number and d, h, m or s (30d, 12h)");
  }
  return std::stoll(text.substr(0, digits)) * scale * kSecond;
}

std::string format_age(std::int64_t ns) {
  const double s = static_cast<double>(ns) / static_cast<double>(kSecond);
  if (s >= 2 * 86400.0) return format_number(s / 86400.0) + " days";
  if (s >= 2 * 3600.0) return format_number(s / 3600.0) + " hours";
  if (s >= 2 * 60.0) return format_number(s / 60.0) + " minutes";
  const double whole = std::round(std::max(0.0, s));
  return format_number(whole) + (whole == 1 ? " second" : " seconds");
}

}  // namespace tailor::runner::io
