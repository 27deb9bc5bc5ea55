// An NVIDIA GPU as a benchmark device (CUDA runtime + cuBLAS, built with the host compiler
// against the toolkit's headers): device memory, a dedicated stream, CUDA events for timing,
// a 256 MiB memset to flush L2, cublasGemmStridedBatchedEx as the vendor baseline, and
// cuBLASLt's matmul where the request's epilogue is one cuBLASLt fuses.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/bench/runner/blas_call.hpp"
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

// A cuBLASLt call's descriptors, alive as long as the call that uses them.
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t algo{};
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (auto* l : {a, b, c})
      if (l) cublasLtMatrixLayoutDestroy(l);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

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
    const auto call = column_major_call(g, "cuBLAS", why);
    if (!call) return std::nullopt;
    if (!handle_) {
      if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) { why = "cublasCreate failed"; return std::nullopt; }
      cublasSetStream(handle_, stream_);
    }
    const cudaDataType t = cuda_type(g.dtype);
    return [this, c = *call, t] {
      const float alpha = 1.0f, beta = 0.0f;
      cublasStatus_t s = cublasGemmStridedBatchedEx(handle_, c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                    int(c.m), int(c.n), int(c.k), &alpha, c.a, t, int(c.lda), c.stride_a, c.b, t,
                                                    int(c.ldb), c.stride_b, &beta, c.c, t, int(c.ldc), c.stride_c, int(c.batch),
                                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmStridedBatchedEx failed: " + std::to_string(int(s)));
    };
  }
  // cuBLASLt's matmul with its epilogue (bias, then gelu or relu; its gelu is the tanh form),
  // the algorithm its heuristic ranks first with a 32 MiB workspace.
  std::optional<std::function<void()>> vendor_fused_gemm(const VendorGemm& g, std::string& fused, std::string& why) override {
    static const std::map<std::string, cublasLtEpilogue_t> kEpilogues = {
        {"bias", CUBLASLT_EPILOGUE_BIAS}, {"gelu", CUBLASLT_EPILOGUE_GELU}, {"bias_gelu", CUBLASLT_EPILOGUE_GELU_BIAS},
        {"relu", CUBLASLT_EPILOGUE_RELU}, {"bias_relu", CUBLASLT_EPILOGUE_RELU_BIAS}};
    const auto epilogue = kEpilogues.find(g.epilogue);
    if (epilogue == kEpilogues.end()) { why = "cuBLASLt has no epilogue " + g.epilogue; return std::nullopt; }
    const auto call = column_major_call(g, "cuBLAS", why);
    if (!call) return std::nullopt;
    if (!lt_) {
      if (cublasLtCreate(&lt_) != CUBLAS_STATUS_SUCCESS) { why = "cublasLtCreate failed"; return std::nullopt; }
      lt_workspace_ = alloc(kLtWorkspace);
    }
    auto plan = std::make_shared<LtPlan>();
    const cudaDataType t = cuda_type(g.dtype);
    const cublasOperation_t op_a = call->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = call->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    // Column-major (N x M) = op(B^T) op(A^T), as in vendor_gemm: cuBLAS's A is our B.
    auto layout = [&](cublasLtMatrixLayout_t* l, bool trans, int64_t rows, int64_t cols, int64_t ld, int64_t batch_stride) {
      if (trans) std::swap(rows, cols);
      const int32_t count = int32_t(g.batch);
      return cublasLtMatrixLayoutCreate(l, t, uint64_t(rows), uint64_t(cols), ld) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count) == CUBLAS_STATUS_SUCCESS &&
             cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof batch_stride) ==
                 CUBLAS_STATUS_SUCCESS;
    };
    const int32_t bias_type = t;
    const bool made = cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a) == CUBLAS_STATUS_SUCCESS &&
                      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b) == CUBLAS_STATUS_SUCCESS &&
                      cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue->second,
                                                     sizeof epilogue->second) == CUBLAS_STATUS_SUCCESS &&
                      (!g.bias || (cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                                                  sizeof g.bias) == CUBLAS_STATUS_SUCCESS &&
                                   cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                                  sizeof bias_type) == CUBLAS_STATUS_SUCCESS)) &&
                      layout(&plan->a, call->trans_a, call->m, call->k, call->lda, call->stride_a) &&
                      layout(&plan->b, call->trans_b, call->k, call->n, call->ldb, call->stride_b) &&
                      layout(&plan->c, false, call->m, call->n, call->ldc, call->stride_c) &&
                      cublasLtMatmulPreferenceCreate(&plan->pref) == CUBLAS_STATUS_SUCCESS &&
                      cublasLtMatmulPreferenceSetAttribute(plan->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kLtWorkspace,
                                                           sizeof kLtWorkspace) == CUBLAS_STATUS_SUCCESS;
    if (!made) { why = "cuBLASLt refused the descriptors of this problem"; return std::nullopt; }
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt_, plan->op, plan->a, plan->b, plan->c, plan->c, plan->pref, 1, &plan->algo, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0) {
      why = "cuBLASLt has no algorithm for this problem with the " + g.epilogue + " epilogue";
      return std::nullopt;
    }
    fused = "cublasLt+" + g.epilogue + (g.epilogue.find("gelu") != std::string::npos ? " (tanh gelu)" : "");
    return [this, c = *call, plan] {
      const float alpha = 1.0f, beta = 0.0f;
      cublasStatus_t s = cublasLtMatmul(lt_, plan->op, &alpha, c.a, plan->a, c.b, plan->b, &beta, c.c, plan->c, c.c, plan->c,
                                        &plan->algo.algo, lt_workspace_, kLtWorkspace, stream_);
      if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasLtMatmul failed: " + std::to_string(int(s)));
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
  static constexpr size_t kLtWorkspace = size_t(32) << 20;
  cublasLtHandle_t lt_ = nullptr;
  void* lt_workspace_ = nullptr;
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
