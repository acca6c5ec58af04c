#include "daemon/http/errors.h"

#include "core/json_writer.h"

namespace tailor::daemon {

int http_status_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kCancelled: return 409;
    case StatusCode::kResourceExhausted: return 422;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kNoSpace: return 507;
    case StatusCode::kIOError:
    case StatusCode::kDataLoss:
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

std::string error_code_for(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kAlreadyExists: return "already_exists";
    case StatusCode::kFailedPrecondition: return "conflict";
    case StatusCode::kResourceExhausted: return "does_not_fit";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kNoSpace: return "insufficient_storage";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kIOError: return "io_error";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kInternal: return "internal";
  }
  return "internal";
}

HttpResponse error_response(int http_status, std::string_view error, std::string_view message,
                            std::string_view details_json) {
  JsonWriter w(0);
  w.begin_object().field("error", error).field("message", message).key("details");
  w.raw(details_json.empty() ? std::string_view("{}") : details_json);
  w.end_object();
  return HttpResponse::json(http_status, w.str());
}

HttpResponse error_response(const Status& status, std::string_view details_json) {
  HttpResponse r = error_response(http_status_for(status.code()), error_code_for(status.code()), status.message(),
                                  details_json);
  // Transient: tell clients when to try again (RFC 9110 section 10.2.3).
  if (r.status == 503) r.headers.emplace_back("Retry-After", "1");
  return r;
}

}  // namespace tailor::daemon
