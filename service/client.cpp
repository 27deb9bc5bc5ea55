// The client commands: submit, explain, prefetch and toolchains talk to a server over HTTP.
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/fsutil.hpp"
#include "core/toolchain.hpp"
#include "service/commands.hpp"

namespace kforge::cli {
namespace fs = std::filesystem;

namespace {

std::optional<httplib::Client> client_for(const Args& a) {
  const std::string server = setting(a, "server", "");
  if (server.empty()) {
    std::cerr << "kforge: --server URL is required\n";
    return std::nullopt;
  }
  httplib::Client c(server);
  c.set_connection_timeout(10);
  c.set_read_timeout(3600);  // a cold compile can take minutes
  if (std::string token = setting(a, "token", ""); !token.empty()) c.set_bearer_token_auth(token);
  if (a.flags.contains("insecure")) c.enable_server_certificate_verification(false);
  return c;
}

// The request body a client command sends: FILE, or stdin for "-"; nullopt (and a message
// naming `cmd`) when it cannot be read.
std::optional<std::string> read_request(const Args& a, const char* cmd) {
  if (a.positional.size() != 1) {
    std::cerr << "kforge " << cmd << ": expected one FILE.json (or -)\n";
    return std::nullopt;
  }
  if (a.positional[0] == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  auto r = core::read_file(a.positional[0]);
  if (!r) {
    std::cerr << "kforge " << cmd << ": " << r.error().message << "\n";
    return std::nullopt;
  }
  return *r;
}

// An answer that is not a success, on stderr: the problem's detail, fields and log.
void print_failure(const char* cmd, int status, const nlohmann::json& j, const std::string& raw) {
  std::cerr << "kforge " << cmd << ": HTTP " << status << "\n";
  if (j.is_discarded()) {
    std::cerr << raw << "\n";
    return;
  }
  std::cerr << j.value("detail", "") << "\n";
  for (const auto& e : j.value("errors", nlohmann::json::array())) {
    std::cerr << "  " << e.value("field", "") << ": " << e.value("message", "") << "\n";
  }
  if (j.contains("log") && j["log"].is_string()) std::cerr << j["log"].get<std::string>();
}

// POSTs a client command's JSON body; null (and a message naming `cmd`) when the server
// cannot be reached.
httplib::Result post_body(httplib::Client& cli, const Args& a, const char* cmd, const char* path,
                          const std::string& body) {
  auto res = cli.Post(path, body, "application/json");
  if (!res) {
    std::cerr << "kforge " << cmd << ": cannot reach " << setting(a, "server", "") << ": "
              << httplib::to_string(res.error()) << "\n";
  }
  return res;
}

}  // namespace

int submit(const Args& a) {
  auto body = read_request(a, "submit");
  if (!body) return 2;
  auto cli = client_for(a);
  if (!cli) return 2;
  auto res = post_body(*cli, a, "submit", "/kernels", *body);
  if (!res) return 1;
  int status = res->status;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  // 202: the build outlived the request; follow its job until it ends.
  for (std::string location = res->get_header_value("Location");
       status == 202 && !location.empty();) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    auto poll = cli->Get(location);
    if (!poll || poll->status != 200) {
      std::cerr << "kforge submit: cannot follow " << location << "\n";
      return 1;
    }
    auto job = nlohmann::json::parse(poll->body, nullptr, false);
    if (job.is_object() && (job["state"] == "done" || job["state"] == "failed")) {
      status = job.value("http_status", 500);
      j = job["result"];
    }
  }
  if (status != 200 || j.is_discarded()) {
    print_failure("submit", status, j, res->body);
    return 1;
  }
  const std::string name = j["kernel_name"];
  std::cout << "kernel   " << name << "\n"
            << "key      " << j["key"].get<std::string>() << "\n"
            << "cache    " << j.value("cache", "") << "\n"
            << "artifact " << j["artifact"]["bytes"] << " bytes, sha256 "
            << j["artifact"]["sha256"].get<std::string>() << "\n"
            << "compile  " << j["compile"].value("seconds", 0.0) << " s\n";
  if (auto it = a.flags.find("out"); it != a.flags.end()) {
    fs::path out = it->second;
    fs::create_directories(out);
    auto fetch = [&](const std::string& url, const fs::path& dest) -> bool {
      auto r = cli->Get(url);
      if (!r || r->status != 200) {
        std::cerr << "kforge submit: GET " << url << " failed\n";
        return false;
      }
      return core::write_file_atomic(dest, r->body).has_value();
    };
    std::string ext = j["backend"] == "cpu" ? ".cpp" : j["backend"] == "cuda" ? ".cu" : ".hip";
    bool ok =
        fetch(j["artifact"]["url"], out / (name + ".so")) &&
        fetch(j["source_url"], out / (name + ext)) &&
        (!j.contains("object") || fetch(j["object"]["url"], out / (name + ".o"))) &&
        core::write_file_atomic(out / (name + "_wrapper.py"),
                                j["wrapper"]["python"].get<std::string>()) &&
        core::write_file_atomic(out / (name + ".h"), j["wrapper"]["cpp"].get<std::string>()) &&
        core::write_file_atomic(out / (name + ".json"), j.dump(2));
    if (!ok) return 1;
    std::cout << "written  " << (out / name).string() << ".{so," << ext.substr(1) << ",h,json} and "
              << name << "_wrapper.py\n";
  }
  return 0;
}

namespace {

std::string utc_time(int64_t unix_s) {
  const std::time_t t = unix_s;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

// The reason a miss-explanation gives, one input per line (a source diff indented below).
void print_miss_reason(const nlohmann::json& reason) {
  auto text = [](const nlohmann::json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_array() && std::all_of(v.begin(), v.end(), [](const auto& x) { return x.is_string(); })) {
      std::string out;
      for (const auto& x : v) out += (out.empty() ? "" : " ") + x.get<std::string>();
      return out.empty() ? std::string("(none)") : out;
    }
    return v.dump();
  };
  for (const auto& item : reason) {
    const std::string input = item.value("input", "");
    if (item.contains("detail") && !item.contains("was")) {
      std::cout << "  " << input << ": " << item["detail"].get<std::string>() << "\n";
      continue;
    }
    if (item.contains("diff")) {
      std::cout << "  " << input << ":\n";
      std::istringstream lines(item["diff"].get<std::string>());
      for (std::string line; std::getline(lines, line);) std::cout << "    " << line << "\n";
      continue;
    }
    std::cout << "  " << input << ": was " << text(item["was"]) << ", now " << text(item["now"]);
    if (item.contains("detail")) std::cout << " (" << item["detail"].get<std::string>() << ")";
    std::cout << "\n";
  }
}

}  // namespace

int explain(const Args& a) {
  auto body = read_request(a, "explain");
  if (!body) return 2;
  auto cli = client_for(a);
  if (!cli) return 2;
  auto res = post_body(*cli, a, "explain", "/explain", *body);
  if (!res) return 1;
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (res->status != 200 || !j.is_object()) {
    print_failure("explain", res->status, j, res->body);
    return 1;
  }
  if (a.flags.contains("json")) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "kernel   " << j.value("kernel_name", "") << "\n"
            << "key      " << j.value("key", "") << "\n"
            << "cache    " << j.value("cache", "") << "\n";
  const auto& near = j["nearest"];
  if (near.is_object()) {
    std::cout << "nearest  " << near.value("key", "") << " (" << near.value("kernel_name", "") << ", built "
              << utc_time(near.value("created_at", int64_t{0})) << ")\n";
  }
  if (!j.value("miss_reason", nlohmann::json::array()).empty()) {
    std::cout << "why\n";
    print_miss_reason(j["miss_reason"]);
  }
  return 0;
}

int toolchains(const Args& a) {
  std::string server = setting(a, "server", "");
  if (server.empty()) {
    std::cout << core::Toolchains::discover().to_json().dump(2) << "\n";
    return 0;
  }
  auto cli = client_for(a);
  auto res = cli->Get("/toolchains");
  if (!res || res->status != 200) {
    std::cerr << "kforge toolchains: cannot query " << server << "\n";
    return 1;
  }
  std::cout << res->body;
  return 0;
}


namespace {

// `kforge prefetch`: the requests of MANIFEST as the body of POST /prefetch. A manifest
// object is sent as it is; a JSON list, or JSON lines (one request per line, as a client
// records them), become {"format": "kforge-prefetch/1", "label": <file name>, "requests"}.
std::optional<nlohmann::json> read_prefetch_manifest(const std::string& name) {
  std::string text;
  if (name == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    auto r = core::read_file(name);
    if (!r) {
      std::cerr << "kforge prefetch: " << r.error().message << "\n";
      return std::nullopt;
    }
    text = std::move(*r);
  }
  nlohmann::json requests = nlohmann::json::array();
  auto whole = nlohmann::json::parse(text, nullptr, false);
  if (whole.is_object() && whole.contains("requests")) return whole;
  if (whole.is_array()) {
    requests = std::move(whole);
  } else if (whole.is_object()) {
    requests.push_back(std::move(whole));
  } else {
    std::istringstream in(text);
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto req = nlohmann::json::parse(line, nullptr, false);
      if (!req.is_object()) {
        std::cerr << "kforge prefetch: " << name << ":" << n
                  << ": expected a JSON request object per line (or one JSON manifest)\n";
        return std::nullopt;
      }
      requests.push_back(std::move(req));
    }
  }
  if (requests.empty()) {
    std::cerr << "kforge prefetch: " << name << " holds no requests\n";
    return std::nullopt;
  }
  return nlohmann::json{{"format", "kforge-prefetch/1"},
                        {"label", fs::path(name).filename().string().substr(0, 200)},
                        {"requests", std::move(requests)}};
}

}  // namespace

