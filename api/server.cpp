#include "api/server.hpp"

#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "api/http_util.hpp"
#include "core/base/fsutil.hpp"
#include "core/base/utf8.hpp"
#include "core/build/wrapper.hpp"

namespace kforge::api {
namespace {

thread_local std::chrono::steady_clock::time_point t_request_start;
// The OpenAPI path of the route that handles this thread's request (set by route()),
// for the access log and the metrics: no pattern is matched twice.
thread_local const char* t_route = "unmatched";

}  // namespace

// httplib's server with its request processing reachable: the event front hands it each
// request that is not a hit (api/front.hpp).
class HttpCore : public httplib::Server {
 public:
  using httplib::Server::process_request;
  // One request from `strm`. httplib 0.11 (Debian 12) reads the peer's and its own address
  // from the stream; later releases (0.18 of Debian 13) take them as arguments. A template,
  // so that only the call this httplib has is compiled.
  template <class Core = HttpCore>
  bool serve_one(httplib::Stream& strm, bool& closed) {
    Core& core = *this;
    if constexpr (requires { core.process_request(strm, false, closed, nullptr); }) {
      return core.process_request(strm, false, closed, nullptr);
    } else {
      std::string remote, local;
      int remote_port = 0, local_port = 0;
      strm.get_remote_ip_and_port(remote, remote_port);
      strm.get_local_ip_and_port(local, local_port);
      return core.process_request(strm, remote, remote_port, local, local_port, false, closed, nullptr);
    }
  }
  // httplib ends a streamed body (job events, an export) when its own listening socket is
  // gone; the front's socket stands in for it while the front serves.
  void serving(socket_t listening) { svr_sock_ = listening; }
};

// A client's X-Request-Id is kept when it is short and plain; otherwise we make one.
std::string request_id(std::string_view header) {
  std::string id(header);
  bool plain = !id.empty() && id.size() <= 64;
  for (char c : id)
    plain =
        plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  return plain ? id : core::unique_suffix();
}

nlohmann::json kernel_view(const nlohmann::json& m) {
  const std::string key = m.value("key", "");
  const std::string base = "/kernels/" + key;
  nlohmann::json j = {{"key", key},
                      {"status", m.value("status", "ok")},
                      {"kernel_name", m.value("kernel_name", "")},
                      {"backend", m.value("backend", "")},
                      {"archs", m.value("archs", nlohmann::json::array())},
                      {"created_at", m.value("created_at", 0)},
                      {"source_url", base + "/source"},
                      {"log_url", base + "/log"}};
  const auto& files = m["files"];
  if (files.contains("kernel.so")) {
    j["artifact"] = {{"url", base + "/artifact"},
                     {"sha256", files["kernel.so"]["sha256"]},
                     {"bytes", files["kernel.so"]["bytes"]}};
  }
  if (files.contains("kernel.o")) {
    j["object"] = {{"url", base + "/object"},
                   {"sha256", files["kernel.o"]["sha256"]},
                   {"bytes", files["kernel.o"]["bytes"]}};
  }
  if (m.contains("abi")) {
    j["abi"] = m["abi"];
    // An entry built before ABIs carried tensor layouts (issue 40): a template kernel whose
    // every scalar is fixed was rendered for exactly its request's tensors, which the
    // manifest's template holds; one that takes M at run time is left without.
    const auto& t = m.contains("template") ? m["template"] : nlohmann::json();
    auto& args = j["abi"]["args"];
    const bool all_fixed = args.is_array() && std::all_of(args.begin(), args.end(), [](const nlohmann::json& a) {
      return a.value("kind", "") != "scalar" || a.contains("value");
    });
    if (t.is_object() && all_fixed) {
      const nlohmann::json inputs = t.value("inputs", nlohmann::json::array());
      std::vector<nlohmann::json> tensors(inputs.begin(), inputs.end());
      if (t.contains("output")) tensors.push_back(t["output"]);
      for (auto& a : args) {
        if (a.value("kind", "") != "tensor" || a.contains("sizes")) continue;
        for (const auto& tm : tensors) {
          if (!tm.is_object() || tm.value("name", "") != a.value("binds", "") || !tm.contains("sizes") ||
              !tm.contains("strides"))
            continue;
          a["sizes"] = tm["sizes"];
          a["strides"] = tm["strides"];
          a["offset"] = tm.value("offset", 0);
          break;
        }
      }
    }
    j["workspace_bytes"] = m["abi"].value("workspace_bytes", nlohmann::json(nullptr));
    auto abi = core::Abi::from_json(j["abi"]);
    auto backend = core::parse_backend(m.value("backend", ""));
    if (abi && backend && m.value("status", "") == "ok") {
      j["wrapper"] = {{"python", core::python_wrapper(*abi, *backend)},
                      {"cpp", core::cpp_wrapper(*abi, *backend)}};
    }
  }
  if (m.contains("compile")) {
    j["compile"] = m["compile"];
    j["compile"].erase("log_text");
  }
  if (m.contains("code_objects")) j["code_objects"] = m["code_objects"];
  if (m.contains("template")) j["template"] = m["template"];
  if (m.contains("export")) j["export"] = m["export"];
  if (!m.value("built_by", "").empty()) j["built_by"] = m["built_by"];  // the cluster instance  // {name, of: the name-independent key, steps}
  if (m.contains("expires_at")) j["expires_at"] = m["expires_at"];
  return j;
}

Server::Server(ServerConfig config, Services services)
    : config_(std::move(config)),
      svc_(services),
      jobs_({config_.compile_jobs, config_.max_queue, config_.job_history, config_.instance},
            [this](const core::Job& job) {
              nlohmann::json j = job.to_json(false);
              core::log::info("job")
                  .json("job", j["id"])
                  .json("state", j["state"])
                  .json("kind", j["kind"])
                  .json("key", j.value("key", nlohmann::json(nullptr)))
                  .json("cache", j["cache"])
                  .str("request_id", j.value("request_id", ""))
                  .json("http_status", j["http_status"]);
              prefetch_wake();
            }),
      autotuner_(svc_.builder, svc_.bencher, svc_.store,
                 [this](const core::KernelRequest& r) { return build_queued(r, "autotune"); }) {
  if (tls()) {
    http_ = std::make_unique<httplib::SSLServer>(config_.tls_cert.c_str(), config_.tls_key.c_str());
  } else {
    auto core = std::make_unique<HttpCore>();
    core_ = core.get();
    http_ = std::move(core);
    FrontConfig fc;
    fc.loops = config_.http_loops;
    fc.workers = config_.http_threads;
    fc.read_timeout_s = config_.read_timeout_s;
    fc.write_timeout_s = config_.write_timeout_s;
    fc.keep_alive_timeout_s = kKeepAliveSeconds;
    fc.header_timeout_s = config_.header_timeout_s;
    fc.body_timeout_s = config_.body_timeout_s;
    fc.min_body_rate = config_.min_body_rate;
    fc.max_body = std::max(config_.max_body_bytes, config_.max_import_bytes);
    fc.max_connections = config_.max_connections;
    fc.max_connections_per_client = config_.max_connections_per_client;
    front_ = std::make_unique<EventFront>(fc, static_cast<FrontHandler&>(*this));
  }
  const size_t threads = config_.http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // One payload limit for every route in httplib 0.11: the larger of the two. route() refuses
  // a body over --max-body on every other route.
  http_->set_payload_max_length(std::max(config_.max_body_bytes, config_.max_import_bytes));
  http_->set_read_timeout(config_.read_timeout_s);
  http_->set_write_timeout(config_.write_timeout_s);
  http_->set_keep_alive_timeout(kKeepAliveSeconds);
  http_->set_keep_alive_max_count(10000);
  http_->set_tcp_nodelay(true);  // small answers must not wait out delayed ACKs (40 ms)
  http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    t_request_start = std::chrono::steady_clock::now();
    t_route = "unmatched";
    res.set_header("X-Request-Id", request_id(req.get_header_value("X-Request-Id")));
    // httplib reads (skips) a body over the limit before it answers 413, so that a client
    // still sending it gets the answer rather than a reset; but strtoull makes "-1", 2^64
    // or "0x10" into a length no client will ever send, and the request would hold its
    // thread until the read timeout. Those are refused here, before any body is read.
    if (req.has_header("Content-Length")) {
      const std::string len = req.get_header_value("Content-Length");
      const bool digits = !len.empty() && len.size() <= 19 &&
                          len.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoull(len) > uint64_t(INT64_MAX)) {
        res.set_header("Connection", "close");
        send_problem(res, problem_json(400,
                                       "Content-Length is not a byte count (decimal digits, under 2^63)",
                                       ""));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    // Every body kforge takes is JSON, whatever the client labels it. A body labelled
    // application/x-www-form-urlencoded (the default of `curl -d` and of Python's urllib)
    // would be parsed as a form by httplib, which refuses such a body past 8 KiB with a 413
    // — and a kernel source is bigger than that. The label is dropped before httplib reads
    // the body (the Request is httplib's own mutable object; only its handler type is const).
    if (req.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded")) {
      auto& headers = const_cast<httplib::Request&>(req).headers;
      headers.erase("Content-Type");
      headers.emplace("Content-Type", "application/json");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Statuses that httplib sets itself (404 for an unknown route, 413, 400 for a malformed
  // request) get a problem body too; bodies our handlers wrote are left alone.
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) return send_problem(res, too_large(req.path == "/cache/import"));
    std::string detail = res.status == 404 ? "no route for " + core::sanitize_utf8(req.method + " " + req.path)
                                           : "the request could not be processed";
    send_problem(res, problem_json(res.status, detail));
  });
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        core::log::error("error", "internal error: " + what);
        send_problem(res, problem_json(500, "internal error: " + what));
      });
  // The access log: one record per request. Never the Authorization header.
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                t_request_start)
                          .count();
    access_log(res.get_header_value("X-Request-Id"), req.method, req.path, t_route, res.status, ms,
               res.body.size(), req.remote_addr);
  });
  kernel_routes();
  cache_routes();
  job_routes();
  status_routes();
  prefetch_routes();
}

