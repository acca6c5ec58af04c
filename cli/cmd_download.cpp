// `tailor download ID [PATH]`: a job's files from tailord (GET
// /v1/jobs/{id}/files), resumed with byte ranges where a download broke off.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cli/commands.h"
#include "cli/job_view.h"
#include "core/units.h"

namespace tailor::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDownloadHelp = R"(usage: tailor download [OPTIONS] ID [PATH]

Copies a job's files from tailord's machine: PATH is a file or folder of the
job's folder as --list shows it (default: adapter for a LoRA or QLoRA job,
the job's output at adapter size; model otherwise). Files keep
their paths under --to. A file that broke off (FILE.part) is resumed where
it stopped; one already there with the right size is skipped.

options:
  --to DIR             where to put them (default: the current folder)
  --tar                a folder as one tar archive, DIR/ID-FOLDER.tar (GET
                       /v1/jobs/ID/archive; started over if it breaks off)
  --list               list the job's files instead (path and size)
  --quiet              no line per file
  --output FORMAT      text (default) or json (the files and what was done)
)";

struct Wanted {
  std::string path;
  std::uint64_t bytes = 0;
};

// How GET `target` ended when its body went into `part`.
struct Streamed {
  Status error;           // a broken transfer or an error status (its body as the message)
  bool broke_off = false;  // the transfer, not the answer, failed
  int status = 0;
  std::map<std::string, std::string> headers;  // the answer's, lower-case names
};

// The body of GET `target` (with `headers`) written to `part`: appended to
// when tailord grants the range asked for (206), else from the start.
Streamed stream_to_file(const RestClient& client, const std::string& target, const fs::path& part,
                        const std::map<std::string, std::string>& headers) {
  Streamed r;
  std::ofstream out;
  std::string error_body;
  auto status = client.stream(
      target,
      [&](const std::string& piece) {
        if (r.status >= 300) {
          error_body += piece;
          return true;
        }
        out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
        return static_cast<bool>(out);
      },
      std::chrono::minutes(2), headers,
      [&](int code, const std::map<std::string, std::string>& answer) {
        r.status = code;
        r.headers = answer;
        if (code >= 300) return;
        out.open(part, code == 206 ? std::ios::binary | std::ios::app : std::ios::binary | std::ios::trunc);
      });
  if (!status.is_ok()) {
    r.error = status.status();
    r.broke_off = true;
  } else if (*status >= 300) {
    r.error = http_error(HttpResponse{*status, error_body, {}}, client.endpoint());
  } else {
    out.close();
    if (!out) r.error = Status::io_error("writing " + part.string());
  }
  return r;
}

// One file to `dest`, through `dest`.part: resumed from the part's size
// when tailord grants the range, started over when it sends the whole file.
Result<std::string> fetch(const RestClient& client, const std::string& target, const Wanted& f, const fs::path& dest) {
  std::error_code ec;
  if (fs::exists(dest, ec) && fs::file_size(dest, ec) == f.bytes) return std::string("up to date");
  fs::create_directories(dest.parent_path(), ec);
  if (ec) return Status::io_error("creating " + dest.parent_path().string() + ": " + ec.message());
  const fs::path part = dest.string() + ".part";
  std::uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  if (ec || have >= f.bytes) have = 0;
  std::map<std::string, std::string> headers;
  if (have > 0) headers["Range"] = "bytes=" + std::to_string(have) + "-";
  const Streamed got = stream_to_file(client, target, part, headers);
  if (got.broke_off) return got.error.prefixed(f.path + ": the download broke off (run it again to resume)");
  if (!got.error.is_ok()) return got.error.prefixed(f.path);
  const auto size = fs::file_size(part, ec);
  if (ec || size != f.bytes) {
    return Status::unavailable(f.path + ": got " + std::to_string(ec ? 0 : size) + " of " + std::to_string(f.bytes) +
                               " bytes (run it again to resume)");
  }
  fs::rename(part, dest, ec);
  if (ec) return Status::io_error("renaming " + part.string() + ": " + ec.message());
  return std::string(got.status == 206 ? "resumed at " + Bytes(static_cast<std::int64_t>(have)).to_string()
                                       : "downloaded");
}

