// Parquet files and Hugging Face datasets' save_to_disk folders (Arrow) as
// the records of data_records.h: each row becomes the JSON object
// `datasets` shows as ds[i] and goes through the same field, chat and
// preference readers as a JSON Lines record, so a Parquet file and the same
// records in JSONL give the same documents. Read through libtailor_tables.so
// (table_module.h), loaded on first use.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/data_records.h"
#include "dsl/job_spec.h"

namespace tailor::dsl {

// Opens a data file for reading and returns its descriptor, which the
// caller closes. The default is open(2); tailor-runner passes one that
// checks the file against its read root (runner/data/file_io.h).
using DataFileOpener = std::function<Result<int>(const std::string& path)>;

// The files that hold a table dataset's rows, in order:
//  - parquet: `path` itself;
//  - arrow:   `path` itself when it is a file (an Arrow IPC stream or
//             file); for a save_to_disk folder, the data files its
//             state.json lists (`_data_files`), under that folder.
// InvalidArgument for a folder that is not one dataset: a DatasetDict
// (dataset_dict.json; the error names its splits and the folder to use),
// no state.json, a data file listed outside the folder.
Result<std::vector<std::string>> table_files(const std::string& path, DataFormat format,
                                             const DataFileOpener& open = {});

// for_each_record for spec.format parquet or arrow: the rows of
// table_files(path) in order. A record's `line` is its row number from 1
// and its `where` reads "path: row 1204 (row group 2, row 17 in it)"
// (0-based, as pandas and datasets count; a save_to_disk folder names
// its data file). A row the readers refuse is a bad record (skipped under
// data.on_bad_record: skip); a file that cannot be read, or a string that
// is not UTF-8, is an error naming the file and the row.
Status for_each_table_record(const std::string& path, const DataSpec& spec, const DataRecordFn& fn,
                             std::int64_t max_records = 0, const DataSkipFn& skip = {},
                             const DataFileOpener& open = {});

// check_data_file for parquet and arrow: rows counted from the files'
// metadata, the first kCheckedRecords read in full.
Result<DataFileFacts> check_table_data(const std::string& path, const DataSpec& spec);

// The columns of a table dataset's first file, "name: type" each (for
// errors and `tailor data preview`).
Result<std::vector<std::string>> table_columns(const std::string& path, DataFormat format,
                                               const DataFileOpener& open = {});

}  // namespace tailor::dsl
