#include "core/build/build.hpp"

#include <condition_variable>
#include <csignal>
#include <thread>

#include <sstream>

#include "core/toolchain/codeobj.hpp"
#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "core/renderer_digest.hpp"
#include "core/templates/template.hpp"
#include "core/base/utf8.hpp"
#include "core/build/why.hpp"

namespace kforge::core {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::string shell_quote_for_log(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = a.find_first_of(" \t'\"[]$*?") == std::string::npos && !a.empty();
    out += plain ? a : "'" + a + "'";
  }
  return out;
}

}  // namespace

Builder::Builder(const Toolchains& toolchains, storage::Storage& storage, BuildConfig config, Spawner spawn)
    : toolchains_(toolchains), storage_(storage), config_(config), spawn_(std::move(spawn)) {}

Result<PreparedRequest> Builder::prepare(const KernelRequest& req) const {
  PreparedRequest p;
  p.req = req;
  const Toolchain& tc = toolchains_.get(req.backend);
  if (!tc.available) {
    Error e = Error::bad_field("/backend", "backend " + std::string(backend_name(req.backend)) +
                                               " is unavailable on this host: " + tc.reason);
    e.kind = ErrorKind::kUnavailable;
    return std::unexpected(e);
  }
  p.toolchain = &tc;
  auto archs = tc.resolve_archs(req.archs, "/arch");
  if (!archs) return std::unexpected(archs.error());
  p.archs = std::move(*archs);
  if (req.backend == Backend::kCpu && tc.isa_cache) {
    auto isa = tc.cpu_isa(p.archs.front());
    if (!isa) return std::unexpected(isa.error());
    p.cpu = std::move(*isa);
  }
  if (!req.benchmark.is_null()) {
    if (auto r = p.check_runnable(); !r) return std::unexpected(r.error());
  }
  for (size_t i = 0; i < req.options.includes.size(); ++i) {
    auto inc = resolve_include(toolchains_.libraries(), req.options.includes[i],
                               "/options/includes/" + std::to_string(i));
    if (!inc) return std::unexpected(inc.error());
    p.includes.push_back(std::move(*inc));
  }
  if (!req.export_name.empty()) {
    if (!contains_identifier(req.source, req.export_name))
      return fail_field("/export_name", "the source never names `" + req.export_name + "`");
    if (contains_identifier(req.source, kKernelNamePlaceholder))
      return fail_field("/export_name", "the source uses KERNEL_NAME as well as `" + req.export_name +
                                            "`: export one name, either the placeholder or export_name");
    if (toolchains_.objcopy().empty()) {
      Error e = Error::bad_field("/export_name", "this server has no objcopy (binutils) to rename kernels with");
      e.kind = ErrorKind::kUnavailable;
      return std::unexpected(e);
    }
  }
  if (req.tmpl) {
    const templates::Template* t = templates::Registry::builtin().find(req.tmpl->name);
    if (!t) {
      std::string known;
      for (const auto& x : templates::Registry::builtin().all())
        known += (known.empty() ? "" : ", ") + x->name();
      return fail_field("/template",
                        "unknown template `" + req.tmpl->name + "` (known: " + known + ")");
    }
    templates::TemplateRequest treq = p.template_request();
    if (auto r = t->check(treq); !r) return std::unexpected(r.error());
    p.req.tmpl =
        std::move(treq.spec);  // parameters now complete: {} and the defaults are one request
  }
  // A library is named in the request but enters the key by its content: a request that
  // names a changed library is a new request (the memo never answers with a stale kernel).
  nlohmann::json libraries = nlohmann::json::array();
  for (const auto& inc : p.includes) libraries.push_back(inc.spelling);
  nlohmann::json rcanon = {{"format", storage::DiskTier::kFormat},
                           {"identity", tc.identity},
                           {"libraries", libraries},
                           {"request", p.req.canonical(p.archs)}};
  // A template request names its kernel only through the renderer that turns it into source:
  // the renderers' digest keeps a memo written by another kforge's renderers from answering.
  if (p.req.tmpl) rcanon["renderer"] = KFORGE_RENDERER_DIGEST;
  p.request_key = sha256_hex(rcanon.dump());
  return p;
}

