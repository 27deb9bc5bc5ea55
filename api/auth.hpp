// Bearer-token authentication (DESIGN §9). A token file holds lines `role:token` (roles
// read < submit < admin; `#` starts a comment). Each role includes the ones below it.
// Tokens are compared in constant time (over their SHA-256 digests, so neither length
// nor content leaks through timing) and never logged: only the role travels further.
// With no token file, auth is off and the server binds loopback only.
#pragma once

#include <array>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/error.hpp"

namespace kforge::api {

enum class Role { kNone = -1, kRead = 0, kSubmit = 1, kAdmin = 2 };
const char* role_name(Role r);

class Auth {
 public:
  Auth() = default;  // off: every request has every role
  // kBadRequest naming the line for a malformed file; kInternal when it cannot be read.
  static core::Result<Auth> load(const std::filesystem::path& file);
  // The same for a token file's text; `origin` names it in errors (`origin:line`).
  static core::Result<Auth> parse(std::string_view text, const std::string& origin);

  bool enabled() const { return enabled_; }
  size_t tokens() const { return tokens_.size(); }
  // Checks an Authorization header against the role a route needs: kUnauthorized without
  // a valid token, kForbidden with a token of a lower role.
  core::Result<Role> check(std::string_view authorization, Role needed) const;

 private:
  struct Token {
    Role role;
    std::array<unsigned char, 32> digest;
  };
  bool enabled_ = false;
  std::vector<Token> tokens_;
};

}  // namespace kforge::api
