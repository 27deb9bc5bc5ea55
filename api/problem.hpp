// RFC 7807 problem documents. The one place where an Error kind becomes an HTTP status.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"

namespace kforge::api {

int status_for(core::ErrorKind kind);
// {"type","title","status","detail","errors":[{"field","message"}], ...extra}
nlohmann::json problem_json(const core::Error& error);
nlohmann::json problem_json(int status, const std::string& detail, const std::string& field = "");

// What a problem type URI (/problems/<slug>) documents: {type, title, status, description};
// nullopt for a slug no answer uses. problem_types(): every slug, for the spec's test.
std::optional<nlohmann::json> problem_type(std::string_view slug);
std::vector<std::string> problem_types();

inline constexpr const char* kProblemType = "application/problem+json";

}  // namespace kforge::api
