// libtailor_tables.so: table_module.h's functions over Arrow and Parquet.
// A row becomes the JSON object a `datasets` user sees as ds[i]: strings,
// numbers, booleans and nulls as themselves, lists as arrays, structs as
// objects (so a `messages` column of list<struct<role, content>> is the
// OpenAI form), dictionary-encoded columns as their values. Columns of other
// types (binary, temporal, maps, ...) read as null: no record field the
// readers use can be of those types, and a spec naming one gets the
// record reader's "not a string" error for it. No exception leaves it.
#include "dsl/table_module.h"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/io/memory.h>
#include <arrow/ipc/reader.h>
#include <parquet/arrow/reader.h>
#include <parquet/exception.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "core/text.h"

namespace {

void copy_error(const std::string& message, char* error, std::size_t error_size) {
  if (error == nullptr || error_size == 0) return;
  const std::size_t n = std::min(message.size(), error_size - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

// Thrown inside the module only, caught at its C boundary: a file that
// cannot be read, or a value of the row being converted that is bad.
struct TableError {
  std::string message;
};
struct RowError {
  std::string message;
};

template <typename T>
T value_or_throw(arrow::Result<T> r) {
  if (!r.ok()) throw TableError{r.status().message()};
  return std::move(r).ValueUnsafe();
}
void ok_or_throw(const arrow::Status& s) {
  if (!s.ok()) throw TableError{s.message()};
}

// Where a UTF-8 sequence of `s` is invalid, or npos (RFC 3629: no overlong
// forms, no surrogates, nothing past U+10FFFF).
std::size_t invalid_utf8_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = tailor::utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

void append_string(std::string& out, std::string_view s, const std::string& column) {
  if (const std::size_t bad = invalid_utf8_at(s); bad != std::string_view::npos) {
    throw RowError{"column \"" + column + "\": not valid UTF-8 (byte " + std::to_string(bad) + " of the value)"};
  }
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void append_double(std::string& out, double v) {
  if (!std::isfinite(v)) {  // JSON has no NaN or infinity; Python's json would write NaN, which is not JSON
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}

void append_value(std::string& out, const arrow::Array& a, std::int64_t i, const std::string& column);

template <typename ListArray>
void append_list(std::string& out, const ListArray& a, std::int64_t i, const std::string& column) {
  const auto values = a.values();
  const std::int64_t begin = a.value_offset(i), end = begin + a.value_length(i);
  out += '[';
  for (std::int64_t k = begin; k < end; ++k) {
    if (k > begin) out += ',';
    append_value(out, *values, k, column);
  }
  out += ']';
}

void append_value(std::string& out, const arrow::Array& a, std::int64_t i, const std::string& column) {
  using arrow::Type;
  if (a.IsNull(i)) {
    out += "null";
    return;
  }
  switch (a.type_id()) {
    case Type::BOOL: out += static_cast<const arrow::BooleanArray&>(a).Value(i) ? "true" : "false"; return;
    case Type::INT8: out += std::to_string(static_cast<const arrow::Int8Array&>(a).Value(i)); return;
    case Type::INT16: out += std::to_string(static_cast<const arrow::Int16Array&>(a).Value(i)); return;
    case Type::INT32: out += std::to_string(static_cast<const arrow::Int32Array&>(a).Value(i)); return;
    case Type::INT64: out += std::to_string(static_cast<const arrow::Int64Array&>(a).Value(i)); return;
    case Type::UINT8: out += std::to_string(static_cast<const arrow::UInt8Array&>(a).Value(i)); return;
    case Type::UINT16: out += std::to_string(static_cast<const arrow::UInt16Array&>(a).Value(i)); return;
    case Type::UINT32: out += std::to_string(static_cast<const arrow::UInt32Array&>(a).Value(i)); return;
    case Type::UINT64: out += std::to_string(static_cast<const arrow::UInt64Array&>(a).Value(i)); return;
    case Type::FLOAT: append_double(out, static_cast<const arrow::FloatArray&>(a).Value(i)); return;
    case Type::DOUBLE: append_double(out, static_cast<const arrow::DoubleArray&>(a).Value(i)); return;
    case Type::STRING: append_string(out, static_cast<const arrow::StringArray&>(a).GetView(i), column); return;
    case Type::LARGE_STRING:
      append_string(out, static_cast<const arrow::LargeStringArray&>(a).GetView(i), column);
      return;
    case Type::STRING_VIEW:
      append_string(out, static_cast<const arrow::StringViewArray&>(a).GetView(i), column);
      return;
    case Type::LIST: append_list(out, static_cast<const arrow::ListArray&>(a), i, column); return;
    case Type::LARGE_LIST: append_list(out, static_cast<const arrow::LargeListArray&>(a), i, column); return;
    case Type::FIXED_SIZE_LIST: append_list(out, static_cast<const arrow::FixedSizeListArray&>(a), i, column); return;
    case Type::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(a);
      const auto& type = static_cast<const arrow::StructType&>(*s.type());
      out += '{';
      for (int f = 0; f < type.num_fields(); ++f) {
        if (f > 0) out += ',';
        const std::string& name = type.field(f)->name();
        append_string(out, name, column);
        out += ':';
        append_value(out, *s.field(f), i, column + "." + name);
      }
      out += '}';
      return;
    }
    case Type::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(a);
      append_value(out, *d.dictionary(), d.GetValueIndex(i), column);
      return;
    }
    default: out += "null"; return;
  }
}

// A table read group by group (a Parquet row group, an Arrow record
// batch), each group a few batches at a time, so a file of any size reads
// in the memory of one batch and a walk that stops early reads no further.
class Table {
 public:
  virtual ~Table() = default;
  virtual std::int64_t rows() = 0;
  virtual std::shared_ptr<arrow::Schema> schema() = 0;
  // Moves to the next group; false at the end.
  virtual bool next_group() = 0;
  // The group's next batch; null at its end.
  virtual std::shared_ptr<arrow::RecordBatch> next_batch() = 0;
};

// Rows per batch read from a Parquet row group (Arrow's default is 65,536:
// a few hundred MB of conversations).
constexpr std::int64_t kParquetBatchRows = 4096;

class ParquetTable final : public Table {
 public:
  explicit ParquetTable(std::shared_ptr<arrow::io::RandomAccessFile> file) {
    parquet::arrow::FileReaderBuilder builder;
    ok_or_throw(builder.Open(std::move(file)));
    parquet::ArrowReaderProperties properties;
    properties.set_batch_size(kParquetBatchRows);
    reader_ = value_or_throw(builder.properties(properties)->Build());
  }
  std::int64_t rows() override { return reader_->parquet_reader()->metadata()->num_rows(); }
  std::shared_ptr<arrow::Schema> schema() override {
    std::shared_ptr<arrow::Schema> s;
    ok_or_throw(reader_->GetSchema(&s));
    return s;
  }
  bool next_group() override {
    if (group_ >= reader_->num_row_groups()) return false;
    batches_ = value_or_throw(reader_->GetRecordBatchReader({group_++}));
    return true;
  }
  std::shared_ptr<arrow::RecordBatch> next_batch() override {
    std::shared_ptr<arrow::RecordBatch> batch;
    ok_or_throw(batches_->ReadNext(&batch));
    return batch;
  }

 private:
  std::unique_ptr<parquet::arrow::FileReader> reader_;
  std::unique_ptr<arrow::RecordBatchReader> batches_;  // the current row group's
  int group_ = 0;
};

// An Arrow IPC stream (what datasets' save_to_disk writes) or IPC file
// (Feather v2), memory-mapped as datasets maps it: a group is a record
// batch, a view into the mapping.
class ArrowTable final : public Table {
 public:
  explicit ArrowTable(std::shared_ptr<arrow::io::MemoryMappedFile> file) : file_(std::move(file)) {
    char magic[6] = {};
    const std::int64_t got = value_or_throw(file_->ReadAt(0, 6, magic));
    is_file_ = got == 6 && std::memcmp(magic, "ARROW1", 6) == 0;
    if (is_file_) {
      file_reader_ = value_or_throw(arrow::ipc::RecordBatchFileReader::Open(file_));
    } else {
      stream_ = value_or_throw(arrow::ipc::RecordBatchStreamReader::Open(stream_at_start()));
    }
  }
  std::int64_t rows() override {
    if (is_file_) return value_or_throw(file_reader_->CountRows());
    // The batches of a mapped file are views: counting them reads headers.
    auto reader = value_or_throw(arrow::ipc::RecordBatchStreamReader::Open(stream_at_start()));
    std::int64_t n = 0;
    std::shared_ptr<arrow::RecordBatch> batch;
    while (true) {
      ok_or_throw(reader->ReadNext(&batch));
      if (!batch) return n;
      n += batch->num_rows();
    }
  }
  std::shared_ptr<arrow::Schema> schema() override { return is_file_ ? file_reader_->schema() : stream_->schema(); }
  bool next_group() override {
    if (is_file_) {
      if (batch_ >= file_reader_->num_record_batches()) return false;
      pending_ = value_or_throw(file_reader_->ReadRecordBatch(batch_++));
      return true;
    }
    ok_or_throw(stream_->ReadNext(&pending_));
    return pending_ != nullptr;
  }
  std::shared_ptr<arrow::RecordBatch> next_batch() override { return std::exchange(pending_, nullptr); }

 private:
  std::shared_ptr<arrow::io::InputStream> stream_at_start() {
    return std::make_shared<arrow::io::BufferReader>(
        value_or_throw(file_->ReadAt(0, value_or_throw(file_->GetSize()))));
  }

  std::shared_ptr<arrow::io::MemoryMappedFile> file_;
  bool is_file_ = false;
  std::shared_ptr<arrow::ipc::RecordBatchFileReader> file_reader_;
  std::shared_ptr<arrow::RecordBatchReader> stream_;
  std::shared_ptr<arrow::RecordBatch> pending_;
  int batch_ = 0;
};

void* open_table(int fd, int kind, char* error, std::size_t error_size) {
  try {
    // The caller opened (and checked) fd; the same open file through its
    // /proc/self/fd link, so nothing is reopened by name.
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    if (kind == kTailorTableParquet) {
      auto file = value_or_throw(arrow::io::ReadableFile::Open(path));
      return static_cast<Table*>(new ParquetTable(std::move(file)));
    }
    auto file = value_or_throw(arrow::io::MemoryMappedFile::Open(path, arrow::io::FileMode::READ));
    return static_cast<Table*>(new ArrowTable(std::move(file)));
  } catch (const TableError& e) {
    copy_error(e.message, error, error_size);
  } catch (const std::exception& e) {  // parquet::ParquetException, std::bad_alloc
    copy_error(e.what(), error, error_size);
  } catch (...) {
    copy_error("unknown exception", error, error_size);
  }
  return nullptr;
}

void close_table(void* table) { delete static_cast<Table*>(table); }

std::int64_t table_rows(void* table, char* error, std::size_t error_size) {
  try {
    return static_cast<Table*>(table)->rows();
  } catch (const TableError& e) {
    copy_error(e.message, error, error_size);
  } catch (const std::exception& e) {
    copy_error(e.what(), error, error_size);
  } catch (...) {
    copy_error("unknown exception", error, error_size);
  }
  return -1;
}

void table_columns(void* table, TailorTableTextSink sink, void* ctx) {
  try {
    const auto schema = static_cast<Table*>(table)->schema();
    for (const auto& field : schema->fields()) {
      const std::string text = field->name() + ": " + field->type()->ToString();
      sink(ctx, text.data(), text.size());
    }
  } catch (...) {
  }
}

int next_group(void* table, TailorTableRowSink sink, void* ctx, std::int64_t* error_row, char* error,
               std::size_t error_size) {
  std::int64_t row = 0;
  *error_row = -1;
  try {
    auto* t = static_cast<Table*>(table);
    if (!t->next_group()) return 0;
    std::string json;
    while (const std::shared_ptr<arrow::RecordBatch> batch = t->next_batch()) {
      const auto& schema = *batch->schema();
      for (std::int64_t i = 0; i < batch->num_rows(); ++i, ++row) {
        json.clear();
        json += '{';
        for (int c = 0; c < batch->num_columns(); ++c) {
          if (c > 0) json += ',';
          const std::string& name = schema.field(c)->name();
          append_string(json, name, name);
          json += ':';
          append_value(json, *batch->column(c), i, name);
        }
        json += '}';
        if (sink(ctx, json.data(), json.size(), row) != 0) return 2;
      }
    }
    return 1;
  } catch (const RowError& e) {
    *error_row = row;
    copy_error(e.message, error, error_size);
  } catch (const TableError& e) {
    copy_error(e.message, error, error_size);
  } catch (const std::exception& e) {
    copy_error(e.what(), error, error_size);
  } catch (...) {
    copy_error("unknown exception", error, error_size);
  }
  return -1;
}

constexpr TailorTablesApi kApi = {kTailorTablesAbiVersion, open_table, close_table, table_rows,
                                  table_columns,           next_group};

}  // namespace

extern "C" __attribute__((visibility("default"))) const TailorTablesApi* tailor_tables_api(void) { return &kApi; }
