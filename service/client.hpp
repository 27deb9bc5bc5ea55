// What the client commands (compile, explain, prefetch, toolchains) share: the flags that
// name a server, the HTTP client they make, and the messages for an answer that is not a
// success. Each function that fails prints why, naming the command; the exit statuses are
// commands.hpp's (3 when the server cannot be reached).
#pragma once

#include <httplib.h>

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace CLI {
class App;
}

namespace kforge::cli {

struct ClientOptions {
  std::string server;  // --server URL, or KFORGE_URL
  std::string token;   // --token T, or KFORGE_TOKEN: sent as `Authorization: Bearer T`
  bool insecure = false;  // --insecure: do not verify an HTTPS server's certificate
};

// Declares --server, --token and --insecure on `command`.
void add_client_options(CLI::App& command, ClientOptions& o);

// A client for o.server; nullopt (after saying so) when there is none.
std::optional<httplib::Client> client_for(const ClientOptions& o, const char* cmd);

// FILE's bytes, or stdin's for "-"; nullopt (after saying why) when it cannot be read.
std::optional<std::string> read_input(const std::string& file, const char* cmd);
// A request: FILE holding one JSON object; nullopt (after saying why) when it does not.
std::optional<std::string> read_request(const std::string& file, const char* cmd);

// POSTs a JSON body; a null result (after saying so) when the server cannot be reached.
httplib::Result post_json(httplib::Client& cli, const ClientOptions& o, const char* cmd, const char* path,
                          const std::string& body, const httplib::Headers& headers = {});
// Why no answer came from `url`, in words: "connection refused", "no such host ...".
std::string unreachable_reason(const std::string& url, httplib::Error error);
// Says on stderr that `cmd` cannot reach the server, and why.
void print_unreachable(const char* cmd, const ClientOptions& o, httplib::Error error);

// An answer that is not a success, on stderr: the problem's detail, fields and log.
void print_failure(const char* cmd, int status, const nlohmann::json& j, const std::string& raw);

}  // namespace kforge::cli
