// Turns a validated KernelRequest into a published cache entry: resolve archs, look up
// the request key, parse the ABI, derive the kernel key (DESIGN §5), look it up, and on a
// miss compile in a staging directory and publish atomically.
// Returns the manifest with how it was served ("hit" or "miss"), or an Error: kBadRequest
// (bad arch, bad signature), kCompileFailed (with "key", "argv", "log" in extra; the
// failure is cached as a negative entry for negative_ttl), kTimeout (not cached: it may be
// load; nor is a compiler killed by SIGKILL), kInternal. Thread-safe: concurrent identical
// builds both compile and the first publish wins (the job queue makes them single-flight).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/abi.hpp"
#include "core/process.hpp"
#include "core/remote_tier.hpp"
#include "core/request.hpp"
#include "core/store.hpp"
#include "core/templates/template.hpp"
#include "core/toolchain.hpp"

namespace kforge::core {

struct BuildConfig {
  std::chrono::milliseconds compile_timeout{std::chrono::minutes(5)};
  size_t output_cap = 4 << 20;
  std::chrono::seconds negative_ttl{600};
  std::string instance;  // recorded in each manifest as "built_by"
  // Shared tier: how long a build lease lives unless renewed (a dead builder's lease
  // expires after it, and a waiter takes the build over).
  std::chrono::milliseconds lease_ttl{std::chrono::seconds(30)};
};

struct BuildResult {
  nlohmann::json manifest;
  // "hit", "miss", "renamed" (compiled before under another name: linked now), or "joined"
  // (another instance of the cluster built it while this one waited on its lease)
  std::string cache;
  nlohmann::json phases_ms = nlohmann::json::object();  // time spent in each phase
  // A hit: the store's verified manifest itself, the same object until the entry changes
  // (what an answer cache keys on).
  std::shared_ptr<const nlohmann::json> verified;
};

// The key derivation, exposed for tests and for `kforge render`.
struct KeyInputs {
  Backend backend;
  std::vector<std::string> archs;
  const Toolchain* toolchain;
  std::vector<CompileStep> steps;
  std::string source;  // with KERNEL_NAME
  std::vector<IncludeDir> includes;  // hashed as their libraries' identities, not host paths
};
std::string kernel_key(const KeyInputs& in);
// The source as the key hashes it: without leading and trailing whitespace (editors and
// generators disagree on the final newline; the compiler does not care).
std::string_view key_source_text(std::string_view source);
// The key of a kernel exported under `name`: the kernel `key` relinked (DESIGN: export entries).
std::string export_key(const std::string& key, const std::string& name);
std::string kernel_symbol(Backend backend, std::string_view family, const std::string& key);

// A request after validation: archs resolved, template parameters complete, request key.
struct PreparedRequest {
  KernelRequest req;
  const Toolchain* toolchain = nullptr;
  std::vector<std::string> archs;
  std::string request_key;
  CpuIsa cpu;  // cpu: what archs[0] offers (the template's machine model)
  std::vector<IncludeDir> includes;  // options.includes, resolved against the libraries