Result<RenderedKernel> Builder::render(const PreparedRequest& p) const {
  RenderedKernel k;
  if (p.req.tmpl) {
    const templates::Template* t = templates::Registry::builtin().find(p.req.tmpl->name);
    auto r = t->render(p.template_request(), p.req.reference);
    if (!r) return std::unexpected(r.error());
    k.source = std::move(r->source);
    k.abi = std::move(r->abi);
    k.family = r->family;
  } else {
    // The exported name becomes the placeholder again: the kernel key is name-independent.
    k.source = p.req.export_name.empty()
                   ? p.req.source
                   : replace_identifier(p.req.source, p.req.export_name, kKernelNamePlaceholder);
    auto abi = parse_signature(k.source, p.req.backend);
    if (!abi) return std::unexpected(abi.error());
    k.abi = std::move(*abi);
    k.family = "kernel";
  }
  const std::string src_name = "source." + std::string(source_extension(p.req.backend));
  k.steps = p.toolchain->compile_steps(p.archs, p.req.options, src_name, p.includes);
  k.key = kernel_key({p.req.backend, p.archs, p.toolchain, k.steps, k.source, p.includes});
  k.abi.symbol = kernel_symbol(p.req.backend, k.family, k.key);
  if (!p.req.export_name.empty()) {
    k.export_name = p.req.export_name;
    k.export_key = export_key(k.key, k.export_name);
  }
  return k;
}

namespace {

// The compiler's first error line in `log` (g++, nvcc and hipcc all write "error"), else
// its first line that is not a command ("$ ..."): what a 422's detail quotes.
std::string first_error_line(std::string_view log) {
  std::string_view fallback;
  for (size_t at = 0; at < log.size();) {
    const size_t end = std::min(log.find('\n', at), log.size());
    std::string_view line = log.substr(at, end - at);
    at = end + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line.empty() || line.starts_with("$ ")) continue;
    if (line.find("error") != std::string_view::npos) return std::string(line.substr(0, 300));
    if (fallback.empty() && line.find("In function") == std::string_view::npos) fallback = line;
  }
  return std::string(fallback.substr(0, 300));
}

std::string with_first_error(std::string detail, std::string_view log) {
  const std::string line = first_error_line(log);
  return line.empty() ? detail : detail + ": " + line;
}

// A cached negative entry answers with the same compile error, without the compiler.
Error cached_failure(const BuildResult& r) {
  const auto& m = r.manifest;
  Error e = Error::make(ErrorKind::kCompileFailed,
                        with_first_error("compilation failed (cached result)", m["compile"].value("log_text", "")));
  e.extra = {{"key", m["key"]},
             {"cache", r.cache},
             {"argv", m["compile"]["argv"]},
             {"log", m["compile"].value("log_text", "")},
             {"expires_at", m["expires_at"]}};
  return e;
}

}  // namespace

Result<BuildPlan> Builder::plan(const KernelRequest& req) {
  BuildPlan plan;
  auto t = Clock::now();
  auto prepared = prepare(req);
  if (!prepared) return std::unexpected(prepared.error());
  plan.prepared = std::move(*prepared);
  plan.phases_ms["validate"] = ms_since(t);

  auto answer = [&](std::shared_ptr<const nlohmann::json> manifest) -> Result<BuildPlan> {
    BuildResult hit{*manifest, "hit", plan.phases_ms, manifest};
    storage_.local().touch(hit.manifest["key"]);
    hits_++;
    if (hit.manifest.value("status", "") == "failed") return std::unexpected(cached_failure(hit));
    plan.hit = std::move(hit);
    return std::move(plan);
  };
  // The request key: a repeated request is answered without rendering.
  t = Clock::now();
  if (auto key = storage_.find_request(plan.prepared.request_key)) {
    if (auto m = storage_.find(*key)) {
      plan.phases_ms["lookup"] = ms_since(t);
      return answer(std::move(m));
    }
  }
  plan.phases_ms["lookup"] = ms_since(t);
  t = Clock::now();
  auto kernel = render(plan.prepared);
  if (!kernel) return std::unexpected(kernel.error());
  plan.kernel = std::move(*kernel);
  plan.phases_ms["render"] = ms_since(t);
  const RenderedKernel& k = *plan.kernel;
  if (auto m = storage_.find(k.answer_key())) {
    if (auto r = storage_.remember_request(plan.prepared.request_key, k.answer_key()); !r)
      return std::unexpected(r.error());
    return answer(std::move(m));
  }
  if (!k.export_name.empty()) {  // the same source failed under another name
    if (auto m = storage_.find(k.key); m && m->value("status", "") == "failed") return answer(std::move(m));
  }
  return plan;
}

