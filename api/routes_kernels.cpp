// Kernel routes: POST /kernels, /autotune, /render; GET /kernels/{key}[/...], /templates.
#include <charconv>
#include <chrono>

#include "api/http_util.hpp"
#include "api/server.hpp"
#include "core/base/fsutil.hpp"
#include "core/base/utf8.hpp"
#include "core/templates/template.hpp"
#include "core/build/why.hpp"
#include "core/build/wrapper.hpp"

namespace kforge::api {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The Error a problem body describes (a job's failed answer, handed back to the autotuner).
core::Error error_from_problem(int status, const nlohmann::json& p) {
  core::Error e;
  e.kind = status == 422   ? core::ErrorKind::kCompileFailed
           : status == 503 ? core::ErrorKind::kOverloaded
           : status == 400 ? core::ErrorKind::kBadRequest
                           : core::ErrorKind::kInternal;
  e.message = p.value("detail", "the build failed");
  for (const auto& f : p.value("errors", nlohmann::json::array()))
    e.fields.push_back({f.value("field", ""), f.value("message", "")});
  e.extra = p;
  return e;
}

void send_answer(httplib::Response& res, int status, const nlohmann::json& body) {
  if (status >= 400) return send_problem(res, body);
  send_json(res, body, status);
}

// The URL of a download names content by its hash: it never changes, so caches keep it.
constexpr const char* kImmutable = "public, max-age=31536000, immutable";

// How one file of an entry is downloaded (GET /kernels/{key}/{what}): the route and the
// event front's hit path answer with the same headers.
struct Download {
  std::string file;  // its name in the entry
  bool binary = false;
  std::string etag;         // "\"<sha256>\""
  std::string disposition;  // binaries: attachment; filename="<kernel>.so"
  const char* type = "";
};

// nullopt when the entry has no such file.
std::optional<Download> download_of(const nlohmann::json& m, const std::string& key, std::string_view what) {
  Download d;
  d.file = what == "artifact" ? "kernel.so"
           : what == "object" ? "kernel.o"
           : what == "log"    ? "compile.log"
                              : m.value("source_file", "");
  const auto& files = m["files"];
  const auto it = files.find(d.file);
  if (it == files.end()) return std::nullopt;
  d.binary = what == "artifact" || what == "object";
  d.etag = "\"" + (*it)["sha256"].get<std::string>() + "\"";
  d.type = d.binary ? "application/octet-stream" : "text/plain; charset=utf-8";
  if (d.binary) {
    d.disposition =
        "attachment; filename=\"" + m.value("kernel_name", key) + (what == "artifact" ? ".so\"" : ".o\"");
  }
  return d;
}

// The part of a download's `size` bytes a request's Range asks for: If-Range naming
// another version, or no Range, is the whole (docs/API.md, Downloads).
ByteRange range_of(std::string_view range, std::string_view if_range, const Download& d, uint64_t size) {
  if (range.empty() || (!if_range.empty() && if_range != d.etag)) return {};
  return parse_range(range, size);
}

// "bytes 0-99/1234" (a part) or "bytes */1234" (unsatisfiable).
std::string content_range(const ByteRange& r, uint64_t size) {
  return r.kind == ByteRange::Kind::kPart
             ? "bytes " + std::to_string(r.first) + "-" + std::to_string(r.last) + "/" + std::to_string(size)
             : "bytes */" + std::to_string(size);
}

// "/kernels/{key}/artifact" or ".../object" with a well-formed key: (key, what).
std::optional<std::pair<std::string_view, std::string_view>> binary_download(std::string_view path) {
  constexpr std::string_view prefix = "/kernels/";
  if (!path.starts_with(prefix)) return std::nullopt;
  path.remove_prefix(prefix.size());
  if (path.size() < 65 || path[64] != '/') return std::nullopt;
  const std::string_view key = path.substr(0, 64), what = path.substr(65);
  if (!core::is_hex_key(key) || (what != "artifact" && what != "object")) return std::nullopt;
  return std::pair{key, what};
}

}  // namespace

core::JobQueue::Work Server::build_work(core::BuildPlan plan, nlohmann::json benchmark) {
  return [this, plan = std::move(plan), benchmark = std::move(benchmark)](core::Job& job) {
    const std::string backend(core::backend_name(plan.prepared.req.backend));
    job.set_state(core::JobState::kCompiling);
    auto built = svc_.builder.build(plan);
    if (!built) {
      const core::Error& e = built.error();
      const std::string cache = e.extra.value("cache", "miss");
      metrics_.cache_outcome(cache);
      job.finish(problem_json(e).value("status", 500), problem_json(e), cache);
      return;
    }
    const std::string key = built->manifest["key"];
    core::storage::DiskTier::Pin pin(svc_.store, key);  // not evicted while we answer with it
    metrics_.cache_outcome(built->cache);
    if (built->cache == "miss") {
      metrics_.compile(backend, built->manifest["compile"].value("seconds", 0.0), key);
    }
    job.set_info("key", key);
    job.set_info("kernel_name", built->manifest.value("kernel_name", ""));
    nlohmann::json body = kernel_view(built->manifest);
    body["cache"] = built->cache;
    if (built->cache == "miss" && plan.why.is_object()) {  // why it was not in the cache
      body["miss_reason"] = plan.why["miss_reason"];
      body["miss_nearest"] = plan.why["nearest"];
    }
    if (!benchmark.is_null()) {
      job.set_state(core::JobState::kBenchmarking);
      const auto t0 = Clock::now();
      auto opts = core::BenchOptions::from_json(benchmark);
      if (plan.prepared.req.backend == core::Backend::kCpu) opts.runner_env = core::vendor_env(plan.prepared.cpu);
      std::optional<nlohmann::json> reference;
      const core::KernelRequest& req = plan.prepared.req;
      if (req.tmpl) opts.problem = req.tmpl->to_json();  // the request's tensors, not those of whoever built the kernel
      if (opts.verify && req.tmpl && svc_.bencher.available(req.backend)) {
        core::KernelRequest r = req;
        r.reference = true;
        r.benchmark = nullptr;
        if (auto ref = svc_.builder.build(r)) reference = ref->manifest;
      }
      body["benchmark"] = svc_.bencher.run(built->manifest, opts, reference);
      built->phases_ms["benchmark"] = ms_since(t0);
      metrics_.benchmark(backend, built->phases_ms["benchmark"].get<double>() / 1000);
    }
    body["phases_ms"] = built->phases_ms;
    maintain_cache();  // before answering: whoever hears of this build sees the cache bounded
    job.finish(200, body, built->cache);
  };
}

void Server::post_kernel(const httplib::Request& req, httplib::Response& res) {
  // Bytes seen before (and valid then) are the same request: their request key is known
  // without parsing, validating or rendering, and the memo answers a hit at once. (Within
  // one process the request key is a function of the bytes: toolchains and libraries are
  // fixed at start.)
  const auto t0 = std::chrono::steady_clock::now();
  const std::string digest = core::sha256_hex(req.body);
  if (auto rkey = request_bodies_.get(digest)) {
    if (auto hit = svc_.builder.find_answer(*rkey)) {
      metrics_.cache_outcome("hit");
      hits_.record("POST /kernels", req.remote_addr, (*hit)["key"].get<std::string>());
      return send_hit(res, hit, {{"lookup", ms_since(t0)}});
    }
  }
  auto body = core::parse_json_body(req.body, config_.max_json_depth);
  if (!body) return send_error(res, body.error());
  // How long to wait is about this exchange, not the kernel: it is no part of any key.
  auto wait = config_.request_deadline;
  if (body->is_object() && body->contains("wait_ms")) {
    const auto& w = (*body)["wait_ms"];
    if (!w.is_number_integer() || w.get<int64_t>() < 0) {
      return send_problem(
          res, problem_json(400, "wait_ms is a non-negative integer (milliseconds)", "/wait_ms"));
    }
    wait = std::min(wait, std::chrono::milliseconds(w.get<int64_t>()));
    body->erase("wait_ms");
  }
  const bool async = req.get_header_value("Prefer").find("respond-async") != std::string::npos;
  auto kreq = core::parse_kernel_request(*body, config_.limits);
  if (!kreq) return send_error(res, kreq.error());
  auto plan = svc_.builder.plan(*kreq);
  if (!plan) {
    const core::Error& e = plan.error();
    if (e.kind == core::ErrorKind::kCompileFailed) {  // a cached compile error: a hit too
      metrics_.cache_outcome("hit");
      hits_.record("POST /kernels", req.remote_addr, e.extra.value("key", ""));
    }
    return send_error(res, e);
  }
  // A hit is answered here and counted, not made a job: /jobs lists builds.
  if (plan->hit && kreq->benchmark.is_null()) {
    metrics_.cache_outcome("hit");
    hits_.record("POST /kernels", req.remote_addr, plan->key());
    request_bodies_.put(digest, plan->prepared.request_key);
    return send_hit(res, plan->hit->verified, plan->phases_ms);
  }
  if (kreq->benchmark.is_null()) request_bodies_.put(digest, plan->prepared.request_key);
  svc_.builder.explain(*plan);  // the answer says why it missed
  nlohmann::json info =
      job_info("kernel", *kreq, req.remote_addr, res.get_header_value("X-Request-Id"));
  info["archs"] = plan->prepared.archs;  // resolved: what was built
  info["key"] = plan->key();
  info["kernel_name"] = plan->kernel_name();

  // A build is shared by every request of its kernel; a benchmark only by the same request
  // (a kernel that takes M at run time is one key for every M, each timed on its own tensors).
  std::string flight = plan->key();
  if (!kreq->benchmark.is_null()) flight += " benchmark " + kreq->benchmark.dump() + " of " + plan->prepared.request_key;
  auto submitted = jobs_.submit(info, flight, build_work(*plan, kreq->benchmark));
  if (!submitted) return send_error(res, submitted.error());
  const auto job = submitted->job;
  if (async || !job->wait_until(Clock::now() + wait)) {
    res.set_header("Location", "/jobs/" + job->id());
    return send_json(res, job->to_json(false), 202);
  }
  nlohmann::json answer = job->body();
  if (submitted->joined) {
    // Shared another request's build: say so, and show it as its own row in /jobs.
    answer["cache"] = "joined";
    metrics_.cache_outcome("joined");
    info["joined"] = job->id();
    jobs_.start(info)->finish(job->http_status(), answer, "joined");
  }
  send_answer(res, job->http_status(), answer);
}

void Server::send_hit(httplib::Response& res, const std::shared_ptr<const nlohmann::json>& manifest,
                      const nlohmann::json& phases_ms) {
  res.status = 200;
  res.set_content(hit_body(manifest, dump_json(phases_ms, -1)), kJson);
}

bool Server::fast_candidate(const FrontRequest& r) {
  if (r.method == "POST") return r.path == "/kernels";
  if (r.method != "GET" && r.method != "HEAD") return false;
  return binary_download(r.path).has_value();
}

// Only what is in memory is answered here: a miss, an error, a file not kept in memory, an
// entry not verified in this process, a caller without the role — all go to the routes
// above (returning false), which answer them as they always do.
bool Server::answer_fast(const FrontRequest& r, std::string& out) {
  const auto t0 = Clock::now();
  const bool post = r.method == "POST";
  if (r.body.size() > config_.max_body_bytes || (!post && !r.body.empty())) return false;
  if (!svc_.auth.check(r.header("Authorization"), post ? Role::kSubmit : Role::kRead)) return false;
  const std::string client(r.remote_addr);
  const std::string rid = request_id(r.header("X-Request-Id"));
  std::string route;
  int status = 200;
  size_t bytes = 0;
  if (post) {
    // As post_kernel: bytes seen before (and valid then) are the same request.
    const auto rkey = request_bodies_.get(core::sha256_hex(r.body));
    if (!rkey) return false;
    const auto hit = svc_.builder.find_answer(*rkey, /*local_only=*/true);
    if (!hit) return false;
    metrics_.cache_outcome("hit");
    hits_.record("POST /kernels", client, (*hit)["key"].get<std::string>());
    char phases[64] = "{\"lookup\":";
    char* end = std::to_chars(phases + 10, phases + sizeof phases - 1, ms_since(t0), std::chars_format::fixed, 4).ptr;
    *end++ = '}';
    const std::string body = hit_body(hit, std::string_view(phases, size_t(end - phases)));
    append_response(out, r, 200, {{"Content-Type", kJson}, {"X-Request-Id", rid}}, body, kKeepAliveSeconds);
    route = "/kernels";
    bytes = body.size();
  } else {
    const auto [key_view, what] = *binary_download(r.path);
    const std::string key(key_view);
    const auto m = svc_.store.memo_manifest(key);
    if (!m) return false;
    svc_.builder.storage().served(key, /*now=*/false);  // read-repair, off the loop
    const auto d = download_of(*m, key, what);
    if (!d) return false;
    if (none_match(r.header("If-None-Match"), d->etag)) {
      status = 304;
      append_response(out, r, 304, {{"ETag", d->etag}, {"Cache-Control", kImmutable}, {"X-Request-Id", rid}}, {},
                      kKeepAliveSeconds);
    } else {
      std::vector<std::pair<std::string_view, std::string_view>> headers = {{"Content-Type", d->type},
                                                                            {"ETag", d->etag},
                                                                            {"Cache-Control", kImmutable},
                                                                            {"Content-Disposition", d->disposition},
                                                                            {"X-Request-Id", rid}};
      std::shared_ptr<const std::string> data;
      std::string_view body;
      std::string target, range_header;
      if (!config_.accel_redirect.empty()) {  // nginx answers a Range itself
        // nginx sends the file: the entry checked unchanged since it was verified, as the
        // route does (a memo not looked at for 100 ms costs a stat per file).
        if (!svc_.store.lookup(key)) return false;
        target = config_.accel_redirect + "/" + svc_.store.relative_path(key, d->file);
        headers.emplace_back("X-Accel-Redirect", target);
      } else {
        // The verified bytes, still the file's (one stat): never bytes that changed on disk.
        data = svc_.store.read_hot(key, d->file);
        if (!data) return false;
        body = *data;
        const ByteRange range = range_of(r.header("Range"), r.header("If-Range"), *d, data->size());
        if (range.kind != ByteRange::Kind::kWhole) {
          status = range.kind == ByteRange::Kind::kPart ? 206 : 416;
          range_header = content_range(range, data->size());
          headers.emplace_back("Content-Range", range_header);
          body = status == 206 ? body.substr(range.first, range.last - range.first + 1) : std::string_view();
        }
        bytes = body.size();
      }
      append_response(out, r, status, headers, body, kKeepAliveSeconds);
    }
    route = std::string("/kernels/{key}/") + std::string(what);
    hits_.record(std::string("GET ") + route, client, key);
  }
  access_log(rid, r.method, r.path, route, status, ms_since(t0), bytes, client);
  return true;
}

std::string Server::hit_body(const std::shared_ptr<const nlohmann::json>& manifest, std::string_view phases) {
  const std::string& key = (*manifest)["key"].get_ref<const std::string&>();
  std::shared_ptr<const HitView> view;
  if (auto v = hit_views_.get(key); v && (*v)->manifest == manifest) view = *v;
  if (!view) {
    nlohmann::json j = kernel_view(*manifest);
    j["cache"] = "hit";
    std::string text = dump_json(j);  // "{\n  ...\n}"
    text.resize(text.size() - 2);     // without "\n}": phases_ms comes last
    auto made = std::make_shared<const HitView>(HitView{manifest, std::move(text)});
    hit_views_.put(key, made);
    view = std::move(made);
  }
  std::string body;
  body.reserve(view->head.size() + phases.size() + 24);
  body.append(view->head).append(",\n  \"phases_ms\": ").append(phases).append("\n}\n");
  return body;
}

core::Result<core::BuildResult> Server::build_queued(const core::KernelRequest& req,
                                                     const std::string& client) {
  auto plan = svc_.builder.plan(req);
  if (!plan) return std::unexpected(plan.error());
  if (plan->hit) {
    metrics_.cache_outcome("hit");
    return *plan->hit;
  }
  nlohmann::json info = job_info("kernel", req, client, "");
  info["archs"] = plan->prepared.archs;
  info["key"] = plan->key();
  info["kernel_name"] = plan->kernel_name();
  auto submitted = jobs_.submit(info, plan->key(), build_work(*plan, nullptr));
  if (!submitted) return std::unexpected(submitted.error());
  const auto& job = submitted->job;
  job->wait_until(Clock::now() + std::chrono::hours(24));
  const nlohmann::json body = job->body();
  if (job->http_status() != 200)
    return std::unexpected(error_from_problem(job->http_status(), body));
  auto manifest = svc_.store.lookup(plan->key());
  if (!manifest)
    return core::fail(core::ErrorKind::kInternal,
                      "kernel " + plan->key() + " vanished after its build");
  return core::BuildResult{*manifest, submitted->joined ? "joined" : body.value("cache", "miss"),
                           body.value("phases_ms", nlohmann::json::object()), manifest};
}

void Server::post_autotune(const httplib::Request& req, httplib::Response& res) {
  auto body = core::parse_json_body(req.body, config_.max_json_depth);
  if (!body) return send_error(res, body.error());
  if (!body->is_object())
    return send_problem(res, problem_json(400, "the request body must be a JSON object", ""));
  nlohmann::json choices = body->value("choices", nlohmann::json("default"));
  body->erase("choices");
  if (!body->contains("template"))
    return send_problem(res, problem_json(400, "autotuning needs a template request", "/template"));
  if (body->contains("params")) {
    return send_problem(
        res, problem_json(400, "give the parameters to try in `choices`, not `params`", "/params"));
  }
  if (choices.is_array() && choices.size() > config_.max_choices) {
    return send_problem(res, problem_json(400,
                                          std::to_string(choices.size()) + " choices; at most " +
                                              std::to_string(config_.max_choices) + " per autotune",
                                          "/choices"));
  }
  auto kreq = core::parse_kernel_request(*body, config_.limits);
  if (!kreq) return send_error(res, kreq.error());
  if (auto room = jobs_.reserve(choices.is_array() ? choices.size() : 1); !room)
    return send_error(res, room.error());
  auto job = jobs_.start(
      job_info("autotune", *kreq, req.remote_addr, res.get_header_value("X-Request-Id")));
  job->set_state(core::JobState::kCompiling);
  auto result = autotuner_.run(*kreq, choices,
                               [&](const char*) { job->set_state(core::JobState::kBenchmarking); });
  if (!result) {
    job->finish(problem_json(result.error()).value("status", 500), problem_json(result.error()),
                "");
    return send_error(res, result.error());
  }
  if ((*result)["winner"].is_object()) {
    job->set_info("key", (*result)["winner"]["key"]);
    job->set_info("kernel_name", (*result)["winner"]["kernel_name"]);
  }
  job->finish(200, *result, result->value("cache", "miss"));
  send_json(res, *result);
}

std::optional<std::pair<core::PreparedRequest, core::RenderedKernel>> Server::render_request(
    const httplib::Request& req, httplib::Response& res) {
  auto body = core::parse_json_body(req.body, config_.max_json_depth);
  if (!body) {
    send_error(res, body.error());
    return std::nullopt;
  }
  auto kreq = core::parse_kernel_request(*body, config_.limits);
  if (!kreq) {
    send_error(res, kreq.error());
    return std::nullopt;
  }
  auto prepared = svc_.builder.prepare(*kreq);
  if (!prepared) {
    send_error(res, prepared.error());
    return std::nullopt;
  }
  auto kernel = svc_.builder.render(*prepared);
  if (!kernel) {
    send_error(res, kernel.error());
    return std::nullopt;
  }
  return std::pair{std::move(*prepared), std::move(*kernel)};
}

void Server::kernel_routes() {
  route("POST", "/kernels", "/kernels", Role::kSubmit,
        [this](const httplib::Request& req, httplib::Response& res) { post_kernel(req, res); });
  route("POST", "/autotune", "/autotune", Role::kSubmit,
        [this](const httplib::Request& req, httplib::Response& res) { post_autotune(req, res); });

  // The cached kernels, a page at a time, newest first: what the status page's Kernels view
  // lists and searches (this instance's local tier; a hit is found here, not in /jobs).
  route("GET", "/kernels", "/kernels", Role::kRead, [this](const httplib::Request& req, httplib::Response& res) {
    core::storage::DiskTier::ListQuery q;
    for (const auto& [name, value] : query_pairs(req)) {
      auto bad = [&, &name = name](const std::string& why) {
        send_problem(res, problem_json(400, why, "/" + core::sanitize_utf8(name.substr(0, 64))));
      };
      if (name == "prefix") {
        if (value.size() > 64 || value.find_first_not_of("0123456789abcdef") != std::string::npos)
          return bad("prefix is the start of a key: up to 64 lowercase hex characters");
        q.key_prefix = value;
      } else if (name == "name") {
        if (value.size() > 128) return bad("name is at most 128 characters (a part of the kernel name)");
        q.name = value;
      } else if (name == "template") {
        if (value.size() > 64) return bad("template is a template name (GET /templates), or empty for source-mode kernels");
        q.template_name = value;
      } else if (name == "backend") {
        if (value != "cpu" && value != "cuda" && value != "rocm") return bad("backend is cpu, cuda or rocm");
        q.backend = value;
      } else if (name == "status") {
        if (value != "ok" && value != "failed") return bad("status is ok or failed (a cached compile error)");
        q.status = value;
      } else if (name == "limit") {
        if (value.empty() || value.size() > 3 || value.find_first_not_of("0123456789") != std::string::npos ||
            std::stoul(value) < 1 || std::stoul(value) > 500)
          return bad("limit is a number of kernels, 1 to 500");
        q.limit = std::stoul(value);
      } else if (name == "cursor") {
        const size_t dot = value.find('.');
        if (dot == std::string::npos || dot == 0 || dot > 19 ||
            value.substr(0, dot).find_first_not_of("0123456789") != std::string::npos ||
            !core::is_hex_key(value.substr(dot + 1)))
          return bad("cursor is the `next` of the previous page");
        q.after = value;
      } else {
        return bad("unknown query parameter `" + core::sanitize_utf8(name.substr(0, 64)) +
                   "` (prefix, name, template, backend, status, limit, cursor)");
      }
    }
    const auto page = svc_.store.list(q);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : page.entries) {
      nlohmann::json j = e.to_json();
      j["url"] = "/kernels/" + e.key;
      list.push_back(std::move(j));
    }
    send_json(res, {{"kernels", std::move(list)},
                    {"total", page.total},
                    {"next", page.next.empty() ? nlohmann::json(nullptr) : nlohmann::json(page.next)}});
  });

