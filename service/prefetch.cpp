// `kforge prefetch MANIFEST --server URL`: POSTs the requests of MANIFEST to /prefetch and
// follows the job: a progress bar on a terminal, else one line per finished request; then
// a summary and each failure's error.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>

#include "service/client.hpp"
#include "service/commands.hpp"

namespace kforge::cli {
namespace fs = std::filesystem;
namespace {

struct Options {
  ClientOptions client;
  std::string manifest;
};

// The requests of MANIFEST as the body of POST /prefetch. A manifest object is sent as it
// is; a JSON list, or JSON lines (one request per line, as a client records them), become
// {"format": "kforge-prefetch/1", "label": <file name>, "requests"}.
std::optional<nlohmann::json> read_prefetch_manifest(const std::string& name) {
  auto text = read_input(name, "prefetch");
  if (!text) return std::nullopt;
  nlohmann::json requests = nlohmann::json::array();
  auto whole = nlohmann::json::parse(*text, nullptr, false);
  if (whole.is_object() && whole.contains("requests")) return whole;
  if (whole.is_array()) {
    requests = std::move(whole);
  } else if (whole.is_object()) {
    requests.push_back(std::move(whole));
  } else {
    std::istringstream in(*text);
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

// One finished entry: "3/6 built #2 cpu_kernel_1a2b3c4d5e6f label" (no name when it has none).
std::string entry_line(const nlohmann::json& e, size_t total) {
  std::string line = std::to_string(e.value("seq", 0)) + "/" + std::to_string(total) + " " + e.value("outcome", "?") +
                     " #" + std::to_string(e.value("index", -1));
  if (e.contains("kernel_name") && e["kernel_name"].is_string()) line += " " + e["kernel_name"].get<std::string>();
  if (e.contains("label") && e["label"].is_string()) line += " " + e["label"].get<std::string>();
  return line;
}

int prefetch(const Options& o) {
  auto body = read_prefetch_manifest(o.manifest);
  if (!body) return kExitUsage;
  auto cli = client_for(o.client, "prefetch");
  if (!cli) return kExitUsage;
  auto res = post_json(*cli, o.client, "prefetch", "/prefetch", body->dump(), {{"Prefer", "respond-async"}});
  if (!res) return kExitUnreachable;
  auto job = nlohmann::json::parse(res->body, nullptr, false);
  if ((res->status != 200 && res->status != 202) || !job.is_object() || !job.contains("id")) {
    print_failure("prefetch", res->status, job, res->body);
    return kExitFailed;
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
      if (shown.insert(e.value("index", int64_t{-1})).second) std::cout << entry_line(e, total) << "\n";
    }
  };
  // Follow the job's events to its end; a stream that ends early is opened again, and
  // polled where streaming does not work.
  nlohmann::json end;
  httplib::Error last_error = httplib::Error::Success;  // of the last poll that got no answer
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
      last_error = poll ? httplib::Error::Success : poll.error();
      auto j = poll && poll->status == 200 ? nlohmann::json::parse(poll->body, nullptr, false) : nlohmann::json();
      if (j.is_object() && (j["state"] == "done" || j["state"] == "failed")) end = j;
      else if (attempt > 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  if (tty) std::cout << "\n";
  if (end.is_null()) {
    if (last_error != httplib::Error::Success) {
      print_unreachable("prefetch", o.client, last_error);
      std::cerr << "kforge prefetch: job " << id << " was left running there\n";
      return kExitUnreachable;
    }
    std::cerr << "kforge prefetch: lost job " << id << " on " << o.client.server << "\n";
    return kExitFailed;
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
      std::cout << entry_line(e, entries.size()) << "\n";
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
  return failed == 0 && done == total && end.value("http_status", 0) == 200 ? kExitOk : kExitFailed;
}

}  // namespace

Run declare_prefetch(CLI::App& command) {
  auto o = std::make_shared<Options>();
  command.footer(
      "POSTs the requests in MANIFEST to URL/prefetch and follows the job: a progress bar on a\n"
      "terminal, else one line per finished request; then a summary and each failure's error.\n"
      "MANIFEST is a manifest {\"format\": \"kforge-prefetch/1\", \"requests\": [...]}, a JSON list of\n"
      "requests, or JSON lines of requests (what a client records with KFORGE_RECORD=FILE).\n"
      "Exit status 0 when every request is a hit or built, 1 otherwise.");
  command.add_option("MANIFEST", o->manifest, "the requests (- for stdin)")->required()->type_name("");
  add_client_options(command, o->client);
  return [o] { return prefetch(*o); };
}

}  // namespace kforge::cli
