#include "api/server.hpp"

#include <httplib.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "api/problem.hpp"
#include "core/fsutil.hpp"
#include "core/hash.hpp"
#include "core/templates/template.hpp"
#include "core/wrapper.hpp"

namespace kforge::embedded {
extern const std::string_view openapi_json;
}

namespace kforge::api {
namespace {

constexpr const char* kJson = "application/json";

void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(2) + "\n", kJson);
}

void send_problem(httplib::Response& res, const nlohmann::json& problem) {
  res.status = problem.value("status", 500);
  res.set_content(problem.dump(2) + "\n", kProblemType);
}

void send_error(httplib::Response& res, const core::Error& e) {
  send_problem(res, problem_json(e));
}

// Checks the {key} path parameter before it touches the disk.
bool valid_key(const httplib::Request& req, httplib::Response& res, std::string& key) {
  key = req.matches[1];
  if (core::is_hex_key(key)) return true;
  send_problem(res, problem_json(400, "a kernel key is 64 lowercase hex characters", "/key"));
  return false;
}

}  // namespace

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
    j["workspace_bytes"] = m["abi"].value("workspace_bytes", nlohmann::json(nullptr));
    auto abi = core::Abi::from_json(m["abi"]);
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
  if (m.contains("expires_at")) j["expires_at"] = m["expires_at"];
  return j;
}

Server::Server(ServerConfig config, core::Builder& builder, core::DiskStore& store,
               const core::Toolchains& toolchains, core::Bencher& bencher, core::Autotuner& autotuner)
    : config_(std::move(config)),
      builder_(builder),
      store_(store),
      toolchains_(toolchains),
      bencher_(bencher),
      autotuner_(autotuner),
      http_(std::make_unique<httplib::Server>()) {
  http_->set_payload_max_length(config_.max_body_bytes);
  http_->set_read_timeout(30);
  http_->set_write_timeout(30);
  // Statuses that httplib sets itself (404 for an unknown route, 413, 400 for a malformed
  // request) get a problem body too; bodies our handlers wrote are left alone.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string detail = res.status == 404   ? "no route for " + req.method + " " + req.path
                         : res.status == 413 ? "the request body is over the size limit"
                                             : "the request could not be processed";
    send_problem(res, problem_json(res.status, detail, res.status == 413 ? "/" : ""));
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
        std::cerr << "kforge: internal error: " << what << "\n";
        send_problem(res, problem_json(500, "internal error: " + what));
      });
  http_->set_logger([](const httplib::Request& req, const httplib::Response& res) {
    std::fprintf(stderr, "%s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
  });
  routes();
}

Server::~Server() = default;

core::Result<int> Server::bind() {
  int port = config_.port == 0
                 ? http_->bind_to_any_port(config_.host)
                 : (http_->bind_to_port(config_.host, config_.port) ? config_.port : -1);
  if (port <= 0) {
    return core::fail(core::ErrorKind::kInternal,
                      "cannot bind " + config_.host + ":" + std::to_string(config_.port));
  }
  return port;
}

void Server::run() {
  http_->listen_after_bind();
}
void Server::stop() {
  http_->stop();
}

