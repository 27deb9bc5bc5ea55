#include "api/auth.hpp"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace kforge::api {
namespace {

std::array<unsigned char, 32> digest_of(std::string_view s) {
  std::array<unsigned char, 32> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

const char* role_name(Role r) {
  switch (r) {
    case Role::kRead:
      return "read";
    case Role::kSubmit:
      return "submit";
    case Role::kAdmin:
      return "admin";
    case Role::kNone:
      break;
  }
  return "none";
}

core::Result<Auth> Auth::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return core::fail(core::ErrorKind::kInternal, "cannot read the token file " + file.string());
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), file.string());
}

core::Result<Auth> Auth::parse(std::string_view text, const std::string& origin) {
  Auth auth;
  auth.enabled_ = true;
  int n = 0;
  while (!text.empty()) {
    ++n;
    const size_t eol = text.find('\n');
    std::string_view l = trim(text.substr(0, eol));
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (l.empty() || l.front() == '#') continue;
    const auto colon = l.find(':');
    const std::string where = origin + ":" + std::to_string(n);
    if (colon == std::string_view::npos) return core::fail_field(where, "expected `role:token`");
    const std::string_view role = trim(l.substr(0, colon)), token = trim(l.substr(colon + 1));
    Role r = role == "read"     ? Role::kRead
             : role == "submit" ? Role::kSubmit
             : role == "admin"  ? Role::kAdmin
                                : Role::kNone;
    if (r == Role::kNone) return core::fail_field(where, "unknown role (read, submit or admin)");
    if (token.size() < 16) return core::fail_field(where, "a token has at least 16 characters");
    const bool printable = std::all_of(token.begin(), token.end(), [](char c) { return c > 0x20 && c < 0x7f; });
    if (!printable) return core::fail_field(where, "a token is printable ASCII without spaces");
    auth.tokens_.push_back({r, digest_of(token)});
  }
  if (auth.tokens_.empty()) return core::fail_field(origin, "the token file has no tokens");
  return auth;
}

core::Result<Role> Auth::check(std::string_view authorization, Role needed) const {
  if (!enabled_) return Role::kAdmin;
  constexpr std::string_view kBearer = "Bearer ";
  if (!authorization.starts_with(kBearer)) {
    return core::fail(core::ErrorKind::kUnauthorized,
                      "this route needs `Authorization: Bearer <token>`");
  }
  const auto d = digest_of(trim(authorization.substr(kBearer.size())));
  // Every token is compared, whatever matched, so timing says nothing about which.
  Role granted = Role::kNone;
  for (const auto& t : tokens_) {
    if (CRYPTO_memcmp(t.digest.data(), d.data(), d.size()) == 0 && t.role > granted)
      granted = t.role;
  }
  if (granted == Role::kNone)
    return core::fail(core::ErrorKind::kUnauthorized, "the token is not valid");
  if (granted < needed) {
    return core::fail(core::ErrorKind::kForbidden,
                      std::string("this route needs the `") + role_name(needed) +
                          "` role; the token has `" + role_name(granted) + "`");
  }
  return granted;
}

}  // namespace kforge::api