  route("GET", "/kernels/{key}", R"(/kernels/([^/]+))", Role::kRead,
        [this](const httplib::Request& req, httplib::Response& res) {
          std::string key;
          if (!valid_key(req, res, key)) return;
          auto m = svc_.builder.storage().find(key);  // in a cluster, another instance may have built it
          if (!m) return send_problem(res, problem_json(404, "no kernel with key " + key));
          nlohmann::json j = kernel_view(*m);
          j["inputs"] = m->value("inputs", nlohmann::json(nullptr));  // what its key was made of
          j["why_url"] = "/kernels/" + key + "/why";
          // How often this instance served it from the cache since it started.
          const auto hits = hits_.kernel(key);
          j["hits"] = {{"count", hits ? hits->hits : 0},
                       {"last_at", hits ? nlohmann::json(hits->last_at) : nlohmann::json(nullptr)}};
          // What was measured since: each device's benchmark, and the autotune it was part of.
          j["benchmarks"] = svc_.store.bench_results(key);
          auto tuned = svc_.store.ranking(key);
          j["autotune"] = tuned ? *tuned : nlohmann::json(nullptr);
          send_json(res, j);
        });

  for (const char* sub : {"artifact", "object", "source", "log"}) {
    route(
        "GET", std::string("/kernels/{key}/") + sub, std::string("/kernels/([^/]+)/(") + sub + ")",
        Role::kRead, [this](const httplib::Request& req, httplib::Response& res) {
          std::string key;
          if (!valid_key(req, res, key)) return;
          const std::string what = req.matches[2];
          core::storage::DiskTier::Pin pin(svc_.store, key);  // not evicted while it is served
          // The memo's manifest when there is one (the file served is checked below, and
          // that is all that is read); else the entry is looked up and verified: in a
          // cluster, copied in from the shared tier if another instance built it.
          auto m = svc_.store.memo_manifest(key);
          if (m) svc_.builder.storage().served(key, /*now=*/false);
          if (!m) m = svc_.builder.storage().find(key);
          if (!m && svc_.store.discarded(key)) {
            return send_problem(
                res,
                problem_json(
                    404,
                    "kernel " + key +
                        " was corrupt (or expired) on disk and has been removed; submit it again"));
          }
          if (!m) return send_problem(res, problem_json(404, "no kernel with key " + key));
          const auto d = download_of(*m, key, what);
          if (!d) {
            return send_problem(
                res,
                problem_json(404,
                             "kernel " + key + " has no " + what +
                                 (what == "object" ? " (it was not built with options.aot)" : "")));
          }
          const std::string& file = d->file;
          const bool binary = d->binary;
          if (binary) hits_.record(std::string("GET /kernels/{key}/") + what, req.remote_addr, key);
          res.set_header("ETag", d->etag);
          res.set_header("Cache-Control", kImmutable);
          if (none_match(req.get_header_value("If-None-Match"), d->etag)) {
            res.status = 304;
            return;
          }
          // Ranges are ours, as on the event front (api/http_head.hpp): httplib's own
          // slicing of the answer is switched off.
          const std::string range_value = req.get_header_value("Range");
          const_cast<httplib::Request&>(req).ranges.clear();
          const char* type = d->type;
          if (binary) res.set_header("Content-Disposition", d->disposition);
          if (binary && !config_.accel_redirect.empty()) {
            // nginx sends the file: checked here to be unchanged since it was verified.
            if (!svc_.store.lookup(key))
              return send_problem(res, problem_json(404, "kernel " + key + " was corrupt on disk and has been removed; submit it again"));
            res.set_header("X-Accel-Redirect", config_.accel_redirect + "/" + svc_.store.relative_path(key, file));
            res.set_header("Content-Type", type);
            return;
          }
          // Bytes that differ from the manifest are never sent: read through a descriptor
          // whose identity is the verified one, or hashed as read.
          auto data = svc_.store.read_verified(key, file);
          if (!data) {
            return send_problem(
                res, problem_json(404, svc_.store.discarded(key)
                                           ? "kernel " + key + " was corrupt on disk and has been removed; submit it again"
                                           : "kernel " + key + " is gone (evicted or removed); submit it again"));
          }
          const ByteRange range = range_of(range_value, req.get_header_value("If-Range"), *d, data->size());
          if (range.kind == ByteRange::Kind::kUnsatisfiable) {
            res.set_header("Content-Range", content_range(range, data->size()));
            return send_problem(res, problem_json(416, "the Range starts past the end of the " +
                                                           std::to_string(data->size()) + "-byte file"));
          }
          if (range.kind == ByteRange::Kind::kPart) {
            res.status = 206;
            res.set_header("Content-Range", content_range(range, data->size()));
            *data = data->substr(range.first, range.last - range.first + 1);
          }
          res.set_content(std::move(*data), type);
        });
  }

