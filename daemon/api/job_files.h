// GET /v1/jobs/{id}/files and /archive: what a job's folder holds (the model, the
// adapter, checkpoints, logs, the plan), and any of those files as a
// download: streamed from disk with its Content-Length, an ETag, and byte
// ranges, so that an interrupted download of a large model resumes
// (curl -C -). Only regular files inside the folder are served, checked on
// the descriptor opened; tailord's own bookkeeping (heartbeats, the runner
// lock and pid) and unfinished checkpoints are not listed.
#pragma once

#include <string>

#include "daemon/http/message.h"

namespace tailor::daemon {

// {"job_id", "files": [{"path", "bytes", "modified"}]}, sorted by path.
HttpResponse list_job_files(const std::string& job_id, const std::string& job_dir);

// The file at `relative` (a path inside the job's folder) as `request`'s
// Range and If-Range headers ask: 200, 206, or 416; 400 for a path that
// leaves the folder or is not a regular file, 404 for none.
HttpResponse job_file(const std::string& job_dir, const std::string& relative, const HttpRequest& request);

// The folder at `relative` (empty: the whole job folder) as one tar archive
// (tar_format.h) of the files a listing shows under it, each at its path
// in the job's folder ("adapter/adapter_config.json"), streamed from disk
// without a copy: 200 application/x-tar saved as JOB-FOLDER.tar, its
// Content-Length known before the first byte. 400 for a path that leaves
// the folder or is not a folder, 404 for none. No byte ranges: a broken
// download starts over (single files resume).
HttpResponse job_archive(const std::string& job_id, const std::string& job_dir, const std::string& relative);

}  // namespace tailor::daemon
