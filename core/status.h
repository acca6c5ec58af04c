// Status and Result<T>: the one error model of Tailor's libraries.
// A Status is cheap when ok (no allocation) and carries a code plus a
// human-readable message with context prefixes added as it travels up
// ("loading checkpoint step 400: open: No such file or directory").
// Modelled on leveldb's include/leveldb/status.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/check.h"

namespace tailor {

enum class StatusCode : std::uint8_t {
  kOk = 0,
  kInvalidArgument,    // bad user input: spec, flags, data
  kNotFound,           // a named thing (file, preset, job) does not exist
  kAlreadyExists,
  kFailedPrecondition, // the system is not in a state to do this
  kResourceExhausted,  // out of memory (real or budgeted): a smaller plan may fit
  kUnavailable,        // transient: retry may succeed
  kCancelled,
  kIOError,
  kDataLoss,           // stored data damaged: truncated, overwritten, unreadable
  kInternal,           // a bug: an invariant did not hold
  kNoSpace,            // a disk or file system is full: freeing space helps, a smaller plan does not
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message);

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
  static Status not_found(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status already_exists(std::string msg) { return {StatusCode::kAlreadyExists, std::move(msg)}; }
  static Status failed_precondition(std::string msg) { return {StatusCode::kFailedPrecondition, std::move(msg)}; }
  static Status resource_exhausted(std::string msg) { return {StatusCode::kResourceExhausted, std::move(msg)}; }
  static Status unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status cancelled(std::string msg) { return {StatusCode::kCancelled, std::move(msg)}; }
  static Status io_error(std::string msg) { return {StatusCode::kIOError, std::move(msg)}; }
  static Status data_loss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
  static Status internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }
  static Status no_space(std::string msg) { return {StatusCode::kNoSpace, std::move(msg)}; }

  bool is_ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty when ok.
  const std::string& message() const;

  // A copy whose message reads "<context>: <message>". Ok stays ok.
  Status prefixed(std::string_view context) const;

  // "invalid argument: <message>" or "ok".
  std::string to_string() const;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;  // null when ok; immutable, so sharing is safe
};

// Either a value or a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    TAILOR_CHECK(!std::get<Status>(v_).is_ok());
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    TAILOR_CHECK(is_ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    TAILOR_CHECK(is_ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    TAILOR_CHECK(is_ok());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tailor

#define TAILOR_CONCAT_INNER_(a, b) a##b
#define TAILOR_CONCAT_(a, b) TAILOR_CONCAT_INNER_(a, b)

#define TAILOR_RETURN_IF_ERROR(expr)              \
  do {                                            \
    ::tailor::Status tailor_status_ = (expr);     \
    if (!tailor_status_.is_ok()) return tailor_status_; \
  } while (0)

#define TAILOR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define TAILOR_ASSIGN_OR_RETURN(lhs, expr) \
  TAILOR_ASSIGN_OR_RETURN_IMPL_(TAILOR_CONCAT_(tailor_result_, __LINE__), lhs, expr)
