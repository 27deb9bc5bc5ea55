#include "api/problem.hpp"

namespace kforge::api {
namespace {

struct StatusName {
  int status;
  const char* slug;   // the problem type: /problems/<slug>
  const char* title;  // the reason phrase
  const char* description;  // what GET /problems/<slug> says about it
};

constexpr StatusName kStatusNames[] = {
    {400, "bad-request", "Bad Request",
     "The request is malformed or names something this server does not accept. `errors` lists each "
     "problem with `field`, the JSON pointer (or query parameter) it is about; fix those and send it again."},
    {401, "unauthorized", "Unauthorized",
     "The route needs `Authorization: Bearer <token>` (the server runs with --token-file) and the "
     "request had none, or a token the server does not know."},
    {403, "forbidden", "Forbidden",
     "The token is known but its role is too low for the route: read < submit < admin."},
    {404, "not-found", "Not Found",
     "No such route, kernel, job or file. A kernel can also be gone because it was evicted or was found "
     "corrupt on disk and removed: submit its request again."},
    {405, "method-not-allowed", "Method Not Allowed",
     "The path exists but not with this method; the `Allow` header lists the methods it takes."},
    {408, "request-timeout", "Request Timeout",
     "The request head or body did not arrive in time (--header-timeout, --body-timeout, --min-body-rate); "
     "the connection is closed."},
    {411, "length-required", "Length Required",
     "A POST needs a Content-Length or Transfer-Encoding: chunked."},
    {413, "payload-too-large", "Payload Too Large",
     "The body is over the server's limit, which the detail and `max_bytes` state (--max-body; "
     "--max-import-bytes for POST /cache/import)."},
    {414, "uri-too-long", "URI Too Long", "The request line is over 8,192 bytes."},
    {415, "unsupported-media-type", "Unsupported Media Type",
     "The body has a Content-Encoding; kforge takes bodies as sent, not compressed."},
    {416, "range-not-satisfiable", "Range Not Satisfiable",
     "The Range starts past the end of the file; `Content-Range: bytes */<size>` gives its size."},
    {422, "compile-failed", "Unprocessable Content",
     "The compiler rejected the source. The detail quotes its first error line; `log` holds the whole "
     "output and `argv` the command. The failure is cached for --negative-ttl seconds."},
    {429, "too-many-requests", "Too Many Requests", "Too many requests from this client; wait `Retry-After` seconds."},
    {500, "internal-error", "Internal Server Error", "The server failed; its log has the details under the request id."},
    {503, "unavailable", "Service Unavailable",
     "The job queue (or the prefetch queue, or the connection limit) is full, or the server is stopping; "
     "send it again after `Retry-After` seconds."},
    {504, "deadline-exceeded", "Gateway Timeout", "The work did not finish within its deadline."},
};

// Problem types that share a status with another (a 422 that ran out of time).
constexpr StatusName kExtraTypes[] = {
    {422, "compile-timeout", "Unprocessable Content",
     "The compiler ran past --compile-timeout and was killed; the source (or its templates) makes it run "
     "away. Not cached: a later request compiles again."},
};

StatusName name_of(int status) {
  for (const auto& n : kStatusNames) {
    if (n.status == status) return n;
  }
  return status >= 500 ? StatusName{status, "internal-error", "Internal Server Error", ""}
                       : StatusName{status, "error", "Error", ""};
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

std::optional<nlohmann::json> problem_type(std::string_view slug) {
  auto doc = [](const StatusName& n) {
    return nlohmann::json{{"type", std::string("/problems/") + n.slug},
                          {"title", n.title},
                          {"status", n.status},
                          {"description", n.description}};
  };
  for (const auto& n : kStatusNames)
    if (slug == n.slug) return doc(n);
  for (const auto& n : kExtraTypes)
    if (slug == n.slug) return doc(n);
  return std::nullopt;
}

std::vector<std::string> problem_types() {
  std::vector<std::string> out;
  for (const auto& n : kStatusNames) out.push_back(n.slug);
  for (const auto& n : kExtraTypes) out.push_back(n.slug);
  return out;
}

}  // namespace kforge::api