// The folder `folder` of job `id` as one tar archive at `dest`, through
// `dest`.part; an archive that broke off starts over.
Result<std::uint64_t> fetch_archive(const RestClient& client, const std::string& id, const std::string& folder,
                                    const fs::path& dest) {
  std::error_code ec;
  fs::create_directories(dest.parent_path().empty() ? fs::path(".") : dest.parent_path(), ec);
  if (ec) return Status::io_error("creating " + dest.parent_path().string() + ": " + ec.message());
  const fs::path part = dest.string() + ".part";
  const Streamed got =
      stream_to_file(client, "/v1/jobs/" + url_encode(id) + "/archive?path=" + url_encode(folder), part, {});
  if (got.broke_off) return got.error.prefixed(folder + ": the archive broke off (run it again)");
  if (!got.error.is_ok()) return got.error.prefixed(folder);
  const auto length = got.headers.find("content-length");
  const std::uint64_t expected = length == got.headers.end() ? 0 : std::strtoull(length->second.c_str(), nullptr, 10);
  const auto size = fs::file_size(part, ec);
  if (ec || size != expected) {
    return Status::unavailable(folder + ": got " + std::to_string(ec ? 0 : size) + " of " + std::to_string(expected) +
                               " bytes of the archive (run it again)");
  }
  fs::rename(part, dest, ec);
  if (ec) return Status::io_error("renaming " + part.string() + ": " + ec.message());
  return static_cast<std::uint64_t>(size);
}

}  // namespace

int run_download(const Argv& argv, Streams io) {
  const std::string help = help_of(kDownloadHelp);
  auto command =
      parse_command(argv, with_remote_flags({{"to", true}, {"list", false}, {"tar", false}, {"quiet", false}, {"output", true}}),
                    "download", help.c_str(), io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  if (args.positional().empty() || args.positional().size() > 2) {
    io.err << "tailor download: expected a job id and at most one path\n" << help;
    return kExitUsage;
  }
  Remote r = connect_remote(args, "download", io);
  if (!r.client) return r.exit_code;
  const std::string id = args.positional()[0];
  const std::string base = "/v1/jobs/" + url_encode(id) + "/files";
  auto listing = get_json(*r.client, base);
  if (!listing.is_ok()) return fail_command("download", listing.status(), io);
  std::vector<Wanted> all;
  for (const Json& f : listing->value("files", Json::array())) {
    all.push_back({f.value("path", ""), f.value("bytes", std::uint64_t{0})});
  }
  if (args.has("list")) {
    if (r.output == "json") {
      io.out << listing->dump(2) << "\n";
    } else {
      for (const Wanted& f : all)
        io.out << f.path << "  " << Bytes(static_cast<std::int64_t>(f.bytes)).to_string() << "\n";
    }
    return kExitOk;
  }
  auto under = [&](const std::string& prefix) {
    std::vector<Wanted> out;
    for (const Wanted& f : all) {
      if (f.path == prefix || f.path.rfind(prefix + "/", 0) == 0) out.push_back(f);
    }
    return out;
  };
  // An adapter job's output is its adapter, even beside a merged model.
  std::string wanted = args.positional().size() == 2 ? args.positional()[1] : "adapter";
  std::vector<Wanted> files = under(wanted);
  if (files.empty() && args.positional().size() == 1) files = under(wanted = "model");
  if (files.empty()) {
    io.err << "tailor download: job " << id << " has no file or folder "
           << (args.positional().size() == 2 ? "\"" + wanted + "\"" : "model or adapter") << " (tailor download --list "
           << id << " shows what it has)\n";
    return kExitInvalid;
  }
  const fs::path to = args.get("to", ".");
  if (args.has("tar")) {
    std::string folder = wanted;
    while (!folder.empty() && folder.back() == '/') folder.pop_back();
    if (files.size() == 1 && files[0].path == folder) {
      io.err << "tailor download: \"" << folder << "\" is a file; --tar takes a folder\n";
      return kExitUsage;
    }
    const fs::path dest = to / (id + "-" + fs::path(folder).filename().string() + ".tar");
    auto bytes = fetch_archive(*r.client, id, folder, dest);
    if (!bytes.is_ok()) return fail_command("download", bytes.status(), io);
    if (r.output == "json") {
      io.out << Json{{"path", folder}, {"archive", dest.string()}, {"bytes", *bytes}}.dump(2) << "\n";
    } else if (!args.has("quiet")) {
      io.err << folder << "/  " << Bytes(static_cast<std::int64_t>(*bytes)).to_string() << "  archived in "
             << dest.string() << "\n";
    }
    return kExitOk;
  }
  Json report = Json::array();
  for (const Wanted& f : files) {
    auto done = fetch(*r.client, base + "?path=" + url_encode(f.path), f, to / f.path);
    if (!done.is_ok()) return fail_command("download", done.status(), io);
    report.push_back({{"path", f.path}, {"bytes", f.bytes}, {"file", (to / f.path).string()}, {"done", *done}});
    if (r.output == "text" && !args.has("quiet")) {
      io.err << f.path << "  " << Bytes(static_cast<std::int64_t>(f.bytes)).to_string() << "  " << *done << "\n";
    }
  }
  if (r.output == "json") io.out << report.dump(2) << "\n";
  return kExitOk;
}

}  // namespace tailor::cli
