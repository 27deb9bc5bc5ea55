// libFuzzer target: the settings kforge reads from outside — the --redis URL and the
// --token-file — on arbitrary bytes. The first byte picks the parser. A URL that parses
// names a host and a port from 1 to 65535, and what it prints (with the password hidden)
// parses back to the same address; a token file that parses grants each line's role to
// its token and nothing to any other.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "api/auth.hpp"
#include "core/storage/redis.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kforge;
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 2) {
    case 0: {
      auto u = core::storage::RedisUrl::parse(text);
      if (!u) {
        if (u.error().message.empty()) std::abort();
        break;
      }
      if (u->host.empty() || u->port < 1 || u->port > 65535 || u->db < 0) std::abort();
      auto again = core::storage::RedisUrl::parse(u->redacted());
      if (!again || again->host != u->host || again->port != u->port || again->db != u->db) std::abort();
      break;
    }
    case 1: {
      auto auth = api::Auth::parse(text, "tokens");
      if (!auth) {
        if (auth.error().fields.empty() && auth.error().message.empty()) std::abort();
        break;
      }
      if (!auth->enabled() || auth->tokens() == 0) std::abort();
      if (auth->check("Bearer not-a-token-of-this-file-at-all-0123456789", api::Role::kRead)) {
        // Only a line of the file holding exactly this token could grant it.
        if (text.find("not-a-token-of-this-file-at-all-0123456789") == std::string_view::npos) std::abort();
      }
      break;
    }
  }
  return 0;
}
