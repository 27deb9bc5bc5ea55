// Status routes: /toolchains, /status, /healthz, /readyz, /metrics, /openapi.json, and the
// status page itself (/, /web/*, /vendor/*).
#include <unistd.h>

#include <algorithm>

#include "api/assets.hpp"
#include "api/http_util.hpp"
#include "api/server.hpp"
#include "core/fsutil.hpp"

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

}  // namespace

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
               {"cache", cache},
               {"queue",
                {{"depth", jobs_.depth()},
                 {"max", jobs_.max_queue()},
                 {"workers", jobs_.workers()},
                 {"busy", jobs_.busy()}}},
               {"requests_per_minute", metrics_.requests_per_minute()},
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
          send_json(
              res,
              {{"ready", ready},
               {"checks",
                {{"cache_writable", writable}, {"a_compiler", compiler}, {"queue_room", room}}}},
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
          res.set_content(metrics_.render(g), "text/plain; version=0.0.4");
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
    const bool listed = std::any_of(routes_.begin(), routes_.end(),
                                    [&](const auto& r) { return r.second == api_path; });
    if (listed) {
      http_->Get(url, std::move(serve));
    } else {
      route("GET", api_path, url, Role::kNone, std::move(serve));
    }
  }
}

}  // namespace kforge::api