  route("POST", "/render", "/render", Role::kSubmit,
        [this](const httplib::Request& req, httplib::Response& res) {
          auto r = render_request(req, res);
          if (!r) return;
          const auto& [prepared, kernel] = *r;
          nlohmann::json argv = nlohmann::json::array();
          for (const auto& step : kernel.steps) argv.push_back(step.argv);
          nlohmann::json j = {
              {"key", kernel.key},
              {"request_key", prepared.request_key},
              {"kernel_name", kernel.abi.symbol},
              {"backend", core::backend_name(prepared.req.backend)},
              {"archs", prepared.archs},
              {"source", core::substitute_kernel_name(kernel.source, kernel.abi.symbol)},
              {"abi", kernel.abi.to_json()},
              {"workspace_bytes", kernel.abi.workspace_bytes
                                      ? nlohmann::json(*kernel.abi.workspace_bytes)
                                      : nlohmann::json(nullptr)},
              {"wrapper",
               {{"python", core::python_wrapper(kernel.abi, prepared.req.backend)},
                {"cpp", core::cpp_wrapper(kernel.abi, prepared.req.backend)}}},
              {"compile", {{"argv", argv}}}};
          if (prepared.req.tmpl) j["template"] = prepared.req.tmpl->to_json();
          send_json(res, j);
        });