void Builder::explain(BuildPlan& plan) {
  if (!plan.kernel || plan.hit) return;
  const auto t = Clock::now();
  const PreparedRequest& p = plan.prepared;
  const RenderedKernel& k = *plan.kernel;
  plan.why = explain_miss(storage_.local(), {k.key, kernel_family(p, k), key_inputs(p, k), k.source,
                                   "source." + std::string(source_extension(p.req.backend))});
  plan.phases_ms["explain"] = ms_since(t);
}

Result<BuildResult> Builder::build(const BuildPlan& plan) {
  if (plan.hit) return *plan.hit;
  const auto t0 = Clock::now();
  const RenderedKernel& k = *plan.kernel;
  BuildResult out{nullptr, "miss", plan.phases_ms, nullptr};
  // Another process sharing the cache may have built it since the plan was made.
  if (auto m = storage_.find(k.answer_key())) {
    out.manifest = std::move(*m);
    out.cache = "hit";
  } else {
    nlohmann::json base;
    bool compiled = false;
    bool joined = false;
    if (auto m = storage_.find(k.key)) {
      base = std::move(*m);
    } else {
      auto built = compile_once(plan.prepared, k, out.phases_ms, joined);
      if (!built) {
        misses_++;
        return std::unexpected(built.error());
      }
      base = std::move(*built);
      compiled = !joined;
    }
    if (k.export_name.empty() || base.value("status", "") == "failed") {
      out.manifest = std::move(base);
      out.cache = compiled ? "miss" : joined ? "joined" : "hit";
    } else {
      auto exported = export_as(plan.prepared, k, base, out.phases_ms);
      if (!exported) return std::unexpected(exported.error());
      out.manifest = std::move(*exported);
      out.cache = compiled ? "miss" : "renamed";
    }
  }
  (out.cache == "miss" ? misses_ : hits_)++;
  if (out.manifest.value("status", "") == "failed") return std::unexpected(cached_failure(out));
  if (auto r = storage_.remember_request(plan.prepared.request_key, out.manifest["key"].get<std::string>()); !r)
    return std::unexpected(r.error());
  double total = ms_since(t0);
  for (const char* p : {"validate", "lookup", "render"}) total += plan.phases_ms.value(p, 0.0);
  out.phases_ms["total"] = total;
  return out;
}

std::shared_ptr<const nlohmann::json> Builder::find_answer(const std::string& request_key, bool local_only) {
  auto key = storage_.find_request(request_key, local_only);
  if (!key) return nullptr;
  // An event loop answers only what the shared tier holds too: a client downloads next,
  // perhaps from another instance. The rest is answered by a worker, which repairs first.
  if (local_only && !storage_.known_shared(*key)) return nullptr;
  auto m = local_only ? storage_.local().lookup(*key) : storage_.find(*key);
  if (!m || m->value("status", "") != "ok") return nullptr;
  storage_.local().touch(*key);
  hits_++;
  return m;
}

Result<nlohmann::json> Builder::compile_once(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                             nlohmann::json& phases, bool& joined) {
  joined = false;
  if (!leases_) return compile(prepared, kernel, phases);
  // Single flight across the cluster: the lease holder compiles; the others wait for its
  // manifest, and take the build over when its lease expires (core/cluster/lease.hpp).
  using Built = Result<nlohmann::json>;
  return leases_->single_flight<Built>(
      kernel.key, config_.lease_ttl,
      [&]() -> std::optional<Built> {
        if (auto m = storage_.find(kernel.key, /*polling=*/true)) return Built(*m);
        return std::nullopt;
      },
      [&] { return compile(prepared, kernel, phases); }, joined);
}

Result<ProcessResult> Builder::run_step(const PreparedRequest& prepared, const std::vector<std::string>& argv,
                                        const fs::path& dir, std::string& log, nlohmann::json& steps) {
  fs::path work = dir / "work";
  fs::create_directories(work);
  ProcessSpec spec;
  spec.argv = argv;
  spec.cwd = dir;
  spec.env = prepared.toolchain->child_env(work);
  spec.timeout = config_.compile_timeout;
  spec.output_cap = config_.output_cap;
  auto r = spawn_(spec);
  std::error_code ec;
  fs::remove_all(work, ec);
  if (!r) return std::unexpected(r.error());
  // Compilers quote the source's bytes back: the log goes into JSON, so it is UTF-8.
  log += "$ " + shell_quote_for_log(argv) + "\n" + sanitize_utf8(r->output);
  if (!log.empty() && log.back() != '\n') log += '\n';
  steps.push_back({{"argv", argv}, {"seconds", r->seconds}, {"result", r->describe()}});
  return r;
}

