// The error table: every error the API answers is
//   {"error": "<code>", "message": "<for people>", "details": {...}}
// with the one HTTP status its code has, wherever it is answered
// (daemon/openapi.yaml's Error.error lists the same codes, checked by a
// test). A Status maps onto the table by its code.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "daemon/http/message.h"

namespace tailor::daemon {

enum class ApiError {
  kBadRequest,             // 400 the HTTP request itself is malformed
  kInvalidArgument,        // 400 a parameter, header or path is wrong
  kInvalidSpec,            // 400 the job spec has errors (details.diagnostics)
  kInvalidIdempotencyKey,  // 400
  kUnauthorized,           // 401 no or a wrong bearer token
  kForbiddenHost,          // 403 Host or Origin is not this server's
  kForbidden,              // 403 the token may not do this (a read-only token, a change)
  kNotFound,               // 404
  kMethodNotAllowed,       // 405 (with Allow)
  kConflict,               // 409 the job is not in a state for this
  kAlreadyExists,          // 409
  kCancelled,              // 409
  kPayloadTooLarge,        // 413
  kUnsupportedMediaType,   // 415
  kRangeNotSatisfiable,    // 416 (with Content-Range: bytes */size)
  kDoesNotFit,             // 422 the job does not fit the machine
  kIdempotencyKeyReused,   // 422 the key came with another request before
  kNotExportable,          // 422 the model cannot be written in the format asked (why in the message)
  kHeadersTooLarge,        // 431
  kInternal,               // 500 a bug
  kIoError,                // 500
  kDataLoss,               // 500 stored data is damaged
  kUnavailable,            // 503 try again (with Retry-After): the store is held, tailord is starting
  kInsufficientStorage,    // 507 the data folder's file system is full
};

struct ErrorKind {
  ApiError error;
  int http_status;
  std::string_view code;
};

// Every row, in ApiError's order.
const std::vector<ErrorKind>& error_table();
const ErrorKind& error_kind(ApiError error);

// InvalidArgument invalid_argument, NotFound not_found, FailedPrecondition
// conflict, ResourceExhausted does_not_fit, Unavailable unavailable,
// NoSpace insufficient_storage, ...
ApiError api_error_for(StatusCode code);

// `details_json` must be a serialised JSON object (or empty for {}). A 503
// carries Retry-After.
HttpResponse error_response(ApiError error, std::string_view message, std::string_view details_json = {});
HttpResponse error_response(const Status& status, std::string_view details_json = {});

}  // namespace tailor::daemon
