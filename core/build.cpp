#include "core/build.hpp"

#include <sstream>

#include "core/codeobj.hpp"
#include "core/templates/template.hpp"
#include "core/fsutil.hpp"
#include "core/hash.hpp"

namespace kforge::core {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// The key hashes the source without leading and trailing whitespace: editors and
// generators disagree on the final newline, the compiler does not care.
std::string_view strip(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
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

std::string kernel_key(const KeyInputs& in) {
  nlohmann::json argv = nlohmann::json::array();
  for (const auto& step : in.steps) {
    std::vector<std::string> a = step.argv;
    a[0] = fs::path(a[0]).filename().string();  // the identity covers the real path
    argv.push_back(a);
  }
  nlohmann::json canon = {
      {"format", DiskStore::kFormat},
      {"backend", backend_name(in.backend)},
      {"archs", in.archs},
      {"compiler",
       {{"realpath", in.toolchain->compiler.string()},
        {"version_sha256", sha256_hex(in.toolchain->version_text)}}},
      {"argv", argv},
      {"source", strip(in.source)},
  };
  return sha256_hex(canon.dump());
}

std::string kernel_symbol(Backend backend, std::string_view family, const std::string& key) {
  return std::string(backend_name(backend)) + "_" + std::string(family) + "_" + key.substr(0, 12);
}

Builder::Builder(const Toolchains& toolchains, DiskStore& store, BuildConfig config, Spawner spawn)
    : toolchains_(toolchains), store_(store), config_(config), spawn_(std::move(spawn)) {}

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
  if (req.tmpl) {
    const templates::Template* t = templates::Registry::builtin().find(req.tmpl->name);
    if (!t) {
      std::string known;
      for (const auto& x : templates::Registry::builtin().all()) known += (known.empty() ? "" : ", ") + x->name();
      return fail_field("/template", "unknown template `" + req.tmpl->name + "` (known: " + known + ")");
    }
    templates::TemplateRequest treq{req.backend, p.archs, *req.tmpl};
    if (auto r = t->check(treq); !r) return std::unexpected(r.error());
    p.req.tmpl = std::move(treq.spec);  // parameters now complete: {} and the defaults are one request
  }
  nlohmann::json rcanon = {{"format", DiskStore::kFormat},
                           {"identity", tc.identity},
                           {"request", p.req.canonical(p.archs)}};
  p.request_key = sha256_hex(rcanon.dump());
  return p;
}

Result<RenderedKernel> Builder::render(const PreparedRequest& p) const {
  RenderedKernel k;
  if (p.req.tmpl) {
    const templates::Template* t = templates::Registry::builtin().find(p.req.tmpl->name);
    auto r = t->render({p.req.backend, p.archs, *p.req.tmpl}, p.req.reference);
    if (!r) return std::unexpected(r.error());
    k.source = std::move(r->source);
    k.abi = std::move(r->abi);
    k.family = r->family;
  } else {
    auto abi = parse_signature(p.req.source, p.req.backend);
    if (!abi) return std::unexpected(abi.error());
    k.source = p.req.source;
    k.abi = std::move(*abi);
    k.family = "kernel";
  }
  const std::string src_name = "source." + std::string(source_extension(p.req.backend));
  k.steps = p.toolchain->compile_steps(p.archs, p.req.options, src_name);
  k.key = kernel_key({p.req.backend, p.archs, p.toolchain, k.steps, k.source});
  k.abi.symbol = kernel_symbol(p.req.backend, k.family, k.key);
  return k;
}

Result<BuildResult> Builder::build(const KernelRequest& req) {
  const auto t0 = Clock::now();
  BuildResult out;
  auto t = Clock::now();
  auto prepared = prepare(req);
  if (!prepared) return std::unexpected(prepared.error());
  out.phases_ms["validate"] = ms_since(t);

  // The request key: a repeated request is answered without parsing or rendering.
  t = Clock::now();
  if (auto key = store_.lookup_request(prepared->request_key)) {
    if (auto m = store_.lookup(*key)) {
      out.manifest = std::move(*m);
      out.cache = "hit";
    }
  }
  out.phases_ms["lookup"] = ms_since(t);
  if (out.cache.empty()) {
    t = Clock::now();
    auto kernel = render(*prepared);
    if (!kernel) return std::unexpected(kernel.error());
    out.phases_ms["render"] = ms_since(t);
    if (auto m = store_.lookup(kernel->key)) {
      out.manifest = std::move(*m);
      out.cache = "hit";
    } else {
      auto m2 = compile(*prepared, *kernel, out.phases_ms);
      if (!m2) return std::unexpected(m2.error());
      out.manifest = std::move(*m2);
      out.cache = "miss";
    }
    if (auto r = store_.put_request(prepared->request_key, kernel->key); !r) return std::unexpected(r.error());
  }
  if (out.manifest.value("status", "") == "failed") {
    // A cached negative entry: the same compile error, without running the compiler.
    Error e = Error::make(ErrorKind::kCompileFailed, "compilation failed (cached result)");
    e.extra = {{"key", out.manifest["key"]},
               {"cache", out.cache},
               {"argv", out.manifest["compile"]["argv"]},
               {"log", out.manifest["compile"].value("log_text", "")},
               {"expires_at", out.manifest["expires_at"]}};
    (out.cache == "hit" ? hits_ : misses_)++;
    return std::unexpected(e);
  }
  (out.cache == "hit" ? hits_ : misses_)++;
  out.phases_ms["total"] = ms_since(t0);
  return out;
}

Result<nlohmann::json> Builder::compile(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                        nlohmann::json& phases) {
  const KernelRequest& req = prepared.req;
  const Toolchain& tc = *prepared.toolchain;
  const auto& archs = prepared.archs;
  const auto& steps = kernel.steps;
  const std::string& key = kernel.key;
  auto staging = store_.make_staging();
  if (!staging) return std::unexpected(staging.error());
  struct Cleanup {  // the staging dir is gone unless publish() renamed it away
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{*staging};

  const Abi& abi = kernel.abi;
  const std::string src_name = "source." + std::string(source_extension(req.backend));
  if (auto r = write_file(*staging / src_name, substitute_kernel_name(kernel.source, abi.symbol)); !r) {
    return std::unexpected(r.error());
  }
  fs::path work = *staging / "work";
  fs::create_directories(work);

  auto t = Clock::now();
  std::string log;
  nlohmann::json step_info = nlohmann::json::array();
  std::optional<ProcessResult> failed;
  for (const auto& step : steps) {
    ProcessSpec spec;
    spec.argv = step.argv;
    spec.cwd = *staging;
    spec.env = tc.child_env(work);
    spec.timeout = config_.compile_timeout;
    spec.output_cap = config_.output_cap;
    compiler_runs_++;
    auto r = spawn_(spec);
    if (!r) return std::unexpected(r.error());
    log += "$ " + shell_quote_for_log(step.argv) + "\n" + r->output;
    if (!log.empty() && log.back() != '\n') log += '\n';
    step_info.push_back({{"argv", step.argv}, {"seconds", r->seconds}, {"result", r->describe()}});
    if (!r->ok()) {
      failed = std::move(*r);
      break;
    }
  }
  phases["compile"] = ms_since(t);
  fs::remove_all(work);

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
  if (failed) {
    compile_info["log_text"] = log;
    manifest["compile"] = compile_info;
    if (failed->timed_out) {
      Error e = Error::make(ErrorKind::kTimeout, "the compiler " + failed->describe());
      e.extra = {{"key", key}, {"argv", steps.front().argv}, {"log", log}};
      return std::unexpected(e);
    }
    manifest["status"] = "failed";
    manifest["expires_at"] = store_.now_seconds() + config_.negative_ttl.count();
    auto published = store_.publish(*staging, key, manifest);
    Error e = Error::make(ErrorKind::kCompileFailed,
                          "compilation failed: the compiler " + failed->describe());
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
  auto published = store_.publish(*staging, key, manifest);
  phases["publish"] = ms_since(t);
  return published;
}

}  // namespace kforge::core