void Server::routes() {
  auto& h = *http_;
  // Registers a handler and records its OpenAPI path, so a test can hold the spec to it.
  auto route = [&](const char* method, std::string api_path, const std::string& pattern,
                   httplib::Server::Handler handler) {
    routes_.push_back({method, std::move(api_path)});
    if (std::string(method) == "POST")
      h.Post(pattern, std::move(handler));
    else
      h.Get(pattern, std::move(handler));
  };

  route("POST", "/kernels", "/kernels",
        [this](const httplib::Request& req, httplib::Response& res) {
          auto body = core::parse_json_body(req.body, config_.max_json_depth);
          if (!body) return send_error(res, body.error());
          auto kreq = core::parse_kernel_request(*body, config_.limits);
          if (!kreq) return send_error(res, kreq.error());
          auto built = builder_.build(*kreq);
          if (!built) return send_error(res, built.error());
          nlohmann::json j = kernel_view(built->manifest);
          j["cache"] = built->cache;
          if (!kreq->benchmark.is_null()) {
            const auto t0 = std::chrono::steady_clock::now();
            const auto opts = core::BenchOptions::from_json(kreq->benchmark);
            std::optional<nlohmann::json> reference;
            if (opts.verify && kreq->tmpl && bencher_.available(kreq->backend)) {
              core::KernelRequest r = *kreq;
              r.reference = true;
              r.benchmark = nullptr;
              if (auto ref = builder_.build(r)) reference = ref->manifest;
            }
            j["benchmark"] = bencher_.run(built->manifest, opts, reference);
            built->phases_ms["benchmark"] =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          }
          j["phases_ms"] = built->phases_ms;
          send_json(res, j);
        });

  route("GET", "/kernels/{key}", R"(/kernels/([^/]+))",
        [this](const httplib::Request& req, httplib::Response& res) {
          std::string key;
          if (!valid_key(req, res, key)) return;
          auto m = store_.lookup(key);
          if (!m) return send_problem(res, problem_json(404, "no kernel with key " + key));
          send_json(res, kernel_view(*m));
        });

  for (const char* sub : {"artifact", "object", "source", "log"}) {
    routes_.push_back({"GET", std::string("/kernels/{key}/") + sub});
  }
  h.Get(R"(/kernels/([^/]+)/(artifact|object|source|log))", [this](const httplib::Request& req,
                                                                   httplib::Response& res) {
    std::string key;
    if (!valid_key(req, res, key)) return;
    const std::string what = req.matches[2];
    auto m = store_.lookup(key);
    if (!m) return send_problem(res, problem_json(404, "no kernel with key " + key));
    std::string file = what == "artifact" ? "kernel.so"
                       : what == "object" ? "kernel.o"
                       : what == "log"    ? "compile.log"
                                          : m->value("source_file", "");
    if (!(*m)["files"].contains(file)) {
      return send_problem(
          res,
          problem_json(404, "kernel " + key + " has no " + what +
                                (what == "object" ? " (it was not built with options.aot)" : "")));
    }
    const std::string sha = (*m)["files"][file]["sha256"];
    const std::string etag = "\"" + sha + "\"";
    res.set_header("ETag", etag);
    if (req.get_header_value("If-None-Match") == etag) {
      res.status = 304;
      return;
    }
    auto data = core::read_file(store_.entry_dir(key) / file);
    // Checked again as it is served: bytes flipped since the lookup are never sent.
    if (!data || core::sha256_hex(*data) != sha) {
      store_.remove_entry(key);
      return send_problem(
          res, problem_json(404, "kernel " + key +
                                     " was corrupt on disk and has been removed; submit it again"));
    }
    bool binary = what == "artifact" || what == "object";
    if (binary) {
      res.set_header("Content-Disposition", "attachment; filename=\"" +
                                                m->value("kernel_name", key) +
                                                (what == "artifact" ? ".so\"" : ".o\""));
    }
    res.set_content(std::move(*data),
                    binary ? "application/octet-stream" : "text/plain; charset=utf-8");
  });

  route("POST", "/autotune", "/autotune", [this](const httplib::Request& req, httplib::Response& res) {
    auto body = core::parse_json_body(req.body, config_.max_json_depth);
    if (!body) return send_error(res, body.error());
    if (!body->is_object()) return send_problem(res, problem_json(400, "the request body must be a JSON object", ""));
    nlohmann::json choices = body->value("choices", nlohmann::json("default"));
    body->erase("choices");
    if (!body->contains("template")) return send_problem(res, problem_json(400, "autotuning needs a template request", "/template"));
    if (body->contains("params")) return send_problem(res, problem_json(400, "give the parameters to try in `choices`, not `params`", "/params"));
    auto kreq = core::parse_kernel_request(*body, config_.limits);
    if (!kreq) return send_error(res, kreq.error());
    auto result = autotuner_.run(*kreq, choices);
    if (!result) return send_error(res, result.error());
    send_json(res, *result);
  });

  route("POST", "/render", "/render", [this](const httplib::Request& req, httplib::Response& res) {
    auto body = core::parse_json_body(req.body, config_.max_json_depth);
    if (!body) return send_error(res, body.error());
    auto kreq = core::parse_kernel_request(*body, config_.limits);
    if (!kreq) return send_error(res, kreq.error());
    auto prepared = builder_.prepare(*kreq);
    if (!prepared) return send_error(res, prepared.error());
    auto kernel = builder_.render(*prepared);
    if (!kernel) return send_error(res, kernel.error());
    nlohmann::json argv = nlohmann::json::array();
    for (const auto& step : kernel->steps) argv.push_back(step.argv);
    nlohmann::json j = {{"key", kernel->key},
                        {"request_key", prepared->request_key},
                        {"kernel_name", kernel->abi.symbol},
                        {"backend", core::backend_name(kreq->backend)},
                        {"archs", prepared->archs},
                        {"source", core::substitute_kernel_name(kernel->source, kernel->abi.symbol)},
                        {"abi", kernel->abi.to_json()},
                        {"workspace_bytes", kernel->abi.workspace_bytes ? nlohmann::json(*kernel->abi.workspace_bytes) : nlohmann::json(nullptr)},
                        {"wrapper", {{"python", core::python_wrapper(kernel->abi, kreq->backend)},
                                     {"cpp", core::cpp_wrapper(kernel->abi, kreq->backend)}}},
                        {"compile", {{"argv", argv}}}};
    if (prepared->req.tmpl) j["template"] = prepared->req.tmpl->to_json();
    send_json(res, j);
  });

  auto describe = [this](const core::templates::Template& t) {
    nlohmann::json backends = nlohmann::json::object();
    for (core::Backend b : core::kAllBackends) {
      nlohmann::json d = t.describe(b);
      const auto& tc = toolchains_.get(b);
      core::templates::TemplateRequest probe{b, tc.native ? std::vector<std::string>{*tc.native} : std::vector<std::string>{}, {}};
      d["default_choices"] = t.default_choices(probe);
      d["default_choices_for_arch"] = tc.native ? nlohmann::json(*tc.native) : nlohmann::json(nullptr);
      backends[std::string(core::backend_name(b))] = d;
    }
    return nlohmann::json{{"name", t.name()}, {"description", t.description()}, {"backends", backends}};
  };
  route("GET", "/templates", "/templates", [describe](const httplib::Request&, httplib::Response& res) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : core::templates::Registry::builtin().all()) list.push_back(describe(*t));
    send_json(res, {{"templates", list}});
  });
  route("GET", "/templates/{name}", R"(/templates/([^/]+))", [describe](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    const auto* t = core::templates::Registry::builtin().find(name);
    if (!t) return send_problem(res, problem_json(404, "no template named `" + name + "`", "/name"));
    send_json(res, describe(*t));
  });

  // Whatever else hangs under /kernels/ is a malformed key (or a traversal attempt).
  h.Get(R"(/kernels/(.*))", [](const httplib::Request& req, httplib::Response& res) {
    std::string key;
    if (valid_key(req, res, key)) send_problem(res, problem_json(404, "no route for " + req.path));
  });

  route("GET", "/toolchains", "/toolchains",
        [this](const httplib::Request&, httplib::Response& res) {
          nlohmann::json j = toolchains_.to_json();
          for (core::Backend b : core::kAllBackends) {
            const std::string name(core::backend_name(b));
            j[name]["device"] = bencher_.devices()[name];
          }
          send_json(res, j);
        });

  route("GET", "/healthz", "/healthz", [this](const httplib::Request&, httplib::Response& res) {
    double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    send_json(res, {{"status", "ok"}, {"version", KFORGE_VERSION}, {"uptime_s", up}});
  });

  route("GET", "/metrics", "/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::ostringstream m;
    m << "# HELP kforge_compiler_runs_total Compiler processes started.\n"
      << "# TYPE kforge_compiler_runs_total counter\n"
      << "kforge_compiler_runs_total " << builder_.compiler_runs() << "\n"
      << "# HELP kforge_cache_requests_total Kernel requests by cache outcome.\n"
      << "# TYPE kforge_cache_requests_total counter\n"
      << "kforge_cache_requests_total{outcome=\"hit\"} " << builder_.hits() << "\n"
      << "kforge_cache_requests_total{outcome=\"miss\"} " << builder_.misses() << "\n"
      << "# HELP kforge_benchmark_runs_total Runner processes started for benchmarks.\n"
      << "# TYPE kforge_benchmark_runs_total counter\n"
      << "kforge_benchmark_runs_total " << bencher_.runs() << "\n";
    res.set_content(m.str(), "text/plain; version=0.0.4");
  });

  route("GET", "/openapi.json", "/openapi.json",
        [](const httplib::Request&, httplib::Response& res) {
          res.set_content(std::string(embedded::openapi_json), kJson);
        });
}

}  // namespace kforge::api