Server::~Server() { stop_prefetch(); }

void Server::route(const char* method, const std::string& api_path, const std::string& pattern,
                   Role role, Handler handler) {
  // One entry per OpenAPI path, however many patterns serve it (the page's files).
  if (std::find(routes_.begin(), routes_.end(), std::pair<std::string, std::string>(method, api_path)) ==
      routes_.end()) {
    routes_.push_back({method, api_path});
  }
  // The label lives as long as the server (a deque keeps its strings' addresses).
  const char* label = route_labels_.emplace_back(api_path).c_str();
  Handler guarded = [this, role, label, h = std::move(handler)](const httplib::Request& req,
                                                                httplib::Response& res) {
    t_route = label;
    if (req.body.size() > config_.max_body_bytes) return send_problem(res, too_large(false));
    if (role != Role::kNone) {
      if (auto ok = svc_.auth.check(req.get_header_value("Authorization"), role); !ok)
        return send_error(res, ok.error());
    }
    h(req, res);
  };
  if (std::string(method) == "POST") {
    http_->Post(pattern, std::move(guarded));
  } else {
    http_->Get(pattern, std::move(guarded));
  }
}

void Server::route_reader(const std::string& api_path, Role role, ReaderHandler handler) {
  routes_.push_back({"POST", api_path});
  const char* label = route_labels_.emplace_back(api_path).c_str();
  http_->Post(api_path, [this, role, label, h = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                                                   const httplib::ContentReader& reader) {
    t_route = label;
    if (role != Role::kNone) {
      if (auto ok = svc_.auth.check(req.get_header_value("Authorization"), role); !ok) {
        reader([](const char*, size_t) { return true; });  // read and dropped: the client gets the answer
        return send_error(res, ok.error());
      }
    }
    h(req, res, reader);
  });
}

