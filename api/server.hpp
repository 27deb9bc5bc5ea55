// The HTTP face of kforge on cpp-httplib (DESIGN §2). Routes translate between HTTP and
// the core: they parse and bound the input, check the caller's role, hand builds to the
// job queue, and render results or problem+json errors. No domain logic lives here.
// bind() reserves the port (0 picks a free one) before run() serves, so a caller can
// print the real address first; stop() makes run() return. Safe to stop from any thread.
//
// Kernel requests: plan (validate, look up, render: cheap, on the request's thread); a
// hit answers at once, counted (HitCounts) but not a job; a miss becomes a job on the bounded queue, single-flight on the
// kernel key, and the request waits for it up to `wait_ms` (or not at all with `Prefer:
// respond-async`), after which it answers 202 with `Location: /jobs/{id}`.
#pragma once

#include <chrono>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/auth.hpp"
#include "api/front.hpp"
#include "api/metrics.hpp"
#include "core/build/autotune.hpp"
#include "core/bench/bench.hpp"
#include "core/build/build.hpp"
#include "core/jobs/jobs.hpp"
#include "core/base/log.hpp"
#include "core/build/prefetch.hpp"
#include "core/base/sharded_map.hpp"
#include "core/request/request.hpp"
#include "core/process/sandbox.hpp"
#include "core/cluster/registry.hpp"
#include "core/storage/redis_tier.hpp"
#include "core/toolchain/toolchain.hpp"

namespace httplib {
class ContentReader;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kforge::api {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  size_t max_body_bytes = 4 << 20;
  size_t max_import_bytes = 0;  // POST /cache/import's body (0: max_body_bytes)
  size_t max_json_depth = 32;
  core::RequestLimits limits;
  size_t max_choices = 64;  // autotune choices per request
  size_t max_prefetch = 4096;  // requests per POST /prefetch
  size_t compile_jobs = std::max(1u, std::thread::hardware_concurrency());
  size_t max_queue = 64;
  size_t job_history = 512;
  // The longest a request waits for its build before it is answered 202 (its own
  // `wait_ms` may ask for less).
  std::chrono::milliseconds request_deadline{std::chrono::minutes(10)};
  int read_timeout_s = 30;        // a client that sends nothing for this long is dropped
  int write_timeout_s = 30;       // ... or reads nothing
  // Slow clients (api/front.hpp FrontConfig): the head's and the body's deadlines, and the
  // caps on open connections (0: none).
  int header_timeout_s = 30;
  int body_timeout_s = 30;
  size_t min_body_rate = 64 << 10;
  size_t max_connections = 0;
  size_t max_connections_per_client = 0;
  size_t http_threads = 64;       // requests served at once off the event loops (HTTPS: connections)
  size_t http_loops = 0;          // event loops of the plain-HTTP front (0: 4 per core, up to 32)
  uint64_t cache_max_bytes = 0;   // 0: unbounded
  std::string tls_cert, tls_key;  // both set: HTTPS
  std::filesystem::path web_dir;  // serve the status page from here instead of the binary
  std::string instance;           // this instance's id in a cluster (--instance-id)
  std::string advertise_url;      // where other instances and nginx reach it
  // Behind nginx: artifact and object downloads answer with `X-Accel-Redirect: <this>/<path
  // under the cache root>` and no body, for nginx to send the file (docs/OPERATIONS.md).
  std::string accel_redirect;
};

// In a cluster (--redis): the shared tier, build leases and the instance registry.
struct ClusterServices {
  core::storage::RedisTier* shared = nullptr;
  core::cluster::Leases* leases = nullptr;
  core::cluster::Registry* registry = nullptr;
};

// What the server is wired to (built by main).
struct Services {
  core::Builder& builder;
  core::storage::DiskTier& store;  // the local tier (the builder's storage reaches every tier)
  const core::Toolchains& toolchains;
  core::Bencher& bencher;
  const core::Sandbox& sandbox;
  const Auth& auth;
  ClusterServices cluster = {};
};

// A client's X-Request-Id when it is short and plain; else a fresh one.
std::string request_id(std::string_view header);

// The JSON a client gets for one kernel: the manifest's view plus URLs and wrappers.
nlohmann::json kernel_view(const nlohmann::json& manifest);

class HttpCore;  // httplib's server, its request processing reachable by the front

class Server : private FrontHandler {
 public:
  static constexpr int kKeepAliveSeconds = 5;  // an idle keep-alive connection is closed then
  Server(ServerConfig config, Services services);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  core::Result<int> bind();  // the bound port
  void run();                // blocks until stop()
  void stop();
  bool tls() const { return !config_.tls_cert.empty(); }
  // False when httplib's SSLServer could not take the certificate and key (its SSL context
  // is null): such a server would accept connections and fail every handshake.
  bool valid() const;

  // This instance as the cluster registry shows it: id, version, queue, cache outcomes.
  nlohmann::json instance_status() const;
  // /status's cluster: the shared tier and every registered instance (null: no cluster).
  nlohmann::json cluster_json() const;
  void set_advertise_url(std::string url) { config_.advertise_url = std::move(url); }

