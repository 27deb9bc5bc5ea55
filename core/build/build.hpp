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

#include "core/cluster/lease.hpp"
#include "core/build/key.hpp"
#include "core/process/process.hpp"
#include "core/storage/storage.hpp"
#include "core/toolchain/toolchain.hpp"

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
  Builder(const Toolchains& toolchains, storage::Storage& storage, BuildConfig config,
          Spawner spawn = run_process);

  // plan() validates, looks the request up and renders (cheap); build() compiles what the
  // plan did not find (the costly part, which a job queue runs). build(req) does both.
  Result<BuildPlan> plan(const KernelRequest& req);
  Result<BuildResult> build(const BuildPlan& plan);
  Result<BuildResult> build(const KernelRequest& req);
  // A planned miss: why it missed (core/build/why.hpp) into plan.why, its time into phases_ms.
  // Reads up to 64 manifests of the kernel's family, so only callers that show the reason
  // ask for it (POST /kernels), not prefetches or autotune choices.
  void explain(BuildPlan& plan);
  Result<PreparedRequest> prepare(const KernelRequest& req) const;
  Result<RenderedKernel> render(const PreparedRequest& prepared) const;

  // The entry a request key was answered with, when it is still there and compiled (not a
  // cached failure): a hit, counted and its recency refreshed; null otherwise.
  // `local_only`: the shared tier is not asked (an event loop never waits on the network).
  std::shared_ptr<const nlohmann::json> find_answer(const std::string& request_key, bool local_only = false);

  storage::Storage& storage() { return storage_; }
  // In a cluster: builds of one kernel run once across the instances (null: one instance).
  void set_leases(cluster::Leases* leases) { leases_ = leases; }

  uint64_t compiler_runs() const { return compiler_runs_.load(); }
  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }

 private:
  Result<nlohmann::json> compile(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                 nlohmann::json& phases);
  // Publishes the export entry: the kernel's kernel.o with its symbol renamed, relinked.
  Result<nlohmann::json> export_as(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                   const nlohmann::json& base, nlohmann::json& phases);
  // Compiles `kernel` unless another instance holding its lease builds it first (then
  // `joined` is set and its manifest returned).
  Result<nlohmann::json> compile_once(const PreparedRequest& prepared, const RenderedKernel& kernel,
                                      nlohmann::json& phases, bool& joined);
  // Runs one step in `dir` under the sandbox; appends to `log` and `steps`.
  Result<ProcessResult> run_step(const PreparedRequest& prepared, const std::vector<std::string>& argv,
                                 const std::filesystem::path& dir, std::string& log, nlohmann::json& steps);

  const Toolchains& toolchains_;
  storage::Storage& storage_;
  BuildConfig config_;
  Spawner spawn_;
  cluster::Leases* leases_ = nullptr;
  std::atomic<uint64_t> compiler_runs_{0};
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};
};

}  // namespace kforge::core
