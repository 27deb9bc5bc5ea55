// Helpers the route files share (internal to api/).
#pragma once

#include <httplib.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/http_head.hpp"
#include "api/problem.hpp"
#include "core/base/hash.hpp"

namespace kforge::api {

inline constexpr const char* kJson = "application/json";

// Every JSON answer leaves through here: bytes that are not UTF-8 (which should never get
// this far: request strings are checked, outputs sanitized) become U+FFFD instead of an
// exception, so no input can turn an answer into a 500.
inline std::string dump_json(const nlohmann::json& j, int indent = 2) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200) {
  res.status = status;
  res.set_content(dump_json(j) + "\n", kJson);
}

inline void send_problem(httplib::Response& res, const nlohmann::json& problem) {
  res.status = problem.value("status", 500);
  if (res.status == 503) res.set_header("Retry-After", "5");
  if (res.status == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"kforge\"");
  res.set_content(dump_json(problem) + "\n", kProblemType);
}

inline void send_error(httplib::Response& res, const core::Error& e) {
  send_problem(res, problem_json(e));
}

// The query of a request as (name, value) pairs in order (split_query, api/http_head.hpp),
// each percent-decoded by httplib's decoder (`+` is a space).
inline std::vector<std::pair<std::string, std::string>> query_pairs(const httplib::Request& req) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, value] : split_query(req.target))
    out.emplace_back(httplib::detail::decode_url(std::string(name), true), httplib::detail::decode_url(std::string(value), true));
  return out;
}

// Checks a 64-hex {key} path parameter before it touches the disk.
inline bool valid_key(const httplib::Request& req, httplib::Response& res, std::string& key) {
  key = req.matches[1];
  if (core::is_hex_key(key)) return true;
  send_problem(res, problem_json(400, "a kernel key is 64 lowercase hex characters", "/key"));
  return false;
}

}  // namespace kforge::api
