#include "service/client.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "core/base/fsutil.hpp"

namespace kforge::cli {

void add_client_options(CLI::App& command, ClientOptions& o) {
  command.add_option("--server", o.server, "the server's URL, e.g. http://127.0.0.1:8080")
      ->envname("KFORGE_URL")
      ->type_name("URL");
  command.add_option("--token", o.token, "bearer token (a line of the server's --token-file)")
      ->envname("KFORGE_TOKEN")
      ->type_name("T");
  command.add_flag("--insecure", o.insecure, "do not verify an HTTPS server's certificate");
}

std::optional<httplib::Client> client_for(const ClientOptions& o, const char* cmd) {
  if (o.server.empty()) {
    std::cerr << "kforge " << cmd << ": --server URL (or KFORGE_URL) is required\n";
    return std::nullopt;
  }
  if (!o.server.starts_with("http://") && !o.server.starts_with("https://")) {
    std::cerr << "kforge " << cmd << ": --server is http(s)://HOST[:PORT], not `" << o.server << "`\n";
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

std::optional<std::string> read_request(const std::string& file, const char* cmd) {
  auto text = read_input(file, cmd);
  if (!text) return std::nullopt;
  if (!nlohmann::json::parse(*text, nullptr, false).is_object()) {
    std::cerr << "kforge " << cmd << ": " << (file == "-" ? "stdin" : file)
              << " does not hold a JSON object (a POST /kernels body)\n";
    return std::nullopt;
  }
  return text;
}

namespace {

// Connects to the URL's host and port once more, to say why httplib could not.
std::string connect_failure(const std::string& url) {
  std::string rest = url.substr(url.find("://") + 3);
  rest = rest.substr(0, rest.find('/'));
  std::string host = rest, port = url.starts_with("https://") ? "443" : "80";
  if (rest.starts_with('[')) {  // [v6]:port
    const size_t close = rest.find(']');
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return "no such host `" + host + "` (" + ::gai_strerror(rc) + ")";
  std::string why = "cannot connect";
  for (addrinfo* a = found; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      socklen_t len = sizeof err;
      err = ::poll(&p, 1, 5000) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 ? err : ETIMEDOUT;
    }
    ::close(fd);
    if (err == 0) {
      why = "it took no connection then, but does now";
      break;
    }
    why = std::strerror(err);
    if (!why.empty()) why[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(why[0])));
  }
  ::freeaddrinfo(found);
  return why;
}

}  // namespace

std::string unreachable_reason(const std::string& url, httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return connect_failure(url);
    case httplib::Error::ConnectionTimeout:
      return "no connection within 10 s";
    case httplib::Error::Read:
      return "the connection closed before a whole answer came";
    case httplib::Error::Write:
      return "the connection closed while the request was being sent";
    case httplib::Error::SSLConnection:
      return "the TLS handshake failed (is it an https:// server?)";
    case httplib::Error::SSLServerVerification:
      return "its TLS certificate is not trusted (--insecure skips the check)";
    case httplib::Error::SSLLoadingCerts:
      return "the system's CA certificates could not be loaded";
    default:
      return httplib::to_string(error);
  }
}

void print_unreachable(const char* cmd, const ClientOptions& o, httplib::Error error) {
  std::cerr << "kforge " << cmd << ": cannot reach " << o.server << ": " << unreachable_reason(o.server, error) << "\n";
}

httplib::Result post_json(httplib::Client& cli, const ClientOptions& o, const char* cmd, const char* path,
                          const std::string& body, const httplib::Headers& headers) {
  auto res = cli.Post(path, headers, body, "application/json");
  if (!res) print_unreachable(cmd, o, res.error());
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
