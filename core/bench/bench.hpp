// Benchmarks published kernels on this host's devices (DESIGN §7). Each device kind has a
// runner program (kforge-runner-<backend>, found in the runner directory); a benchmark
// starts it as a child with a timeout, hands it the artifact, ABI and tensors as JSON, and
// reads the result. A kernel that crashes, hangs or returns non-zero gives a failed result
// with the reason; the service is never at risk. One benchmark runs at a time per device,
// so timings do not disturb each other. Successful results are stored in the kernel's cache
// entry under bench/<device-digest>.json (bench/<device-digest>-<workload>.json where the
// tensors are the caller's: source mode, and template kernels that take M at run time) and
// reused unless `force` is asked.
// Where the host has no device for a backend, the result is {"status": "unavailable"}.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/backend.hpp"
#include "core/toolchain/cpu_target.hpp"
#include "core/process/process.hpp"
#include "core/storage/disk_tier.hpp"

namespace kforge::core {

struct BenchOptions {
  bool verify = false;
  bool vendor = false;
  bool force = false;
  double budget_ms = 100;
  nlohmann::json inputs;      // source mode: TensorMeta bound to the const tensor args in order
  nlohmann::json output;      // source mode: TensorMeta bound to the written tensor arg
  nlohmann::json extra_args;  // source mode: values of the scalar args in order
  // Template mode: the request's template (name, tensors, params). A kernel that takes M at
  // run time serves requests of every M, and its manifest keeps only the first one's; this
  // says which M to run (default: the manifest's).
  nlohmann::json problem;
  std::string reference_outputs;  // where the runner may save/reuse the reference's outputs
  std::string saved_inputs;       // ... and the seeded inputs (checked against seed and tensors)
  std::vector<std::string> runner_env;  // this run's NAME=value entries (see vendor_env)
  static BenchOptions from_json(const nlohmann::json& j);  // j was validated by the request parser
};

// The runner environment that pins the cpu vendor baseline to a kernel's target ISA, so a
// kernel built for x86-64-v3 is compared with OpenBLAS's Haswell kernels, not with its
// AVX-512 ones (OpenBLAS picks its kernels from CPUID otherwise, and falls back to SSE3 on
// CPUs it does not know, which is common in VMs).
std::vector<std::string> vendor_env(const CpuIsa& isa);

class Bencher {
 public:
  // `runner_env`: extra NAME=value entries for every runner; they win over a run's own.
  Bencher(std::filesystem::path runner_dir, storage::DiskTier& store, std::chrono::milliseconds timeout,
          std::vector<std::string> runner_env = {}, Spawner spawn = run_process);

  // Per backend: the runner's probe ({"available", "name", ...} or the reason it is not).
  nlohmann::json devices() const { return devices_; }
  // What a timing is keyed by: the device's description without the clocks it ran at when
  // probed (reported, never keyed: they move with load).
  nlohmann::json device_identity(const std::string& backend) const {
    nlohmann::json d = devices_.value(backend, nlohmann::json::object());
    d.erase("clocks");
    return d;
  }
  bool available(Backend b) const;

  // Benchmarks the kernel of `manifest`. `reference` (a manifest) enables verification.
  nlohmann::json run(const nlohmann::json& manifest, const BenchOptions& options,
                     const std::optional<nlohmann::json>& reference = std::nullopt) {
    return run_all({manifest}, options, reference).front();
  }
  // Benchmarks the kernels of `manifests` (an autotune's choices) with the same options: one
  // result each, in order, as run() gives it; `options.vendor` asks the vendor's timing: on a
  // GPU with each kernel, interleaved with the kernel's own round by round (so each ratio is
  // measured in one go, under the same clocks); on the CPU once, after a runner's last kernel. Template kernels that run on the
  // same tensors share one runner process: one device start, one upload of the inputs and
  // one reference computation for all (about 0.35 s a choice on an H100). The runner stops
  // after a kernel that failed and a crash ends it; either way the kernels after it get
  // another runner. A source-mode kernel always runs alone: its code could forge the
  // results of the kernels beside it.
  std::vector<nlohmann::json> run_all(const std::vector<nlohmann::json>& manifests, const BenchOptions& options,
                                      const std::optional<nlohmann::json>& reference = std::nullopt);

  uint64_t runs() const { return runs_.load(); }

 private:
  // The runner's answers to `request`, one per kernel it ran, in order; at least one: where
  // the runner crashed, hung or answered wrongly, the failure of the kernel it was running.
  std::vector<nlohmann::json> run_runner(Backend b, const nlohmann::json& request,
                                         const std::vector<std::string>& env = {});

  std::filesystem::path runner_dir_;
  storage::DiskTier& store_;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> runner_env_;
  Spawner spawn_;
  nlohmann::json devices_ = nlohmann::json::object();
  std::array<std::mutex, 3> device_locks_;
  std::atomic<uint64_t> runs_{0};
};

// The directory of the running executable (where the runner programs are installed).
std::filesystem::path executable_dir();

}  // namespace kforge::core
