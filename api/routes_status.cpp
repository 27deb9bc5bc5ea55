// Status routes: /toolchains, /status, /healthz, /readyz, /metrics, /openapi.json, and the
// status page itself (/, /web/*, /vendor/*).
#include <unistd.h>

#include <algorithm>

#include "api/assets.hpp"
#include "api/http_util.hpp"
#include "api/server.hpp"
#include "core/base/fsutil.hpp"
#include "core/base/utf8.hpp"

namespace kforge::embedded {
extern const std::string_view openapi_json;
}

namespace kforge::api {
namespace {

const char* content_type(std::string_view url) {
  if (url.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (url.ends_with(".css")) return "text/css; charset=utf-8";
  return "text/html; charset=utf-8";
}

// The shared tier's series (only with --redis).
std::string shared_tier_metrics(const ClusterServices& cluster, const core::storage::Storage& storage) {
  const core::storage::RedisTierCounters c = cluster.shared->counters();
  const auto repair = storage.repair_counts();
  const core::storage::Redis& redis = cluster.shared->redis();
  std::string out =
      "# HELP kforge_shared_tier_up Whether the shared tier (Redis) answered last time it was asked.\n"
      "# TYPE kforge_shared_tier_up gauge\nkforge_shared_tier_up " + std::to_string(redis.up() ? 1 : 0) + "\n"
      "# HELP kforge_shared_tier_total Shared-tier events: hit (entry copied in), miss, put (entry shared), "
      "error (a failed connection or command), corrupt (a blob that failed its hash: deleted), too_big, "
      "lease_wait (a build waited for another instance), lease_takeover (then built it itself), "
      "dead_holder (the lease of an instance no longer registered, broken), repair_check (an entry served from "
      "the local tier looked for there), repair (... and put back, whole), generation (Redis lost its data: "
      "the local tier re-shared).\n"
      "# TYPE kforge_shared_tier_total counter\n";
  const std::pair<const char*, uint64_t> series[] = {
      {"hit", c.hits},         {"miss", c.misses},        {"put", c.puts},
      {"error", redis.errors()}, {"corrupt", c.corrupt},  {"too_big", c.too_big},
      {"lease_wait", cluster.leases ? cluster.leases->waits() : 0},
      {"lease_takeover", cluster.leases ? cluster.leases->takeovers() : 0},
      {"dead_holder", cluster.leases ? cluster.leases->dead_holders() : 0},
      {"repair_check", repair.checked}, {"repair", repair.repaired}, {"generation", repair.generations}};
  for (const auto& [name, v] : series)
    out += "kforge_shared_tier_total{event=\"" + std::string(name) + "\"} " + std::to_string(v) + "\n";
  return out;
}

}  // namespace

nlohmann::json Server::instance_status() const {
  const nlohmann::json cache = metrics_.cache_json();
  return {{"id", config_.instance},
          {"url", config_.advertise_url},
          {"version", KFORGE_VERSION},
          {"pid", ::getpid()},
          {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()},
          {"queue", {{"depth", jobs_.depth()}, {"max", jobs_.max_queue()}, {"workers", jobs_.workers()}, {"busy", jobs_.busy()}}},
          {"cache", cache},
          {"compiler_runs", svc_.builder.compiler_runs()}};
}

nlohmann::json Server::cluster_json() const {
  if (!svc_.cluster.shared) return nullptr;
  nlohmann::json shared = svc_.cluster.shared->to_json();
  shared["instance"] = config_.instance;
  if (svc_.cluster.leases) {
    shared["counters"]["lease_waits"] = svc_.cluster.leases->waits();
    shared["counters"]["lease_takeovers"] = svc_.cluster.leases->takeovers();
    shared["counters"]["dead_holders"] = svc_.cluster.leases->dead_holders();
  }
  {
    const auto repair = svc_.builder.storage().repair_counts();
    shared["counters"]["repair_checks"] = repair.checked;
    shared["counters"]["repairs"] = repair.repaired;
    shared["counters"]["generations"] = repair.generations;
  }
  return {{"shared_tier", shared},
          {"instances", svc_.cluster.registry ? svc_.cluster.registry->instances() : nlohmann::json::array()}};
}

void Server::status_routes() {
  auto toolchains_json = [this] {
    nlohmann::json j = svc_.toolchains.to_json();
    for (core::Backend b : core::kAllBackends) {
      const std::string name(core::backend_name(b));
      j[name]["device"] = svc_.bencher.devices()[name];
    }
    return j;
  };
  route("GET", "/toolchains", "/toolchains", Role::kRead,
        [this, toolchains_json](const httplib::Request&, httplib::Response& res) {
          nlohmann::json j = toolchains_json();
          j["sandbox"] = {{"mode", svc_.sandbox.mode_name()}, {"reason", svc_.sandbox.reason()}};
          j["libraries"] = nlohmann::json::array();
          for (const auto& lib : svc_.toolchains.libraries()) j["libraries"].push_back(lib.to_json());
          send_json(res, j);
        });

  route("GET", "/status", "/status", Role::kRead,
        [this, toolchains_json](const httplib::Request&, httplib::Response& res) {
          const double up =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
          nlohmann::json cache = metrics_.cache_json();
          cache.update(cache_stats());
          cache["max_bytes"] = config_.cache_max_bytes ? nlohmann::json(config_.cache_max_bytes)
                                                       : nlohmann::json(nullptr);
          send_json(
              res,
              {{"version", KFORGE_VERSION},
               {"uptime_s", up},
               {"started_at",
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                        .count() -
                    up},
               {"sandbox", {{"mode", svc_.sandbox.mode_name()}, {"reason", svc_.sandbox.reason()}}},
               {"auth", {{"enabled", svc_.auth.enabled()}}},
               {"tls", tls()},
               {"backends", toolchains_json()},
               {"instance", instance_status()},
               {"cluster", cluster_json()},
               {"cache", cache},
               {"queue",
                {{"depth", jobs_.depth()},
                 {"max", jobs_.max_queue()},
                 {"workers", jobs_.workers()},
                 {"busy", jobs_.busy()}}},
               {"requests_per_minute", metrics_.requests_per_minute()},
               {"hits", hits_.to_json()},
               {"series", metrics_.series_json()}});
        });

  route("GET", "/healthz", "/healthz", Role::kNone,
        [this](const httplib::Request&, httplib::Response& res) {
          const double up =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
          send_json(res, {{"status", "ok"}, {"version", KFORGE_VERSION}, {"uptime_s", up}});
        });

  // Ready: the cache is writable, some backend can compile, and the queue has room.
  route("GET", "/readyz", "/readyz", Role::kNone,
        [this](const httplib::Request&, httplib::Response& res) {
          const bool writable = ::access(svc_.store.staging_root().c_str(), W_OK) == 0;
          bool compiler = false;
          for (core::Backend b : core::kAllBackends)
            compiler = compiler || svc_.toolchains.get(b).available;
          const bool room = jobs_.depth() < jobs_.max_queue();
          const bool ready = writable && compiler && room;
          // A down shared tier degrades (local tier and local compiles) but does not stop
          // this instance: it stays ready.
          core::storage::RedisTier* shared = svc_.cluster.shared;
          const bool shared_up = !shared || shared->redis().probe();
          nlohmann::json checks = {{"cache_writable", writable}, {"a_compiler", compiler}, {"queue_room", room}};
          if (shared) checks["shared_tier"] = shared_up;
          send_json(
              res,
              {{"ready", ready},
               {"status", !ready ? "failed" : shared_up ? "ok" : "degraded"},
               {"checks", checks}},
              ready ? 200 : 503);
        });

  route("GET", "/metrics", "/metrics", Role::kRead,
        [this](const httplib::Request&, httplib::Response& res) {
          Metrics::Gauges g;
          g.queue_depth = jobs_.depth();
          g.queue_max = jobs_.max_queue();
          g.workers = jobs_.workers();
          g.busy = jobs_.busy();
          const nlohmann::json cache = cache_stats();
          g.cache_bytes = cache.value("bytes", uint64_t{0});
          g.cache_entries = cache.value("entries", uint64_t{0});
          g.cache_max_bytes = config_.cache_max_bytes;
          g.compiler_runs = svc_.builder.compiler_runs();
          g.benchmark_runs = svc_.bencher.runs();
          g.sandbox_failures = svc_.sandbox.failures();
          std::string text = metrics_.render(g, hits_);
          if (svc_.cluster.shared) text += shared_tier_metrics(svc_.cluster, svc_.builder.storage());
          if (front_) {  // the event front (plain HTTP): where requests were answered
            const auto c = front_->counts();
            auto counter = [&](const char* name, const char* help, uint64_t v) {
              text.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name);
              text.append(" counter\n").append(name).append(" ").append(std::to_string(v)).append("\n");
            };
            counter("kforge_http_connections_total", "Connections accepted.", c.connections);
            counter("kforge_http_loop_answers_total", "Requests answered on an event loop (hits from memory).", c.fast);
            counter("kforge_http_handed_off_total", "Requests handed to a worker (everything but hits from memory).",
                    c.handed_off);
            text.append("# HELP kforge_http_connections_open Connections open now.\n# TYPE kforge_http_connections_open gauge\n")
                .append("kforge_http_connections_open ").append(std::to_string(c.open)).append("\n");
            text.append("# HELP kforge_http_connections_refused_total Connections closed at once: over --max-connections "
                        "(total) or --max-connections-per-client (per_client).\n"
                        "# TYPE kforge_http_connections_refused_total counter\n")
                .append("kforge_http_connections_refused_total{cap=\"total\"} ").append(std::to_string(c.refused_total))
                .append("\nkforge_http_connections_refused_total{cap=\"per_client\"} ")
                .append(std::to_string(c.refused_per_client)).append("\n");
            text.append("# HELP kforge_http_request_timeouts_total Requests answered 408 and closed: a head not whole "
                        "within --header-timeout, a body not in by its deadline.\n"
                        "# TYPE kforge_http_request_timeouts_total counter\n")
                .append("kforge_http_request_timeouts_total{part=\"head\"} ").append(std::to_string(c.header_timeouts))
                .append("\nkforge_http_request_timeouts_total{part=\"body\"} ").append(std::to_string(c.body_timeouts))
                .append("\n");
            counter("kforge_http_bad_requests_total",
                    "Request heads refused (400, 414) and their connections closed: unparseable or ambiguous framing.",
                    c.bad_requests);
          }
          res.set_content(text, "text/plain; version=0.0.4");
        });

