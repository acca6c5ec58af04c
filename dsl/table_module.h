// The C interface of libtailor_tables.so, the one place that links Apache
// Arrow and Parquet (the libraries the pyarrow wheel in the venv ships, as
// LibTorch comes from the torch wheel). It is loaded with dlopen by
// dsl/table_records.cpp, so tailord, tailor and tailor-runner start without
// those libraries and only a job that reads a Parquet or Arrow file needs
// them. Internal to dsl.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// One row as a JSON object of its columns (see table_module.cpp for the
// types). Returns non-zero to stop the walk.
typedef int (*TailorTableRowSink)(void* ctx, const char* json, std::size_t size, std::int64_t row_in_group);
typedef void (*TailorTableTextSink)(void* ctx, const char* text, std::size_t size);

enum TailorTableKind { kTailorTableParquet = 0, kTailorTableArrow = 1 };

struct TailorTablesApi {
  int abi_version;  // kTailorTablesAbiVersion
  // Opens the file `fd` refers to (the module reopens it through
  // /proc/self/fd, so the caller keeps and closes fd) as a Parquet file or
  // an Arrow IPC stream or file. Null with a message in error on failure.
  void* (*open)(int fd, int kind, char* error, std::size_t error_size);
  void (*close)(void* table);
  // Rows in the file, from its metadata (Parquet, an IPC file) or by
  // walking the batches' headers (an IPC stream, memory-mapped). -1 with a
  // message in error on failure.
  std::int64_t (*rows)(void* table, char* error, std::size_t error_size);
  // The schema: one call of sink per column, "name: type".
  void (*columns)(void* table, TailorTableTextSink sink, void* ctx);
  // Reads the next row group (Parquet) or record batch (Arrow) and calls
  // sink for each of its rows. 1: a group was read; 0: no more groups;
  // 2: sink asked to stop; -1: an error, described in error, with the row
  // of the group it is about in error_row (-1: the group as a whole).
  int (*next_group)(void* table, TailorTableRowSink sink, void* ctx, std::int64_t* error_row, char* error,
                    std::size_t error_size);
};

// The module's one exported symbol.
const TailorTablesApi* tailor_tables_api(void);

}  // extern "C"

inline constexpr int kTailorTablesAbiVersion = 1;
