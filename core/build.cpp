#include "core/build.hpp"

#include <sstream>

#include "core/codeobj.hpp"
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

Result<BuildResult> Builder::build(const KernelRequest& req) {
  const auto t0 = Clock::now();
  BuildResult out;
  const Toolchain& tc = toolchains_.get(req.backend);
  if (!tc.available) {
    Error e = Error::bad_field("/backend", "backend " + std::string(backend_name(req.backend)) +
                                               " is unavailable on this host: " + tc.reason);
    e.kind = ErrorKind::kUnavailable;
    return std::unexpected(e);
  }
  auto archs = tc.resolve_archs(req.archs, "/arch");
  if (!archs) return std::unexpected(archs.error());

  // The request key: a repeated request is answered without parsing or rendering.
  auto t = Clock::now();
  nlohmann::json rcanon = {{"format", DiskStore::kFormat},
                           {"identity", tc.identity},
                           {"request", req.canonical(*archs)}};
  const std::string rkey = sha256_hex(rcanon.dump());
  if (auto key = store_.lookup_request(rkey)) {
    if (auto m = store_.lookup(*key)) {
      out.phases_ms["lookup"] = ms_since(t);
      out.manifest = std::move(*m);
      out.cache = "hit";
    }
  }
  if (out.cache.empty()) {
    out.phases_ms["lookup"] = ms_since(t);
    t = Clock::now();
    auto abi = parse_signature(req.source, req.backend);
    if (!abi) return std::unexpected(abi.error());
    const std::string src_name = "source." + std::string(source_extension(req.backend));
    auto steps = tc.compile_steps(*archs, req.options, src_name);
    const std::string key = kernel_key({req.backend, *archs, &tc, steps, req.source});
    out.phases_ms["key"] = ms_since(t);
    if (auto m = store_.lookup(key)) {
      out.manifest = std::move(*m);
      out.cache = "hit";
    } else {
      auto m2 = compile(req, tc, *archs, *abi, steps, key, out.phases_ms);
      if (!m2) return std::unexpected(m2.error());
      out.manifest = std::move(*m2);
      out.cache = "miss";
    }
    if (auto r = store_.put_request(rkey, key); !r) return std::unexpected(r.error());
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

Result<nlohmann::json> Builder::compile(const KernelRequest& req, const Toolchain& tc,
                                        const std::vector<std::string>& archs, const Abi& parsed,
                                        const std::vector<CompileStep>& steps,
                                        const std::string& key, nlohmann::json& phases) {
  auto staging = store_.make_staging();
  if (!staging) return std::unexpected(staging.error());
  struct Cleanup {  // the staging dir is gone unless publish() renamed it away
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{*staging};

  Abi abi = parsed;
  abi.symbol = kernel_symbol(req.backend, "kernel", key);
  const std::string src_name = "source." + std::string(source_extension(req.backend));
  if (auto r = write_file(*staging / src_name, substitute_kernel_name(req.source, abi.symbol));
      !r) {
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
