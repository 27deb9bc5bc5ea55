// Cache routes (issue 16): GET /cache/export streams an archive of the cache, POST
// /cache/import publishes one (core/storage/archive.hpp has the format). Both admin-only.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "api/http_util.hpp"
#include "api/server.hpp"
#include "core/storage/archive.hpp"
#include "core/base/utf8.hpp"

namespace kforge::api {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

void Server::cache_routes() {
  // ?since=T&match=FIELD=GLOB... (repeatable): the same filters as `kforge cache export`.
  route("GET", "/cache/export", "/cache/export", Role::kAdmin,
        [this](const httplib::Request& req, httplib::Response& res) {
          core::storage::ExportOptions opts;
          opts.kforge_version = KFORGE_VERSION;
          size_t nmatch = 0;
          for (const auto& [name, value] : query_pairs(req)) {
            if (name == "since") {
              auto since = core::storage::parse_since(value, "/since");
              if (!since) return send_error(res, since.error());
              opts.since = *since;
            } else if (name == "match") {
              auto m = core::storage::parse_match(value, "/match/" + std::to_string(nmatch++));
              if (!m) return send_error(res, m.error());
              opts.matches.push_back(*m);
            } else {
              return send_problem(res, problem_json(400, "unknown query parameter `" + core::sanitize_utf8(name.substr(0, 64)) +
                                                             "` (since, match)",
                                                    "/" + core::sanitize_utf8(name.substr(0, 64))));
            }
          }
          const auto t0 = std::chrono::steady_clock::now();
          auto snap = core::storage::ExportSnapshot::take(svc_.store, opts);
          if (!snap) return send_error(res, snap.error());
          std::shared_ptr<const core::storage::ExportSnapshot> shared = std::move(*snap);
          char date[32];
          const std::time_t now = std::time(nullptr);
          std::strftime(date, sizeof date, "%Y%m%dT%H%M%SZ", std::gmtime(&now));
          res.set_header("Content-Disposition", std::string("attachment; filename=\"kforge-cache-") + date + ".tar.zst\"");
          res.set_header("X-Kforge-Entries", std::to_string(shared->entries()));
          // The whole archive in one call, libarchive writing through the sink as it goes.
          res.set_chunked_content_provider("application/zstd", [this, shared, t0](size_t, httplib::DataSink& sink) {
            auto written = shared->write([&](const char* data, size_t n) { return sink.write(data, n); });
            nlohmann::json line = {{"event", "export"}, {"entries", shared->entries()}, {"requests", shared->requests()},
                                   {"seconds", seconds_since(t0)}};
            if (!written) {
              line["error"] = written.error().message;
              log_line(line);
              return false;  // the connection is dropped: the client sees an incomplete stream
            }
            line["bytes"] = *written;
            log_line(line);
            sink.done();
            return true;
          });
        });

  // The body is the archive; it is staged in a file (never whole in memory), then imported.
  route_reader("/cache/import", Role::kAdmin,
               [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
                 const size_t limit = config_.max_import_bytes ? config_.max_import_bytes : config_.max_body_bytes;
                 auto too_large = [&] {
                   res.set_header("Connection", "close");
                   send_problem(res, Server::too_large(true));
                 };
                 if (req.has_header("Content-Length") && std::stoull(req.get_header_value("Content-Length")) > limit) {
                   reader([](const char*, size_t) { return true; });  // read and dropped: the client gets the answer
                   return too_large();
                 }
                 const auto t0 = std::chrono::steady_clock::now();
                 auto dir = svc_.store.make_staging();
                 if (!dir) return send_error(res, dir.error());
                 struct Cleanup {
                   std::filesystem::path dir;
                   ~Cleanup() {
                     std::error_code ec;
                     std::filesystem::remove_all(dir, ec);
                   }
                 } cleanup{*dir};
                 const auto file = *dir / "import.tar.zst";
                 const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                 if (fd < 0) return send_error(res, core::Error::make(core::ErrorKind::kInternal, "cannot stage the archive: " + std::string(std::strerror(errno))));
                 size_t got = 0;
                 int write_errno = 0;
                 const bool read = reader([&](const char* data, size_t n) {
                   if ((got += n) > limit) return false;
                   while (n > 0) {
                     const ssize_t w = ::write(fd, data, n);
                     if (w < 0 && errno == EINTR) continue;
                     if (w <= 0) {
                       write_errno = errno;
                       return false;
                     }
                     data += w;
                     n -= size_t(w);
                   }
                   return true;
                 });
                 ::close(fd);
                 if (got > limit) return too_large();
                 if (write_errno) return send_error(res, core::Error::make(core::ErrorKind::kInternal, "cannot stage the archive: " + std::string(std::strerror(write_errno))));
                 if (!read) return send_problem(res, problem_json(400, "the archive's upload was cut short", "/"));
                 auto report = core::storage::import_archive(svc_.store, file);
                 nlohmann::json line = {{"event", "import"}, {"archive_bytes", got}, {"seconds", seconds_since(t0)}};
                 if (!report) {
                   line["error"] = report.error().message;
                   log_line(line);
                   return send_error(res, report.error());
                 }
                 {
                   std::lock_guard lock(cache_mu_);
                   cache_stats_ = nullptr;  // /status shows the new entries at once
                 }
                 maintain_cache();  // an import may push the cache over --cache-max-bytes
                 nlohmann::json body = report->to_json();
                 body["seconds"] = seconds_since(t0);
                 line.update(body);
                 log_line(line);
                 send_json(res, body);
               });
}

}  // namespace kforge::api