  // Would this request hit, and if not, why not: the nearest entry of the same kernel and
  // the inputs that differ (core/build/why.hpp). Compiles nothing.
  route("POST", "/explain", "/explain", Role::kSubmit,
        [this](const httplib::Request& req, httplib::Response& res) {
          auto r = render_request(req, res);
          if (!r) return;
          const auto& [prepared, kernel] = *r;
          const std::string ext(core::source_extension(prepared.req.backend));
          nlohmann::json j = {{"key", kernel.answer_key()},
                              {"request_key", prepared.request_key},
                              {"kernel_name", kernel.answer_name()},
                              {"backend", core::backend_name(prepared.req.backend)},
                              {"archs", prepared.archs},
                              {"inputs", core::key_inputs(prepared, kernel)}};
          if (auto m = svc_.builder.storage().find(kernel.answer_key())) {
            j["cache"] = m->value("status", "") == "failed" ? "hit (a cached compile error)" : "hit";
            j["nearest"] = {{"key", (*m)["key"]},
                            {"kernel_name", m->value("kernel_name", "")},
                            {"status", m->value("status", "")},
                            {"created_at", m->value("created_at", 0)}};
            j["miss_reason"] = nlohmann::json::array();
          } else {
            j["cache"] = "miss";
            j.update(core::explain_miss(svc_.store, {kernel.key, core::kernel_family(prepared, kernel),
                                                     j["inputs"], kernel.source, "source." + ext}));
          }
          send_json(res, j);
        });

