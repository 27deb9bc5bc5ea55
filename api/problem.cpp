#include "api/problem.hpp"

namespace kforge::api {
namespace {

const char* slug(int status) {
  switch (status) {
    case 400:
      return "bad-request";
    case 401:
      return "unauthorized";
    case 403:
      return "forbidden";
    case 404:
      return "not-found";
    case 405:
      return "method-not-allowed";
    case 413:
      return "payload-too-large";
    case 422:
      return "compile-failed";
    case 503:
      return "unavailable";
    default:
      return status >= 500 ? "internal-error" : "error";
  }
}

const char* title(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 422:
      return "Unprocessable Content";
    case 503:
      return "Service Unavailable";
    default:
      return status >= 500 ? "Internal Server Error" : "Error";
  }
}

}  // namespace

int status_for(core::ErrorKind kind) {
  switch (kind) {
    case core::ErrorKind::kBadRequest:
      return 400;
    case core::ErrorKind::kUnavailable:
      return 400;  // asks for a backend this host lacks
    case core::ErrorKind::kNotFound:
      return 404;
    case core::ErrorKind::kTooLarge:
      return 413;
    case core::ErrorKind::kCompileFailed:
      return 422;
    case core::ErrorKind::kTimeout:
      return 422;  // the source made the compiler run away
    case core::ErrorKind::kInternal:
      return 500;
  }
  return 500;
}

nlohmann::json problem_json(const core::Error& error) {
  const int status = status_for(error.kind);
  nlohmann::json j = error.extra.is_object() ? error.extra : nlohmann::json::object();
  j["type"] = std::string("/problems/") + slug(status);
  j["title"] = title(status);
  j["status"] = status;
  j["detail"] = error.message;
  if (error.kind == core::ErrorKind::kTimeout) j["type"] = "/problems/compile-timeout";
  nlohmann::json errs = nlohmann::json::array();
  for (const auto& f : error.fields) errs.push_back({{"field", f.field}, {"message", f.message}});
  j["errors"] = errs;
  return j;
}

nlohmann::json problem_json(int status, const std::string& detail, const std::string& field) {
  core::Error e;
  e.kind = status == 404   ? core::ErrorKind::kNotFound
           : status == 413 ? core::ErrorKind::kTooLarge
           : status >= 500 ? core::ErrorKind::kInternal
                           : core::ErrorKind::kBadRequest;
  e.message = detail;
  if (!field.empty() || status == 400) e.fields.push_back({field, detail});
  nlohmann::json j = problem_json(e);
  j["status"] = status;  // for statuses without a kind of their own (405, 401, ...)
  j["title"] = title(status);
  j["type"] = std::string("/problems/") + slug(status);
  return j;
}

}  // namespace kforge::api
