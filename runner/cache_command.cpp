#include "runner/cache_command.h"

#include <chrono>
#include <ostream>

#include <nlohmann/json.hpp>

#include "core/units.h"
#include "runner/data/token_cache.h"
#include "runner/io/cache_folder.h"

namespace tailor::runner {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kHelp = R"(usage: tailor cache show [--cache-dir DIR] [--output text|json]
       tailor cache prune [--max-size SIZE] [--unused-for AGE] [--orphaned] [--dry-run]
                          [--cache-dir DIR] [--output text|json]
       tailor cache clear [--dry-run] [--cache-dir DIR] [--output text|json]

The cache folder holds each data file tokenized (tokens-*.bin, read again
by every job on the same file and settings) and precomputed DPO
references' log-probabilities (reference-*.logps). Nothing in it is ever
needed: a job that misses an entry tokenizes or scores again.

show lists the entries, most recently used first: size, when last used
(written or read by a job), and what each holds (the data file, and
whether it is gone; a reference's pairs and weights).

prune removes, least recently used first:
  --max-size SIZE   entries until the rest fit in SIZE (e.g. 20GiB)
  --unused-for AGE  entries no job has used for longer than AGE (30d, 12h)
  --orphaned        token entries whose data file is gone (no job can
                    read them again: the file's path is part of the key)
At least one of them; unreadable entries and files left by writers that
stopped over an hour ago go as well.

clear removes every entry.

Only files of Tailor's names are removed, never a writer's file of the
last hour. Jobs running meanwhile keep what they have open.

options:
  --cache-dir DIR   the folder (default: $TAILOR_CACHE_DIR, else
                    $XDG_CACHE_HOME/tailor/tokens, else
                    ~/.cache/tailor/tokens: tailor-runner's)
  --dry-run         say what would be removed, remove nothing
  --output FORMAT   text (default) or json
  -h, --help        this help

exit codes: 0 done, 1 the folder or an entry could not be read or
removed, 2 bad command line
)";

int usage(std::ostream& err, const std::string& why) {
  err << "tailor cache: " << why << "\n\n" << kHelp;
  return 2;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string size_text(std::uint64_t bytes) { return Bytes(static_cast<std::int64_t>(bytes)).to_string(); }

// What an entry holds, in a few words.
std::string holds(const io::CacheEntry& e) {
  if (!e.problem.empty()) return "unreadable: " + e.problem;
  switch (e.kind) {
    case io::CacheEntryKind::kTokens:
      return e.data_path + " (" + format_count(static_cast<double>(e.documents)) +
             (e.documents == 1 ? " document, " : " documents, ") + format_count(static_cast<double>(e.tokens)) +
             " tokens" + (e.data_missing ? "; the file is gone" : "") + ")";
    case io::CacheEntryKind::kReference: return format_count(static_cast<double>(e.pairs)) + " pairs; " + e.reference;
    case io::CacheEntryKind::kPartial: return "being written, or left by a writer that stopped";
  }
  return "";
}

Json entry_json(const io::CacheEntry& e, std::int64_t now) {
  Json j = {{"file", e.file},
            {"kind", io::to_string(e.kind)},
            {"bytes", e.bytes},
            {"last_used", static_cast<double>(e.last_used_ns) / 1e9},
            {"unused_seconds", static_cast<double>(now - e.last_used_ns) / 1e9}};
  if (e.kind == io::CacheEntryKind::kTokens && e.problem.empty()) {
    j["data_path"] = e.data_path;
    j["data_missing"] = e.data_missing;
    j["documents"] = e.documents;
    j["tokens"] = e.tokens;
  }
  if (e.kind == io::CacheEntryKind::kReference && e.problem.empty()) {
    j["pairs"] = e.pairs;
    j["reference"] = e.reference;
  }
  if (!e.problem.empty()) j["problem"] = e.problem;
  return j;
}

std::uint64_t total_bytes(const std::vector<io::CacheEntry>& entries) {
  std::uint64_t n = 0;
  for (const auto& e : entries)
    n += e.bytes;
  return n;
}

}  // namespace

int run_cache_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty()) return usage(err, "missing command (show, prune or clear)");
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    out << kHelp;
    return 0;
  }
  const std::string command = args[0];
  if (command != "show" && command != "prune" && command != "clear") {
    return usage(err, "unknown command '" + command + "' (the commands are show, prune and clear)");
  }
  std::string dir = data::default_token_cache_dir(), output = "text";
  io::PruneRules rules;
  rules.all = command == "clear";
  bool dry_run = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool takes_value = a == "--cache-dir" || a == "--output" || a == "--max-size" || a == "--unused-for";
    if (a == "--help" || a == "-h") {
      out << kHelp;
      return 0;
    }
    if (!takes_value && a != "--orphaned" && a != "--dry-run") {
      return usage(err, a.rfind('-', 0) == 0 ? "unknown option " + a : "unexpected argument '" + a + "'");
    }
    if ((a == "--max-size" || a == "--unused-for" || a == "--orphaned") && command != "prune") {
      return usage(err, a + " is prune's");
    }
    if (a == "--dry-run" && command == "show") return usage(err, "--dry-run is prune's and clear's");
    if (!takes_value) {
      (a == "--orphaned" ? rules.orphaned : dry_run) = true;
      continue;
    }
    if (i + 1 >= args.size()) return usage(err, a + " needs a value");
    const std::string& v = args[++i];
    if (a == "--cache-dir") {
      dir = v;
    } else if (a == "--output") {
      if (v != "text" && v != "json") return usage(err, "--output must be text or json, got '" + v + "'");
      output = v;
    } else if (a == "--max-size") {
      auto size = parse_bytes(v);
      if (!size.is_ok()) return usage(err, "--max-size: " + size.status().message());
      rules.max_bytes = static_cast<std::uint64_t>(size->count());
    } else {
      auto age = io::parse_age(v);
      if (!age.is_ok()) return usage(err, "--unused-for: " + age.status().message());
      rules.unused_for_ns = *age;
    }
  }
  if (command == "prune" && !rules.max_bytes && !rules.unused_for_ns && !rules.orphaned) {
    return usage(err, "prune needs --max-size, --unused-for or --orphaned");
  }
  if (dir.empty()) {
    err << "tailor cache: no cache folder: none of TAILOR_CACHE_DIR, XDG_CACHE_HOME and HOME is set; give "
           "--cache-dir\n";
    return 1;
  }
  auto entries = io::list_cache(dir);
  if (!entries.is_ok()) {
    err << "tailor cache: " << entries.status().message() << "\n";
    return 1;
  }
  const std::int64_t now = now_ns();
  if (command == "show") {
    if (output == "json") {
      Json list = Json::array();
      for (const auto& e : *entries)
        list.push_back(entry_json(e, now));
      out << Json{{"folder", dir}, {"entries", list}, {"bytes", total_bytes(*entries)}}.dump(2) << "\n";
      return 0;
    }
    out << "Cache folder " << dir << ": " << entries->size() << (entries->size() == 1 ? " entry, " : " entries, ")
        << size_text(total_bytes(*entries)) << "\n";
    for (const auto& e : *entries) {
      char line[96];
      std::snprintf(line, sizeof line, "  %-9s %11s  used %s ago  ", io::to_string(e.kind), size_text(e.bytes).c_str(),
                    io::format_age(now - e.last_used_ns).c_str());
      out << line << holds(e) << "\n";
    }
    return 0;
  }
  const io::PruneResult result = io::prune_cache(*entries, rules, now, dry_run);
  std::uint64_t removed_bytes = 0;
  for (const auto& r : result.removed)
    removed_bytes += r.entry.bytes;
  if (output == "json") {
    Json removed = Json::array();
    for (const auto& r : result.removed) {
      removed.push_back(
          {{"file", r.entry.file}, {"kind", io::to_string(r.entry.kind)}, {"bytes", r.entry.bytes}, {"why", r.why}});
    }
    out << Json{{"folder", dir},
                {"dry_run", dry_run},
                {"removed", removed},
                {"removed_bytes", removed_bytes},
                {"kept", result.kept.size()},
                {"kept_bytes", total_bytes(result.kept)},
                {"errors", result.errors}}
               .dump(2)
        << "\n";
  } else {
    for (const auto& r : result.removed) {
      out << (dry_run ? "would remove " : "removed ") << r.entry.file << " (" << size_text(r.entry.bytes)
          << "): " << r.why << "\n";
    }
    out << (dry_run ? "Would remove " : "Removed ") << result.removed.size()
        << (result.removed.size() == 1 ? " entry" : " entries") << " (" << size_text(removed_bytes) << "); "
        << result.kept.size() << " kept (" << size_text(total_bytes(result.kept)) << ") in " << dir << "\n";
  }
  for (const std::string& e : result.errors)
    err << "tailor cache: cannot remove " << e << "\n";
  return result.errors.empty() ? 0 : 1;
}

}  // namespace tailor::runner
