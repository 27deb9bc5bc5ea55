// An NVIDIA GPU as a benchmark device (CUDA runtime + cuBLAS, built with the host compiler
// against the toolkit's headers): device memory, a dedicated stream, CUDA events for timing,
// a 256 MiB memset to flush L2, cublasGemmStridedBatchedEx as the vendor baseline.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "core/bench/runner/device.hpp"

namespace kforge::runner {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

cudaDataType cuda_type(core::Dtype d) {
  switch (d) {
    case core::Dtype::kFloat16: return CUDA_R_16F;
    case core::Dtype::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// What NVML (the driver's own library, loaded if present) says that the CUDA runtime does not:
// the driver's release ("580.159.04", where cudaDriverGetVersion says only 13000) and the SM
// and memory clocks now and at most, and whether the SM clock is locked (applications clocks
// or a locked range below the maximum). Empty where NVML is missing: nothing is guessed.
nlohmann::json nvml_facts(const std::string& pci_bus_id) {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return nlohmann::json::object();
  using Init = int (*)();
  using DriverVersion = int (*)(char*, unsigned);
  using ByPci = int (*)(const char*, void**);
  using Clock = int (*)(void*, int, unsigned*);
  auto init = reinterpret_cast<Init>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<Init>(::dlsym(lib, "nvmlShutdown"));
  auto driver = reinterpret_cast<DriverVersion>(::dlsym(lib, "nvmlSystemGetDriverVersion"));
  auto by_pci = reinterpret_cast<ByPci>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto clock = reinterpret_cast<Clock>(::dlsym(lib, "nvmlDeviceGetClockInfo"));
  auto max_clock = reinterpret_cast<Clock>(::dlsym(lib, "nvmlDeviceGetMaxClockInfo"));
  auto app_clock = reinterpret_cast<Clock>(::dlsym(lib, "nvmlDeviceGetApplicationsClock"));
  nlohmann::json out = nlohmann::json::object();
  if (init && shutdown && init() == 0) {
    char version[96] = {};
    if (driver && driver(version, sizeof version) == 0) out["driver_release"] = version;
    void* dev = nullptr;
    if (by_pci && by_pci(pci_bus_id.c_str(), &dev) == 0) {
      constexpr int kSm = 1, kMem = 2;  // NVML_CLOCK_SM, NVML_CLOCK_MEM
      unsigned v = 0, max_sm = 0, app_sm = 0;
      if (clock && clock(dev, kSm, &v) == 0) out["sm_clock_mhz"] = v;
      if (max_clock && max_clock(dev, kSm, &max_sm) == 0) out["sm_clock_max_mhz"] = max_sm;
      if (clock && clock(dev, kMem, &v) == 0) out["memory_clock_mhz"] = v;
      if (max_clock && max_clock(dev, kMem, &v) == 0) out["memory_clock_max_mhz"] = v;
      if (app_clock && app_clock(dev, kSm, &app_sm) == 0 && max_sm) out["sm_clock_locked"] = app_sm < max_sm;
    }
    shutdown();
  }
  ::dlclose(lib);
  return out;
}

class CudaDevice final : public Device {
 public:
  CudaDevice() {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      reason_ = e != cudaSuccess ? std::string("no usable CUDA device: ") + cudaGetErrorString(e) : "no CUDA device";
      return;
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaGetDeviceProperties(&prop_, 0), "cudaGetDeviceProperties");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
    available_ = true;
  }
  nlohmann::json describe() override {
    if (!available_) return {{"available", false}, {"kind", "cuda"}, {"reason", reason_}};
    if (!description_.is_null()) return description_;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    // The SKU, the driver's release and the runtime: what the service's device digest (and so
    // every stored timing) is keyed by. The clocks at this moment are reported, not keyed.
    description_ = {{"available", true}, {"kind", "cuda"}, {"name", prop_.name},
                    {"arch", "sm_" + std::to_string(prop_.major) + std::to_string(prop_.minor)},
                    {"memory_bytes", prop_.totalGlobalMem}, {"sms", prop_.multiProcessorCount},
                    {"l2_bytes", prop_.l2CacheSize}, {"driver", driver}, {"runtime", runtime}};
    char pci[32] = {};
    if (cudaDeviceGetPCIBusId(pci, sizeof pci, 0) == cudaSuccess) {
      const nlohmann::json facts = nvml_facts(pci);
      if (facts.contains("driver_release")) description_["driver_release"] = facts["driver_release"];
      nlohmann::json clocks = facts;
      clocks.erase("driver_release");
      if (!clocks.empty()) description_["clocks"] = clocks;
    }
    return description_;
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void release(void* p) override { cudaFree(p); }
  void upload(void* dst, const void* src, size_t bytes) override { check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "upload"); }
  void download(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "download");
  }
  void* stream() override { return stream_; }
  void sync() override {
    check(cudaStreamSynchronize(stream_), "the kernel failed");
    check(cudaGetLastError(), "the kernel failed");
  }
  void flush_l2() override {
    if (!flush_) flush_ = alloc(flush_bytes_);
    check(cudaMemsetAsync(flush_, ++salt_, flush_bytes_, stream_), "L2 flush");
  }
  double time_ms(const std::function<void()>& fn) override {
    check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    fn();
    check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "the kernel failed");
    check(cudaGetLastError(), "the kernel failed");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms;
  }
  std::optional<std::function<void()>> vendor_gemm(const VendorGemm& g, std::string& why) override {
    if (g.dtype != g.out_dtype) {
      why = "cuBLAS baseline is timed with the output in the input dtype";
      return std::nullopt;
    }
    if (!(g.sCn == 1 || g.N == 1)) {
      why = "C is not row-major";
      return std::nullopt;
    }
    // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS computes (N x M) = op(B) op(A).
    bool tb, ta;
    int64_t ldb, lda;
    if (g.sBn == 1 || g.N == 1) { tb = false; ldb = std::max({g.sBk, g.N, int64_t{1}}); }
    else if (g.sBk == 1 || g.K == 1) { tb = true; ldb = std::max({g.sBn, g.K, int64_t{1}}); }
    else { why = "B has no unit stride"; return std::nullopt; }
    if (g.sAk == 1 || g.K == 1) { ta = false; lda = std::max({g.sAm, g.K, int64_t{1}}); }
    else if (g.sAm == 1 || g.M == 1) { ta = true; lda = std::max({g.sAk, g.M, int64_t{1}}); }
    else { why = "A has no unit stride"; return std::nullopt; }
    const int64_t ldc = std::max({g.sCm, g.N, int64_t{1}});
    if (!handle_) {
      if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) { why = "cublasCreate failed"; return std::nullopt; }
      cublasSetStream(handle_, stream_);
    }
    const cudaDataType t = cuda_type(g.dtype);
    return [this, g, ta, tb, lda, ldb, ldc, t] {
      const float alpha = 1.0f, beta = 0.0f;
      cublasStatus_t s = cublasGemmStridedBatchedEx(handle_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                    int(g.N), int(g.M), int(g.K), &alpha, g.B, t, int(ldb), g.sBb, g.A, t,
                                                    int(lda), g.sAb, &beta, g.C, t, int(ldc), g.sCb, int(g.batch),
                                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmStridedBatchedEx failed: " + std::to_string(int(s)));
    };
  }
  std::string vendor_name() const override { return "cublas"; }

 private:
  bool available_ = false;
  std::string reason_;
  cudaDeviceProp prop_{};
  nlohmann::json description_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_bytes_ = size_t(256) << 20;
  int salt_ = 0;
};

}  // namespace

Device& device() {
  static CudaDevice d;
  return d;
}

}  // namespace kforge::runner