void Server::access_log(const std::string& request_id, std::string_view method, std::string_view path,
                        const std::string& route, int status, double ms, size_t bytes, std::string_view client) {
  metrics_.request(route, std::string(method), status);
  core::log::info("access")
      .str("request_id", request_id)
      .str("method", method)
      .str("path", path)
      .str("route", route)
      .num("status", status)
      .fixed("ms", ms, 3)
      .num("bytes", uint64_t{bytes})
      .str("client", client);
}

bool Server::serve(httplib::Stream& stream) {
  bool closed = false;
  const bool ok = core_->serve_one(stream, closed);
  return ok && !closed;
}

void Server::refuse(const FrontRefusal& why, std::string& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string rid = core::unique_suffix();
  const std::string body = problem_json(why.status, std::string(why.detail)).dump();
  FrontRequest r;
  r.keep_alive = false;  // "Connection: close"
  r.method = why.method == "HEAD" ? "HEAD" : "";
  std::vector<std::pair<std::string_view, std::string_view>> headers = {{"Content-Type", "application/problem+json"},
                                                                        {"X-Request-Id", rid}};
  if (!why.allow.empty()) headers.emplace_back("Allow", why.allow);
  append_response(out, r, why.status, headers, body, kKeepAliveSeconds);
  access_log(rid, why.method, why.target.substr(0, why.target.find('?')), "unparsed", why.status,
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), body.size(),
             why.remote_addr);
}

