// RFC 7807 problem documents. The one place where an Error kind becomes an HTTP status.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace kforge::api {

int status_for(core::ErrorKind kind);
// {"type","title","status","detail","errors":[{"field","message"}], ...extra}
nlohmann::json problem_json(const core::Error& error);
nlohmann::json problem_json(int status, const std::string& detail, const std::string& field = "");

inline constexpr const char* kProblemType = "application/problem+json";

}  // namespace kforge::api
