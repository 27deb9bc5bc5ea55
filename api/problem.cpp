#include "api/problem.hpp"

namespace kforge::api {
namespace {

struct StatusName {
  int status;
  const char* slug;   // the problem type: /problems/<slug>
  const char* title;  // the reason phrase
};

constexpr StatusName kStatusNames[] = {
    {400, "bad-request", "Bad Request"},
    {401, "unauthorized", "Unauthorized"},
    {403, "forbidden", "Forbidden"},
    {404, "not-found", "Not Found"},
    {405, "method-not-allowed", "Method Not Allowed"},
    {408, "request-timeout", "Request Timeout"},
    {413, "payload-too-large", "Payload Too Large"},
    {422, "compile-failed", "Unprocessable Content"},
    {429, "too-many-requests", "Too Many Requests"},
    {500, "internal-error", "Internal Server Error"},
    {503, "unavailable", "Service Unavailable"},
    {504, "deadline-exceeded", "Gateway Timeout"},
};

StatusName name_of(int status) {
  for (const auto& n : kStatusNames) {
    if (n.status == status) return n;
  }
  return status >= 500 ? StatusName{status, "internal-error", "Internal Server Error"}
                       : StatusName{status, "error", "Error"};
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
    case core::ErrorKind::kOverloaded:
      return 503;
    case core::ErrorKind::kUnauthorized:
      return 401;
    case core::ErrorKind::kForbidden:
      return 403;
  }
  return 500;
}

nlohmann::json problem_json(const core::Error& error) {
  const int status = status_for(error.kind);
  nlohmann::json j = error.extra.is_object() ? error.extra : nlohmann::json::object();
  j["type"] = std::string("/problems/") + name_of(status).slug;
  j["title"] = name_of(status).title;
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
  j["title"] = name_of(status).title;
  j["type"] = std::string("/problems/") + name_of(status).slug;
  return j;
}

}  // namespace kforge::api
