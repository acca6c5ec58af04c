// POST /v1/data/preview: the first examples of a spec's data.train as
// tailor-runner would read them on this machine (rendered text, tokens,
// what is trained), for the web UI's submit page. The work is tailor-data's
// (`tailor data preview --output json`), which holds the tokenizers and
// chat templates tailord does not link; it runs under the spec root as
// tailor-runner does.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "dsl/job_spec.h"

namespace tailor::daemon {

// The preview's JSON (runner/data/preview.h's preview_json) of `spec`, a
// spec already checked against the spec root: written resolved to a file in
// `scratch_dir`, read by tailor-data with `spec_root` as its read root.
// InvalidArgument with tailor-data's message when the data cannot be read
// or rendered; Unavailable when there is no tailor-data beside tailord.
Result<std::string> preview_data_json(const dsl::JobSpec& spec, std::int64_t n, const std::string& spec_root,
                                      const std::string& scratch_dir);

}  // namespace tailor::daemon