Result<nlohmann::json> Builder::export_as(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                          const nlohmann::json& base, nlohmann::json& phases) {
  storage::DiskTier& local = storage_.local();
  storage::DiskTier::Pin pin(local, kernel.key);  // its kernel.o is read below
  auto staging = local.make_staging();
  if (!staging) return std::unexpected(staging.error());
  RemoveOnExit cleanup{*staging};  // unless published (renamed away)
  const auto t = Clock::now();
  const auto object = local.read_verified(kernel.key, "kernel.o");
  if (!object) return fail(ErrorKind::kInternal, "kernel " + kernel.key + " has no verified kernel.o to export");
  if (auto r = write_file(*staging / "base.o", *object); !r) return std::unexpected(r.error());
  const std::string src_name = base.value("source_file", "source.cpp");
  if (auto r = write_file(*staging / src_name, substitute_kernel_name(kernel.source, kernel.export_name)); !r)
    return std::unexpected(r.error());
  std::string log = "# kernel " + kernel.key + " (symbol " + kernel.abi.symbol + ") exported as " +
                    kernel.export_name + "\n";
  nlohmann::json steps = nlohmann::json::array();
  const std::vector<std::vector<std::string>> argvs = {
      {toolchains_.objcopy().string(), "--redefine-sym", kernel.abi.symbol + "=" + kernel.export_name, "base.o",
       "kernel.o"},
      prepared.toolchain->link_step(prepared.archs).argv};
  for (const auto& argv : argvs) {
    auto r = run_step(prepared, argv, *staging, log, steps);
    if (!r) return std::unexpected(r.error());
    if (!r->ok()) {  // the code compiled once already: this is the server's fault, not the source's
      Error e = Error::make(ErrorKind::kInternal, "exporting the kernel as " + kernel.export_name +
                                                      " failed: " + argv[0] + " " + r->describe());
      e.extra = {{"key", kernel.key}, {"log", log}};
      return std::unexpected(e);
    }
  }
  std::error_code ec;
  fs::remove(*staging / "base.o", ec);
  auto base_log = local.read_verified(kernel.key, "compile.log");
  if (auto r = write_file(*staging / "compile.log", base_log.value_or("") + log); !r) return std::unexpected(r.error());
  auto objects = list_code_objects(*staging / "kernel.so");
  if (!objects) return fail(ErrorKind::kInternal, "the relinked kernel.so is unreadable: " + objects.error().message);
  nlohmann::json manifest = base;
  for (const char* f : {"files", "key", "format", "created_at", "expires_at"}) manifest.erase(f);
  manifest["kernel_name"] = kernel.export_name;
  manifest["abi"]["symbol"] = kernel.export_name;
  manifest["code_objects"] = to_json(*objects);
  phases["export"] = ms_since(t);
  manifest["export"] = {{"name", kernel.export_name}, {"of", kernel.key}, {"steps", steps},
                        {"seconds", phases["export"].get<double>() / 1000.0}};
  return storage_.publish(*staging, kernel.export_key, manifest);
}

Result<BuildResult> Builder::build(const KernelRequest& req) {
  auto p = plan(req);
  if (!p) return std::unexpected(p.error());
  return build(*p);
}