  // What a problem's `type` URI names (RFC 9457 §3.1.1: dereferenceable documentation).
  route("GET", "/problems/{type}", R"(/problems/([^/]+))", Role::kNone,
        [](const httplib::Request& req, httplib::Response& res) {
          const std::string slug = req.matches[1];
          if (auto doc = problem_type(slug)) return send_json(res, *doc);
          std::string known;
          for (const auto& t : problem_types()) known += (known.empty() ? "" : ", ") + t;
          send_problem(res, problem_json(404, "no problem type `" + core::sanitize_utf8(slug.substr(0, 64)) +
                                                  "` (known: " + known + ")"));
        });

  route("GET", "/openapi.json", "/openapi.json", Role::kNone,
        [](const httplib::Request&, httplib::Response& res) {
          res.set_content(std::string(embedded::openapi_json), kJson);
        });

  // The status page: open to all (it asks for a token itself when auth is on). With
  // --web-dir, the page's own files come from disk (for working on it without a rebuild).
  for (const auto& asset : embedded::assets()) {
    const std::string url(asset.url);
    Handler serve = [this, asset, url](const httplib::Request&, httplib::Response& res) {
      std::string body(asset.bytes);
      if (!config_.web_dir.empty() && !url.starts_with("/vendor/")) {
        const auto file = url == "/" ? std::filesystem::path("index.html")
                                     : std::filesystem::path(url).filename();
        if (auto disk = core::read_file(config_.web_dir / file)) body = std::move(*disk);
      }
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::move(body), content_type(url));
    };
    // One OpenAPI path per family of files (/web/{file}, /vendor/{file}).
    const std::string api_path = url == "/"                 ? "/"
                                 : url.starts_with("/web/") ? "/web/{file}"
                                                            : "/vendor/{file}";
    route("GET", api_path, url, Role::kNone, std::move(serve));
  }
}

}  // namespace kforge::api