  // What the template sees: the resolved archs, the spec, the cpu machine model.
  templates::TemplateRequest template_request() const { return {req.backend, archs, *req.tmpl, cpu}; }
  // Where the request asks for a benchmark: a kBadRequest naming /arch when a kernel for
  // this target cannot run on this host (a cpu target with features the host lacks).
  Result<void> check_runnable() const;
};

// The source to compile and everything derived from it.
struct RenderedKernel {
  std::string source;  // with KERNEL_NAME
  Abi abi;             // symbol already named from the key
  std::string family;
  std::vector<CompileStep> steps;
  std::string key;
  // With the request's export_name: the entry that exports it (kernel.o renamed, relinked).
  std::string export_name;
  std::string export_key;
  // The entry the request is answered with: the export entry, or the kernel itself.
  const std::string& answer_key() const { return export_key.empty() ? key : export_key; }
  const std::string& answer_name() const { return export_name.empty() ? abi.symbol : export_name; }
};

// What plan() found: a cached answer, or the rendered kernel that build() compiles.
struct BuildPlan {
  PreparedRequest prepared;
  std::optional<RenderedKernel> kernel;  // absent when the request key answered
  std::optional<BuildResult> hit;
  nlohmann::json phases_ms = nlohmann::json::object();
  // A miss that Builder::explain() looked at: {"nearest", "miss_reason"}; else null.
  nlohmann::json why;
  const std::string& key() const {
    return hit ? hit->manifest["key"].get_ref<const std::string&>() : kernel->answer_key();
  }
  std::string kernel_name() const {
    return hit ? hit->manifest.value("kernel_name", "") : kernel->answer_name();
  }
};

class Builder {
 public:
  Builder(const Toolchains& toolchains, DiskStore& store, BuildConfig config,
          Spawner spawn = run_process);

  // plan() validates, looks the request up and renders (cheap); build() compiles what the
  // plan did not find (the costly part, which a job queue runs). build(req) does both.
  Result<BuildPlan> plan(const KernelRequest& req);
  Result<BuildResult> build(const BuildPlan& plan);
  Result<BuildResult> build(const KernelRequest& req);
  // A planned miss: why it missed (core/why.hpp) into plan.why, its time into phases_ms.
  // Reads up to 64 manifests of the kernel's family, so only callers that show the reason
  // ask for it (POST /kernels), not prefetches or autotune choices.
  void explain(BuildPlan& plan);
  Result<PreparedRequest> prepare(const KernelRequest& req) const;
  Result<RenderedKernel> render(const PreparedRequest& prepared) const;

  // The verified entry `key` from the local tier, else from the shared tier (copied into
  // the local one first); null when neither has it.
  // `polling`: asked again while another instance builds it (not counted as a miss).
  std::shared_ptr<const nlohmann::json> find(const std::string& key, bool polling = false);
  // The entry a request key was answered with, when it is still there and compiled (not a
  // cached failure): a hit, counted and its recency refreshed; null otherwise.
  // `local_only`: the shared tier is not asked (an event loop never waits on the network).
  std::shared_ptr<const nlohmann::json> find_answer(const std::string& request_key, bool local_only = false);

  // The shared tier (Redis), asked on a local miss and given every publish; null: none.
  void set_remote(RedisTier* remote) { remote_ = remote; }
  RedisTier* remote() const { return remote_; }

  uint64_t compiler_runs() const { return compiler_runs_.load(); }
  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }

 private:
  Result<nlohmann::json> compile(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                 nlohmann::json& phases);
  // Publishes the export entry: the kernel's kernel.o with its symbol renamed, relinked.
  Result<nlohmann::json> export_as(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                   const nlohmann::json& base, nlohmann::json& phases);
  std::optional<std::string> find_request(const std::string& rkey);
  Result<void> remember_request(const std::string& rkey, const std::string& key);
  // A published entry goes to the shared tier too.
  Result<nlohmann::json> shared(Result<nlohmann::json> published);
  // Compiles `kernel` unless another instance holding its lease builds it first (then
  // `joined` is set and its manifest returned).
  Result<nlohmann::json> compile_once(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                      nlohmann::json& phases, bool& joined);
  // Runs one step in `dir` under the sandbox; appends to `log` and `steps`.
  Result<ProcessResult> run_step(const PreparedRequest& prepared, const std::vector<std::string>& argv,
                                 const std::filesystem::path& dir, std::string& log, nlohmann::json& steps);

  const Toolchains& toolchains_;
  DiskStore& store_;
  BuildConfig config_;
  Spawner spawn_;
  RedisTier* remote_ = nullptr;
  std::atomic<uint64_t> compiler_runs_{0};
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
};

}  // namespace kforge::core