  route("GET", "/kernels/{key}/why", R"(/kernels/([^/]+)/why)", Role::kRead,
        [this](const httplib::Request& req, httplib::Response& res) {
          std::string key;
          if (!valid_key(req, res, key)) return;
          auto m = svc_.builder.storage().find(key);
          if (!m) return send_problem(res, problem_json(404, "no kernel with key " + key));
          send_json(res, core::explain_entry(svc_.store, *m));
        });

  auto describe = [this](const core::templates::Template& t) {
    nlohmann::json backends = nlohmann::json::object();
    for (core::Backend b : core::kAllBackends) {
      // Defaults and choices for this host's `native` target.
      const auto& tc = svc_.toolchains.get(b);
      core::templates::TemplateRequest probe{
          b, tc.native ? std::vector<std::string>{*tc.native} : std::vector<std::string>{}, {}, {}};
      if (b == core::Backend::kCpu && tc.native) {
        if (auto isa = tc.cpu_isa(*tc.native)) probe.cpu = *isa;
      }
      nlohmann::json d = t.describe(probe);
      d["default_choices"] = t.default_choices(probe);
      d["default_choices_for_arch"] =
          tc.native ? nlohmann::json(*tc.native) : nlohmann::json(nullptr);
      backends[std::string(core::backend_name(b))] = d;
    }
    return nlohmann::json{
        {"name", t.name()}, {"description", t.description()}, {"backends", backends}};
  };
  route("GET", "/templates", "/templates", Role::kRead,
        [describe](const httplib::Request&, httplib::Response& res) {
          nlohmann::json list = nlohmann::json::array();
          for (const auto& t : core::templates::Registry::builtin().all())
            list.push_back(describe(*t));
          send_json(res, {{"templates", list}});
        });
  route("GET", "/templates/{name}", R"(/templates/([^/]+))", Role::kRead,
        [describe](const httplib::Request& req, httplib::Response& res) {
          const std::string name = req.matches[1];
          // A URL may carry any bytes (%ff); they are never quoted back.
          if (!core::valid_utf8(name))
            return send_problem(res, problem_json(400, "a template name is UTF-8 text", "/name"));
          const auto* t = core::templates::Registry::builtin().find(name);
          if (!t)
            return send_problem(res,
                                problem_json(404, "no template named `" + name + "`", "/name"));
          send_json(res, describe(*t));
        });

  // Whatever else hangs under /kernels/ is a malformed key (or a traversal attempt).
  http_->Get(R"(/kernels/(.*))", [](const httplib::Request& req, httplib::Response& res) {
    std::string key;
    if (valid_key(req, res, key)) send_problem(res, problem_json(404, "no route for " + req.path));
  });
}

}  // namespace kforge::api