  // (method, OpenAPI path) of every registered route.
  const std::vector<std::pair<std::string, std::string>>& route_table() const { return routes_; }

 private:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Registers a handler behind the role check and records its OpenAPI path.
  void route(const char* method, const std::string& api_path, const std::string& pattern, Role role,
             Handler h);
  // A POST route that reads its own body (after the role check): POST /cache/import.
  using ReaderHandler =
      std::function<void(const httplib::Request&, httplib::Response&, const httplib::ContentReader&)>;
  void route_reader(const std::string& api_path, Role role, ReaderHandler h);
  void cache_routes();  // api/routes_cache.cpp
  void kernel_routes();
  void job_routes();
  void status_routes();
  // POST /prefetch (api/routes_prefetch.cpp): starts the core::Prefetcher, which runs each
  // prefetch job and wakes on every job change (prefetch_wake, from the queue's observer).
  void prefetch_routes();
  void post_prefetch(const httplib::Request& req, httplib::Response& res);
  void prefetch_wake();
  void stop_prefetch();  // by ~Server, before the queue goes

  // POST /kernels after parsing: plan, answer a hit, or queue the build and wait.
  void post_kernel(const httplib::Request& req, httplib::Response& res);
  void post_autotune(const httplib::Request& req, httplib::Response& res);
  // A request body validated, prepared and rendered (POST /render, /explain); nullopt
  // when it was not, with the problem already answered.
  std::optional<std::pair<core::PreparedRequest, core::RenderedKernel>> render_request(
      const httplib::Request& req, httplib::Response& res);
  // The job's work for a planned miss (and for a benchmark).
  core::JobQueue::Work build_work(core::BuildPlan plan, nlohmann::json benchmark);
  // A build routed through the queue, blocking (the autotuner's compile).
  core::Result<core::BuildResult> build_queued(const core::KernelRequest& req,
                                               const std::string& client);
  nlohmann::json job_info(const char* kind, const core::KernelRequest& req,
                          const std::string& client, const std::string& request_id) const;
  // The 413 problem for a body over --max-body (or, `import`, --max-import-bytes): the
  // detail and `max_bytes` state the limit.
  nlohmann::json too_large(bool import) const;
  // Keeps the cache under --cache-max-bytes.
  void maintain_cache();
  nlohmann::json cache_stats();  // cached for a few seconds: a scan walks the whole cache
  void log_line(nlohmann::json line);  // {"event", fields...} as one record (core/base/log.hpp)
  // The access log's line for one request (both the front's and httplib's).
  void access_log(const std::string& request_id, std::string_view method, std::string_view path,
                  const std::string& route, int status, double ms, size_t bytes, std::string_view client);
  // The event front's hit path (api/front.hpp): downloads and known POST /kernels bodies
  // answered from memory on the loop; everything else is httplib's on a worker.
  bool fast_candidate(const FrontRequest& head) override;
  bool answer_fast(const FrontRequest& req, std::string& out) override;
  bool serve(httplib::Stream& stream) override;
  void refuse(const FrontRefusal& why, std::string& out) override;
  std::string allowed(std::string_view path) const override;
  // A hit's answer body: the kernel's view as bytes made once per verified manifest, with
  // this request's phases_ms (a JSON object's text) appended.
  std::string hit_body(const std::shared_ptr<const nlohmann::json>& manifest, std::string_view phases);
  // A hit's answer: the kernel's view as bytes made once per verified manifest, with this
  // request's phases_ms appended.
  void send_hit(httplib::Response& res, const std::shared_ptr<const nlohmann::json>& manifest,
                const nlohmann::json& phases_ms);

  ServerConfig config_;
  Services svc_;
  Metrics metrics_;
  HitCounts hits_;
  struct HitView {
    std::shared_ptr<const nlohmann::json> manifest;  // the verified object it was made from
    std::string head;  // the JSON answer up to its closing brace
  };
  core::ShardedMap<std::shared_ptr<const HitView>> hit_views_{4096};
  // sha256 of a POST /kernels body that was valid -> its request key.
  core::ShardedMap<std::string> request_bodies_{16384};
  std::unique_ptr<core::Prefetcher> prefetch_;  // before jobs_: woken by its observer until it goes
  core::JobQueue jobs_;
  core::Autotuner autotuner_;
  std::unique_ptr<httplib::Server> http_;
  HttpCore* core_ = nullptr;             // http_ when plain HTTP (the front serves it)
  std::unique_ptr<EventFront> front_;  // plain HTTP only
  std::vector<std::pair<std::string, std::string>> routes_;
  std::deque<std::string> route_labels_;  // what the access log and metrics call each route
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::mutex cache_mu_;
  nlohmann::json cache_stats_;
  std::chrono::steady_clock::time_point cache_stats_at_{};
};

}  // namespace kforge::api
