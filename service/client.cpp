#include "service/client.hpp"

#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/fsutil.hpp"

namespace kforge::cli {

void add_client_options(CLI::App& command, ClientOptions& o) {
  command.add_option("--server", o.server, "the server's URL, e.g. http://127.0.0.1:8080")
      ->envname("KFORGE_SERVER")
      ->type_name("URL");
  command.add_option("--token", o.token, "bearer token (a line of the server's --token-file)")
      ->envname("KFORGE_TOKEN")
      ->type_name("T");
  command.add_flag("--insecure", o.insecure, "do not verify an HTTPS server's certificate");
}

std::optional<httplib::Client> client_for(const ClientOptions& o, const char* cmd) {
  if (o.server.empty()) {
    std::cerr << "kforge " << cmd << ": --server URL is required\n";
    return std::nullopt;
  }
  httplib::Client c(o.server);
  c.set_connection_timeout(10);
  c.set_read_timeout(3600);  // a cold compile can take minutes
  if (!o.token.empty()) c.set_bearer_token_auth(o.token);
  if (o.insecure) c.enable_server_certificate_verification(false);
  return c;
}

std::optional<std::string> read_input(const std::string& file, const char* cmd) {
  if (file == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  auto r = core::read_file(file);
  if (!r) {
    std::cerr << "kforge " << cmd << ": " << r.error().message << "\n";
    return std::nullopt;
  }
  return *r;
}

httplib::Result post_json(httplib::Client& cli, const ClientOptions& o, const char* cmd, const char* path,
                          const std::string& body, const httplib::Headers& headers) {
  auto res = cli.Post(path, headers, body, "application/json");
  if (!res) {
    std::cerr << "kforge " << cmd << ": cannot reach " << o.server << ": " << httplib::to_string(res.error()) << "\n";
  }
  return res;
}

void print_failure(const char* cmd, int status, const nlohmann::json& j, const std::string& raw) {
  std::cerr << "kforge " << cmd << ": HTTP " << status << "\n";
  if (!j.is_object()) {
    std::cerr << raw << "\n";
    return;
  }
  std::cerr << j.value("detail", "") << "\n";
  for (const auto& e : j.value("errors", nlohmann::json::array())) {
    std::cerr << "  " << e.value("field", "") << ": " << e.value("message", "") << "\n";
  }
  if (j.contains("log") && j["log"].is_string()) std::cerr << j["log"].get<std::string>();
}

}  // namespace kforge::cli
