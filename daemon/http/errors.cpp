#include "daemon/http/errors.h"

#include "core/json_writer.h"

namespace tailor::daemon {

const std::vector<ErrorKind>& error_table() {
  static const std::vector<ErrorKind> kTable = {
      {ApiError::kBadRequest, 400, "bad_request"},
      {ApiError::kInvalidArgument, 400, "invalid_argument"},
      {ApiError::kInvalidSpec, 400, "invalid_spec"},
      {ApiError::kInvalidIdempotencyKey, 400, "invalid_idempotency_key"},
      {ApiError::kUnauthorized, 401, "unauthorized"},
      {ApiError::kForbiddenHost, 403, "forbidden_host"},
      {ApiError::kForbidden, 403, "forbidden"},
      {ApiError::kNotFound, 404, "not_found"},
      {ApiError::kMethodNotAllowed, 405, "method_not_allowed"},
      {ApiError::kConflict, 409, "conflict"},
      {ApiError::kAlreadyExists, 409, "already_exists"},
      {ApiError::kCancelled, 409, "cancelled"},
      {ApiError::kPayloadTooLarge, 413, "payload_too_large"},
      {ApiError::kUnsupportedMediaType, 415, "unsupported_media_type"},
      {ApiError::kRangeNotSatisfiable, 416, "range_not_satisfiable"},
      {ApiError::kDoesNotFit, 422, "does_not_fit"},
      {ApiError::kIdempotencyKeyReused, 422, "idempotency_key_reused"},
      {ApiError::kNotExportable, 422, "not_exportable"},
      {ApiError::kHeadersTooLarge, 431, "headers_too_large"},
      {ApiError::kInternal, 500, "internal"},
      {ApiError::kIoError, 500, "io_error"},
      {ApiError::kDataLoss, 500, "data_loss"},
      {ApiError::kUnavailable, 503, "unavailable"},
      {ApiError::kInsufficientStorage, 507, "insufficient_storage"},
  };
  return kTable;
}

const ErrorKind& error_kind(ApiError error) { return error_table()[static_cast<std::size_t>(error)]; }

ApiError api_error_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
    case StatusCode::kInternal: return ApiError::kInternal;
    case StatusCode::kInvalidArgument: return ApiError::kInvalidArgument;
    case StatusCode::kNotFound: return ApiError::kNotFound;
    case StatusCode::kAlreadyExists: return ApiError::kAlreadyExists;
    case StatusCode::kFailedPrecondition: return ApiError::kConflict;
    case StatusCode::kResourceExhausted: return ApiError::kDoesNotFit;
    case StatusCode::kUnavailable: return ApiError::kUnavailable;
    case StatusCode::kCancelled: return ApiError::kCancelled;
    case StatusCode::kIOError: return ApiError::kIoError;
    case StatusCode::kDataLoss: return ApiError::kDataLoss;
    case StatusCode::kNoSpace: return ApiError::kInsufficientStorage;
  }
  return ApiError::kInternal;
}

HttpResponse error_response(ApiError error, std::string_view message, std::string_view details_json) {
  const ErrorKind& kind = error_kind(error);
  JsonWriter w(0);
  w.begin_object().field("error", kind.code).field("message", message).key("details");
  w.raw(details_json.empty() ? std::string_view("{}") : details_json);
  w.end_object();
  HttpResponse r = HttpResponse::json(kind.http_status, w.str());
  // Transient: tell clients when to try again (RFC 9110 section 10.2.3).
  if (kind.http_status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

HttpResponse error_response(const Status& status, std::string_view details_json) {
  return error_response(api_error_for(status.code()), status.message(), details_json);
}

}  // namespace tailor::daemon
