#include "dsl/table_records.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "dsl/owned_fd.h"
#include "dsl/shared_module.h"
#include "dsl/table_module.h"

namespace tailor::dsl {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModuleFile = "libtailor_tables.so";

// Loaded once, never closed (dsl/shared_module.h). RTLD_DEEPBIND: Arrow
// binds to its own bundled libraries, not to same-named symbols of
// LibTorch's in a runner.
Result<const TailorTablesApi*> load_module() {
  static const Result<const TailorTablesApi*> loaded = []() -> Result<const TailorTablesApi*> {
    const auto entry = open_shared_module(
        kModuleFile, TAILOR_TABLES_MODULE_PATH, "tailor_tables_api", [](void* symbol) -> const void* {
          const auto api = reinterpret_cast<const TailorTablesApi* (*)()>(symbol)();
          return api != nullptr && api->abi_version == kTailorTablesAbiVersion ? api : nullptr;
        });
    if (entry.is_ok()) return static_cast<const TailorTablesApi*>(*entry);
    const std::string& tried = entry.status().message();
    return Status::failed_precondition(
        "reading Parquet and Arrow data needs " + std::string(kModuleFile) +
        ", built where the Python environment has pyarrow (scripts/setup installs it); tried:" +
        (tried.empty() ? std::string(" nothing (this build has no such module)") : tried));
  }();  // thread-safe once
  return loaded;
}

Result<int> open_plain(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status::not_found(path + ": does not exist");
    return Status::io_error(path + ": cannot be read: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid_argument(path + ": not a regular file");
  }
  return fd;
}

Result<std::string> read_small(const std::string& path, const DataFileOpener& open) {
  TAILOR_ASSIGN_OR_RETURN(const int raw, open ? open(path) : open_plain(path));
  const OwnedFd fd(raw);
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::io_error(path + ": cannot be read: " + std::strerror(errno));
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > (16u << 20)) return Status::invalid_argument(path + ": larger than 16 MiB");
  }
}

// One opened table file; closed when it goes.
class TableFile {
 public:
  static Result<TableFile> open(const TailorTablesApi* api, const std::string& path, DataFormat format,
                                const DataFileOpener& opener) {
    TAILOR_ASSIGN_OR_RETURN(const int raw, opener ? opener(path) : open_plain(path));
    const OwnedFd fd(raw);
    char error[1024] = {};
    void* t = api->open(fd.get(), format == DataFormat::kParquet ? kTailorTableParquet : kTailorTableArrow, error,
                        sizeof error);
    if (t == nullptr) {
      return Status::invalid_argument(path + ": not a readable " + std::string(to_string(format)) + " file: " + error);
    }
    return TableFile(api, t);
  }
  TableFile(TableFile&& o) noexcept : api_(o.api_), t_(std::exchange(o.t_, nullptr)) {}
  TableFile& operator=(TableFile&&) = delete;
  ~TableFile() {
    if (t_ != nullptr) api_->close(t_);
  }
  void* get() const { return t_; }

 private:
  TableFile(const TailorTablesApi* api, void* t) : api_(api), t_(t) {}
  const TailorTablesApi* api_;
  void* t_;
};

std::string dataset_dict_error(const std::string& path, const std::string& json_text) {
  std::string splits;
  std::string first = "train";
  try {
    const auto j = nlohmann::json::parse(json_text);
    if (j.contains("splits") && j["splits"].is_array()) {
      for (const auto& s : j["splits"]) {
        if (!s.is_string()) continue;
        if (splits.empty()) first = s.get<std::string>();
        splits += (splits.empty() ? "" : ", ") + s.get<std::string>();
      }
    }
  } catch (const nlohmann::json::exception&) {
  }
  if (splits.find("train") != std::string::npos) first = "train";
  return path + ": a DatasetDict saved with save_to_disk (splits: " + (splits.empty() ? "unknown" : splits) +
         "); point the data at one split's folder, e.g. " + (fs::path(path) / first).string();
}

}  // namespace

Result<std::vector<std::string>> table_files(const std::string& path, DataFormat format, const DataFileOpener& open) {
  if (format != DataFormat::kParquet && format != DataFormat::kArrow) {
    return Status::internal(path + ": not a table format");
  }
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) return Status::not_found(path + ": does not exist");
  if (!fs::is_directory(status)) return std::vector<std::string>{path};
  if (format == DataFormat::kParquet) {
    return Status::invalid_argument(path + ": is a folder; data.format parquet reads one .parquet file");
  }
  const fs::path dir(path);
  if (!fs::exists(dir / "state.json", ec)) {
    if (fs::exists(dir / "dataset_dict.json", ec)) {
      auto text = read_small((dir / "dataset_dict.json").string(), open);
      return Status::invalid_argument(dataset_dict_error(path, text.is_ok() ? *text : std::string()));
    }
    return Status::invalid_argument(path +
                                    ": a folder without state.json, so not one saved with datasets' "
                                    "save_to_disk; point the data at an .arrow or .parquet file or such a folder");
  }
  const std::string state_path = (dir / "state.json").string();
  TAILOR_ASSIGN_OR_RETURN(const std::string state_text, read_small(state_path, open));
  std::vector<std::string> files;
  try {
    const auto state = nlohmann::json::parse(state_text);
    const auto it = state.find("_data_files");
    if (it == state.end() || !it->is_array()) {
      return Status::invalid_argument(state_path + ": no \"_data_files\" list (not written by datasets' save_to_disk)");
    }
    for (const auto& f : *it) {
      if (!f.is_object() || !f.contains("filename") || !f["filename"].is_string()) {
        return Status::invalid_argument(state_path + ": an entry of \"_data_files\" without a \"filename\"");
      }
      const fs::path name(f["filename"].get<std::string>());
      if (name.empty() || name.is_absolute() || name.filename() != name) {
        return Status::invalid_argument(state_path + ": data file " + quote(name.string()) +
                                        " is not a file name in the folder");
      }
      files.push_back((dir / name).string());
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(state_path + ": not valid JSON: " + e.what());
  }
  if (files.empty()) return Status::invalid_argument(state_path + ": \"_data_files\" lists no file");
  return files;
}

