// Errors that are expected outcomes (a bad request, a compile error, a timeout) travel as
// values: `Result<T>` is `std::expected<T, Error>`. Each Error has a kind, which the HTTP
// layer maps to a status code in one place (api/problem.cpp), a human message, and, for bad
// input, the JSON pointer of every offending field. Bugs are exceptions, not Errors.
#pragma once

#include <expected>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kforge::core {

enum class ErrorKind {
  kBadRequest,     // the request is malformed or asks for something impossible
  kNotFound,       // no such kernel, job or template
  kTooLarge,       // a body, source or list over its limit
  kCompileFailed,  // the compiler ran and rejected the source
  kUnavailable,    // a backend or device this host does not have
  kTimeout,        // a child process outlived its deadline
  kOverloaded,     // the build queue is full: try again later
  kUnauthorized,   // no valid token
  kForbidden,      // a token without the role the route needs
  kInternal,       // the service itself failed (disk full, spawn failed)
};

struct FieldError {
  std::string field;  // JSON pointer into the request, e.g. "/arch/1"
  std::string message;
};

struct Error {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
  std::vector<FieldError> fields;
  nlohmann::json extra = nlohmann::json::object();  // merged into the problem body

  static Error bad_field(std::string field, std::string message) {
    Error e{ErrorKind::kBadRequest, message, {}, nlohmann::json::object()};
    e.fields.push_back({std::move(field), std::move(message)});
    return e;
  }
  static Error make(ErrorKind kind, std::string message) {
    return Error{kind, std::move(message), {}, nlohmann::json::object()};
  }
};

template <class T>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(ErrorKind kind, std::string message) {
  return std::unexpected(Error::make(kind, std::move(message)));
}
inline std::unexpected<Error> fail_field(std::string field, std::string message) {
  return std::unexpected(Error::bad_field(std::move(field), std::move(message)));
}

}  // namespace kforge::core
