#include "daemon/api/data_preview.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "dsl/spec_fields.h"
#include "dsl/yaml_tree.h"
#include "platform/command.h"
#include "platform/executable.h"
#include "platform/files.h"
#include "runner/protocol/launch_env.h"

namespace tailor::daemon {

namespace fs = std::filesystem;

Result<std::string> preview_data_json(const dsl::JobSpec& spec, std::int64_t n, const std::string& spec_root,
                                      const std::string& scratch_dir) {
  auto tool = platform::find_executable("tailor-data", "", "TAILOR_DATA");
  if (!tool.is_ok()) return Status::unavailable("the data preview needs tailor-data: " + tool.status().message());
  std::error_code ec;
  fs::create_directories(scratch_dir, ec);
  if (ec) return Status::io_error("creating " + scratch_dir + ": " + ec.message());
  // The resolved spec (absolute paths, no extends) in a file of its own.
  static std::atomic<std::uint64_t> next{0};
  const std::string file =
      (fs::path(scratch_dir) / ("preview-" + std::to_string(::getpid()) + "-" + std::to_string(next++) + ".json")).string();
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic(file, dsl::emit_json(dsl::write_job_spec(spec), 0),
                                                     platform::Durability::kProcess));
  struct Remove {
    std::string path;
    ~Remove() {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  } remove{file};
  platform::CommandRequest req;
  req.argv = {*tool, "preview", file, "--n", std::to_string(n), "--output", "json"};
  if (!spec_root.empty()) req.env[runner::kSpecRootEnv] = spec_root;
  req.timeout_seconds = 60;
  TAILOR_ASSIGN_OR_RETURN(const platform::CommandResult ran, platform::run_command(req));
  if (ran.ok()) return ran.out;
  std::string why = ran.err;
  // tailor-data names its input file; the client sent a request, not a file.
  for (std::size_t at; (at = why.find(file)) != std::string::npos;) why.replace(at, file.size(), "<request>");
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  if (ran.exit_code == 1) return Status::invalid_argument(why.empty() ? "the data cannot be previewed" : why);
  return Status::internal("tailor-data preview: " + ran.describe());
}

}  // namespace tailor::daemon