Status for_each_table_record(const std::string& path, const DataSpec& spec, const DataRecordFn& fn,
                             std::int64_t max_records, const DataSkipFn& skip, const DataFileOpener& open) {
  TAILOR_ASSIGN_OR_RETURN(const TailorTablesApi* api, load_module());
  TAILOR_ASSIGN_OR_RETURN(const std::vector<std::string> files, table_files(path, spec.format, open));
  const bool folder = files.size() > 1 || files.front() != path;
  const char* group_word = spec.format == DataFormat::kParquet ? "row group " : "record batch ";
  std::int64_t row = 0, delivered = 0;
  for (const std::string& file : files) {
    TAILOR_ASSIGN_OR_RETURN(TableFile table, TableFile::open(api, file, spec.format, open));
    const std::string file_label = folder ? fs::path(file).filename().string() + ", " : std::string();
    for (std::int64_t group = 0;; ++group) {
      struct Walk {
        const std::string* path;
        const std::string* label;
        const char* group_word;
        std::int64_t group;
        std::int64_t* row;
        std::int64_t* delivered;
        std::int64_t max_records;
        const DataSpec* spec;
        const DataRecordFn* fn;
        const DataSkipFn* skip;
        Status status;
      } walk{&path, &file_label, group_word, group, &row, &delivered, max_records, &spec, &fn, &skip, Status::ok()};
      const TailorTableRowSink sink = [](void* ctx, const char* json, std::size_t size, std::int64_t in_group) {
        auto& w = *static_cast<Walk*>(ctx);
        const std::string where = *w.path + ": row " + group_thousands(*w.row) + " (" + *w.label + w.group_word +
                                  std::to_string(w.group) + ", row " + std::to_string(in_group) + " in it)";
        ++*w.row;
        w.status = deliver_record_json(std::string_view(json, size), *w.row, where, *w.spec, *w.fn, *w.skip);
        if (!w.status.is_ok()) return 1;
        return w.max_records > 0 && ++*w.delivered >= w.max_records ? 1 : 0;
      };
      std::int64_t error_row = -1;
      char error[1024] = {};
      const int got = api->next_group(table.get(), sink, &walk, &error_row, error, sizeof error);
      if (got == 0) break;
      if (got == 2) return walk.status;  // an error, or enough records
      if (got < 0) {
        // Rows of the group before error_row were delivered: `row` is the
        // failing one's number.
        std::string where = path + ": " + file_label + group_word + std::to_string(group);
        if (error_row >= 0) {
          where = path + ": row " + group_thousands(row) + " (" + file_label + group_word + std::to_string(group) +
                  ", row " + std::to_string(error_row) + " in it)";
        }
        return Status::invalid_argument(where + ": " + error);
      }
    }
  }
  return Status::ok();
}

Result<std::vector<std::string>> table_columns(const std::string& path, DataFormat format, const DataFileOpener& open) {
  TAILOR_ASSIGN_OR_RETURN(const TailorTablesApi* api, load_module());
  TAILOR_ASSIGN_OR_RETURN(const std::vector<std::string> files, table_files(path, format, open));
  TAILOR_ASSIGN_OR_RETURN(TableFile table, TableFile::open(api, files.front(), format, open));
  std::vector<std::string> columns;
  api->columns(
      table.get(),
      [](void* ctx, const char* text, std::size_t size) {
        static_cast<std::vector<std::string>*>(ctx)->emplace_back(text, size);
      },
      &columns);
  return columns;
}

Result<DataFileFacts> check_table_data(const std::string& path, const DataSpec& spec) {
  TAILOR_ASSIGN_OR_RETURN(const TailorTablesApi* api, load_module());
  TAILOR_ASSIGN_OR_RETURN(const std::vector<std::string> files, table_files(path, spec.format));
  DataFileFacts facts;
  facts.path = path;
  facts.format = spec.format;
  facts.records = 0;
  for (const std::string& file : files) {
    std::error_code ec;
    facts.bytes += fs::file_size(file, ec);
    TAILOR_ASSIGN_OR_RETURN(TableFile table, TableFile::open(api, file, spec.format, {}));
    char error[1024] = {};
    const std::int64_t rows = api->rows(table.get(), error, sizeof error);
    if (rows < 0) return Status::invalid_argument(file + ": cannot count its rows: " + error);
    facts.records += rows;
  }
  std::int64_t with_content = 0;
  const DataSkipFn skipped = [&](const Status& why) {
    if (facts.skipped++ == 0) facts.first_skipped = why.message();
  };
  TAILOR_RETURN_IF_ERROR(for_each_table_record(
      path, spec,
      [&](const DataRecord& r) {
        ++facts.checked;
        if (!r.prompt.empty() || !r.text.empty() || !r.conversation.empty() || !r.chosen.empty()) ++with_content;
        return Status::ok();
      },
      kCheckedRecords, skipped));
  facts.all_checked = facts.checked + facts.skipped >= facts.records;
  if (facts.records == 0) return Status::invalid_argument(path + ": has no rows");
  if (facts.all_checked && with_content == 0) {
    return Status::invalid_argument(path + ": no documents (all " + group_thousands(facts.checked) +
                                    " rows are empty)");
  }
  return facts;
}

}  // namespace tailor::dsl