int prefetch(const Args& a) {
  if (a.positional.size() != 1) {
    std::cerr << "kforge prefetch: expected one MANIFEST (or -)\n";
    return 2;
  }
  auto body = read_prefetch_manifest(a.positional[0]);
  if (!body) return 2;
  auto cli = client_for(a);
  if (!cli) return 2;
  const std::string server = setting(a, "server", "");
  auto res = cli->Post("/prefetch", {{"Prefer", "respond-async"}}, body->dump(), "application/json");
  if (!res) {
    std::cerr << "kforge prefetch: cannot reach " << server << ": " << httplib::to_string(res.error()) << "\n";
    return 1;
  }
  auto job = nlohmann::json::parse(res->body, nullptr, false);
  if ((res->status != 200 && res->status != 202) || !job.is_object() || !job.contains("id")) {
    std::cerr << "kforge prefetch: HTTP " << res->status << "\n";
    if (job.is_object()) {
      std::cerr << job.value("detail", "") << "\n";
      for (const auto& e : job.value("errors", nlohmann::json::array()))
        std::cerr << "  " << e.value("field", "") << ": " << e.value("message", "") << "\n";
    } else {
      std::cerr << res->body << "\n";
    }
    return 1;
  }
  const std::string id = job["id"];
  const bool tty = ::isatty(STDOUT_FILENO);
  std::set<int64_t> shown;  // entries already printed, by index
  auto show = [&](const nlohmann::json& j) {
    const auto p = j.value("prefetch", nlohmann::json::object());
    const int64_t total = p.value("total", 0), done = p.value("done", 0);
    if (tty) {
      const int width = 30;
      const int filled = total ? static_cast<int>(width * done / total) : 0;
      std::cout << "\r[" << std::string(filled, '#') << std::string(width - filled, '.') << "] " << done << "/"
                << total << "  hit " << p.value("hit", 0) << " built " << p.value("built", 0) << " failed "
                << p.value("failed", 0) << std::flush;
      return;
    }
    for (const auto& e : p.value("recent", nlohmann::json::array())) {
      if (!shown.insert(e.value("index", int64_t{-1})).second) continue;
      std::cout << e.value("seq", 0) << "/" << total << " " << e.value("outcome", "?") << " #"
                << e.value("index", -1) << " " << e.value("kernel_name", nlohmann::json("-")).dump()
                << (e.contains("label") ? " " + e["label"].get<std::string>() : "") << "\n";
    }
  };
  // Follow the job's events to its end; a stream that ends early is opened again, and
  // polled where streaming does not work.
  nlohmann::json end;
  for (int attempt = 0; attempt < 5 && end.is_null(); ++attempt) {
    std::string buffer;
    cli->Get("/jobs/" + id + "/events", {{"Accept", "text/event-stream"}}, [&](const char* data, size_t n) {
      buffer.append(data, n);
      for (size_t cut; (cut = buffer.find("\n\n")) != std::string::npos;) {
        std::string event, payload;
        std::istringstream frame(buffer.substr(0, cut));
        buffer.erase(0, cut + 2);
        for (std::string line; std::getline(frame, line);) {
          if (line.starts_with("event: ")) event = line.substr(7);
          if (line.starts_with("data: ")) payload += line.substr(6);
        }
        auto j = nlohmann::json::parse(payload, nullptr, false);
        if (!j.is_object()) continue;
        show(j);
        if (event == "end") {
          end = std::move(j);
          return false;  // done: close the stream
        }
      }
      return true;
    });
    if (end.is_null()) {
      auto poll = cli->Get("/jobs/" + id);
      auto j = poll && poll->status == 200 ? nlohmann::json::parse(poll->body, nullptr, false) : nlohmann::json();
      if (j.is_object() && (j["state"] == "done" || j["state"] == "failed")) end = j;
      else if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  if (tty) std::cout << "\n";
  if (end.is_null()) {
    std::cerr << "kforge prefetch: lost job " << id << " on " << server << "\n";
    return 1;
  }
  nlohmann::json result = end.value("result", nlohmann::json::object());
  if (end.value("http_status", 0) != 200) {  // the service went down mid-way
    std::cerr << "kforge prefetch: job " << id << " failed: " << result.value("detail", "") << "\n";
    result = result.value("prefetch", nlohmann::json::object());
  }
  const auto entries = result.value("entries", nlohmann::json::array());
  if (!tty) {  // what the events did not show (a stream may skip events)
    for (const auto& e : entries) {
      if (e["outcome"].is_null() || shown.contains(e.value("index", int64_t{-1}))) continue;
      std::cout << e.value("seq", 0) << "/" << entries.size() << " " << e.value("outcome", "?") << " #"
                << e.value("index", -1) << " " << e.value("kernel_name", nlohmann::json("-")).dump()
                << (e.contains("label") ? " " + e["label"].get<std::string>() : "") << "\n";
    }
  }
  const int64_t failed = result.value("failed", 0), done = result.value("done", 0), total = result.value("total", 0);
  std::cout << "prefetch " << id << ": " << done << "/" << total << " requests in " << std::fixed
            << std::setprecision(1) << result.value("seconds", 0.0) << " s: " << result.value("hit", 0) << " hit, "
            << result.value("built", 0) << " built, " << failed << " failed\n";
  for (const auto& e : entries) {
    if (e.value("outcome", "") != "failed") continue;
    const auto err = e.value("error", nlohmann::json::object());
    std::cout << "failed #" << e.value("index", -1) << (e.contains("label") ? " " + e["label"].get<std::string>() : "")
              << ": " << err.value("detail", "") << "\n";
    if (err.contains("log")) {
      std::istringstream log(err["log"].get<std::string>());
      int lines = 0;
      for (std::string line; std::getline(log, line) && lines < 20; ++lines) std::cout << "    " << line << "\n";
    }
  }
  return failed == 0 && done == total && end.value("http_status", 0) == 200 ? 0 : 1;
}

}  // namespace kforge::cli