std::string Server::allowed(std::string_view path) const {
  // Each route's OpenAPI path, a `{name}` standing for one non-empty segment.
  auto matches = [](std::string_view pattern, std::string_view p) {
    while (!pattern.empty() && !p.empty()) {
      const size_t a = pattern.find('/', 1), b = p.find('/', 1);
      const std::string_view ps = pattern.substr(0, a), s = p.substr(0, b);
      const bool param = ps.size() > 2 && ps[1] == '{' && ps.back() == '}';
      if (param ? s.size() < 2 : ps != s) return false;
      pattern.remove_prefix(ps.size());
      p.remove_prefix(s.size());
    }
    return pattern.empty() && p.empty();
  };
  bool get = false, post = false;
  for (const auto& [method, pattern] : routes_) {
    if (!matches(pattern, path)) continue;
    get = get || method == "GET";
    post = post || method == "POST";
  }
  return get && post ? "GET, HEAD, POST" : get ? "GET, HEAD" : post ? "POST" : "";
}

void Server::log_line(nlohmann::json line) {
  // The event's fields as they are; one that carries an "error" is logged at level error.
  const std::string event = line.value("event", "event");
  line.erase("event");
  core::log::Record r(line.contains("error") ? core::log::Level::kError : core::log::Level::kInfo, event);
  for (const auto& [k, v] : line.items()) r.json(k, v);
}

namespace {

// cpp-httplib listens with a backlog of 5 (compiled into Debian's library), so a burst of
// connections (a build farm, wrk's 64) overflows the accept queue and clients stall or
// fail. listen() again on the bound socket raises the backlog to the system's maximum.
void raise_backlog(int port) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(e.path().filename().c_str());
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    const int bound =
        addr.ss_family == AF_INET    ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
        : addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                     : -1;
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}

}  // namespace

bool Server::valid() const {
  return http_->is_valid();
}

core::Result<int> Server::bind() {
  if (front_) {
    auto port = front_->bind(config_.host, config_.port);
    if (port) core_->serving(front_->listening());
    return port;
  }
  if (!valid()) {
    return core::fail(core::ErrorKind::kInternal,
                      "the TLS server could not be set up from --tls-cert " + config_.tls_cert +
                          " and --tls-key " + config_.tls_key);
  }
  int port = config_.port == 0
                 ? http_->bind_to_any_port(config_.host)
                 : (http_->bind_to_port(config_.host, config_.port) ? config_.port : -1);
  if (port <= 0) {
    return core::fail(core::ErrorKind::kInternal,
                      "cannot bind " + config_.host + ":" + std::to_string(config_.port));
  }
  raise_backlog(port);
  return port;
}

void Server::run() {
  if (front_) return front_->run();
  http_->listen_after_bind();
}
void Server::stop() {
  if (front_) {
    front_->stop();
    core_->serving(INVALID_SOCKET);
  }
  http_->stop();
}

nlohmann::json Server::cache_stats() {
  std::lock_guard lock(cache_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (cache_stats_.is_null() || now - cache_stats_at_ > std::chrono::seconds(5)) {
    cache_stats_ = svc_.store.stats().to_json();
    cache_stats_at_ = now;
  }
  return cache_stats_;
}

void Server::maintain_cache() {
  if (config_.cache_max_bytes == 0) return;
  std::lock_guard lock(cache_mu_);
  // Over the bound: down to 90% of it, so that the next few builds do not each evict.
  auto r = svc_.store.evict(config_.cache_max_bytes / 10 * 9, config_.cache_max_bytes);
  if (r.evicted == 0 && r.kept_pinned == 0) return;
  metrics_.evicted(r.evicted, r.freed_bytes);
  cache_stats_ = nullptr;
  log_line({{"event", "evict"},
            {"evicted", r.evicted},
            {"freed_bytes", r.freed_bytes},
            {"kept_pinned", r.kept_pinned},
            {"bytes_after", r.bytes_after},
            {"max_bytes", config_.cache_max_bytes}});
}

nlohmann::json Server::too_large(bool import) const {
  const size_t limit = import && config_.max_import_bytes ? config_.max_import_bytes : config_.max_body_bytes;
  const char* setting = import && config_.max_import_bytes ? "--max-import-bytes" : "--max-body";
  nlohmann::json p = problem_json(413, std::string(import ? "the archive" : "the request body") + " is over the limit of " +
                                           std::to_string(limit) + " bytes (" + setting + ")",
                                  "/");
  p["max_bytes"] = limit;
  return p;
}

nlohmann::json Server::job_info(const char* kind, const core::KernelRequest& req,
                                const std::string& client, const std::string& request_id) const {
  return {{"kind", kind},
          {"template", req.tmpl ? nlohmann::json(req.tmpl->name) : nlohmann::json(nullptr)},
          {"backend", core::backend_name(req.backend)},
          {"archs", req.archs},
          {"client", client},
          {"request_id", request_id},
          {"key", nullptr},
          {"kernel_name", nullptr}};
}

}  // namespace kforge::api
