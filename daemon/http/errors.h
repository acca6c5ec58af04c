// One mapping from Status to HTTP: every error the API returns is
//   {"error": "<machine-readable code>", "message": "<for people>", "details": {...}}
// with the status code that matches its cause.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "daemon/http/message.h"

namespace tailor::daemon {

// InvalidArgument 400, NotFound 404, AlreadyExists/FailedPrecondition 409,
// ResourceExhausted 422 (does not fit), Unavailable 503, Cancelled 409,
// everything else 500.
int http_status_for(StatusCode code);

// "invalid_argument", "not_found", ...: the `error` field for a Status.
std::string error_code_for(StatusCode code);

// `details_json` must be a serialised JSON object (or empty for {}).
HttpResponse error_response(int http_status, std::string_view error, std::string_view message,
                            std::string_view details_json = {});
HttpResponse error_response(const Status& status, std::string_view details_json = {});

}  // namespace tailor::daemon