Result<nlohmann::json> Builder::compile(const PreparedRequest& prepared,
                                        const RenderedKernel& kernel, nlohmann::json& phases) {
  const KernelRequest& req = prepared.req;
  const Toolchain& tc = *prepared.toolchain;
  const auto& archs = prepared.archs;
  const auto& steps = kernel.steps;
  const std::string& key = kernel.key;
  auto staging = storage_.local().make_staging();
  if (!staging) return std::unexpected(staging.error());
  RemoveOnExit cleanup{*staging};  // unless published (renamed away)

  const Abi& abi = kernel.abi;
  const std::string src_name = "source." + std::string(source_extension(req.backend));
  if (auto r = write_file(*staging / src_name, substitute_kernel_name(kernel.source, abi.symbol));
      !r) {
    return std::unexpected(r.error());
  }
  auto t = Clock::now();
  std::string log;
  nlohmann::json step_info = nlohmann::json::array();
  std::optional<ProcessResult> failed;
  for (const auto& step : steps) {
    compiler_runs_++;
    auto r = run_step(prepared, step.argv, *staging, log, step_info);
    if (!r) return std::unexpected(r.error());
    if (!r->ok()) {
      failed = std::move(*r);
      break;
    }
  }
  phases["compile"] = ms_since(t);

  nlohmann::json compile_info = {
      {"argv", steps.front().argv},
      {"steps", step_info},
      {"compiler", tc.compiler.string()},
      {"version", tc.version_text},
      {"identity", tc.identity},
      {"options", req.options.to_json()},
      {"seconds", phases["compile"].get<double>() / 1000.0},
      {"resources", parse_resource_usage(req.backend, log, archs)},
  };
  if (auto r = write_file(*staging / "compile.log", log); !r) return std::unexpected(r.error());

  nlohmann::json manifest = {
      {"kernel_name", abi.symbol},
      {"built_by", config_.instance},
      {"backend", backend_name(req.backend)},
      {"archs", archs},
      {"source_file", src_name},
      {"abi", abi.to_json()},
      {"workspace_bytes",
       abi.workspace_bytes ? nlohmann::json(*abi.workspace_bytes) : nlohmann::json(nullptr)},
  };
  if (req.tmpl) {
    manifest["template"] = req.tmpl->to_json();
    manifest["template"]["reference"] = req.reference;
  }
  // What the key was made of, for "why did this miss" (core/build/why.hpp).
  manifest["inputs"] = key_inputs(prepared, kernel);
  manifest["family"] = kernel_family(prepared, kernel);
  if (failed) {
    compile_info["log_text"] = log;
    manifest["compile"] = compile_info;
    if (failed->timed_out) {
      Error e = Error::make(ErrorKind::kTimeout, "the compiler " + failed->describe());
      e.extra = {{"key", key}, {"argv", steps.front().argv}, {"log", log}};
      return std::unexpected(e);
    }
    if (log.find("No space left on device") != std::string::npos) {
      // The disk, not the source: not cached (it could not be anyway).
      Error e = Error::make(
          ErrorKind::kInternal,
          "the cache filesystem is full (No space left on device); free space and submit again");
      e.extra = {{"key", key}, {"cache", "miss"}, {"argv", steps.front().argv}, {"log", log}};
      return std::unexpected(e);
    }
    // Killed from outside (the OOM killer, an operator): not the source's fault, not cached.
    // g++'s driver reports its compiler proper's death as "Killed signal terminated program".
    const bool killed =
        (failed->term_signal == SIGKILL && !failed->timed_out && !failed->output_capped) ||
        log.find("Killed signal terminated program") != std::string::npos;
    if (killed) {
      Error e = Error::make(ErrorKind::kCompileFailed, "the compiler was " + failed->describe() +
                                                           " (not cached; submit again)");
      e.extra = {{"key", key}, {"cache", "miss"}, {"argv", steps.front().argv}, {"log", log}};
      return std::unexpected(e);
    }
    manifest["status"] = "failed";
    manifest["expires_at"] = storage_.local().now_seconds() + config_.negative_ttl.count();
    auto published = storage_.publish(*staging, key, manifest);
    Error e = Error::make(ErrorKind::kCompileFailed,
                          with_first_error("compilation failed: the compiler " + failed->describe(), log));
    e.extra = {{"key", key}, {"cache", "miss"}, {"argv", steps.front().argv}, {"log", log}};
    if (!published) e.extra["cache_error"] = published.error().message;
    return std::unexpected(e);
  }
  auto objects = list_code_objects(*staging / "kernel.so");
  if (!objects) {
    return fail(ErrorKind::kInternal,
                "the compiler exited 0 but kernel.so is unreadable: " + objects.error().message);
  }
  manifest["code_objects"] = to_json(*objects);
  manifest["status"] = "ok";
  manifest["compile"] = compile_info;
  t = Clock::now();
  auto published = storage_.publish(*staging, key, manifest);
  phases["publish"] = ms_since(t);
  return published;
}

}  // namespace kforge::core
