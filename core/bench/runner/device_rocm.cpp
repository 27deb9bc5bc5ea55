// An AMD GPU as a benchmark device (HIP runtime, built with the host compiler): device memory,
// a dedicated stream, HIP events for timing, a 256 MiB memset to flush L2, and, where the
// runner is built with rocBLAS (KFORGE_ROCBLAS: docker/Dockerfile.rocm), rocBLAS's
// rocblas_gemm_strided_batched_ex as the vendor baseline, as cuBLAS is on CUDA.
// rocBLAS aborts the process when it has no kernels for the device (its Tensile library holds
// one set per gfx target, and a distribution builds a few), so the runner looks for the
// device's set first and reports the baseline unavailable, naming the targets it has.
#include <hip/hip_runtime_api.h>

#include <stdexcept>
#include <string>

#include "core/bench/runner/device.hpp"

#if KFORGE_ROCBLAS
#include <dlfcn.h>
#include <rocblas/rocblas.h>

#include <cstdlib>
#include <filesystem>

#include "core/bench/runner/blas_call.hpp"
#include "core/bench/runner/rocblas_kernels.hpp"
#endif

namespace kforge::runner {
namespace {

void check(hipError_t e, const char* what) {
  if (e != hipSuccess) throw std::runtime_error(std::string(what) + ": " + hipGetErrorString(e));
}

#if KFORGE_ROCBLAS
rocblas_datatype rocblas_type(core::Dtype d) {
  switch (d) {
    case core::Dtype::kFloat16: return rocblas_datatype_f16_r;
    case core::Dtype::kBFloat16: return rocblas_datatype_bf16_r;
    default: return rocblas_datatype_f32_r;
  }
}

// The rocBLAS this runner loaded: its version and the directory of its Tensile library (beside
// librocblas.so, or ROCBLAS_TENSILE_LIBPATH as rocBLAS itself reads it).
struct RocblasLibrary {
  std::string version;
  std::filesystem::path kernels_dir;
};

RocblasLibrary loaded_rocblas() {
  RocblasLibrary lib;
  char buf[128] = {};
  if (rocblas_get_version_string(buf, sizeof buf) == rocblas_status_success) lib.version = buf;
  while (!lib.version.empty() && lib.version.back() == '.') lib.version.pop_back();  // "2.47.0." without a commit
  Dl_info info{};
  std::filesystem::path so;
  if (::dladdr(reinterpret_cast<void*>(&rocblas_get_version_string), &info) && info.dli_fname) so = info.dli_fname;
  lib.kernels_dir = rocblas_kernels_dir(so, lib.version, std::getenv("ROCBLAS_TENSILE_LIBPATH"));
  return lib;
}
#endif

class RocmDevice final : public Device {
 public:
  RocmDevice() {
#if KFORGE_ROCBLAS
    rocblas_ = loaded_rocblas();
    kernel_archs_ = rocblas_kernel_archs(rocblas_.kernels_dir);
#endif
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess || n == 0) {
      reason_ = e != hipSuccess ? std::string("no usable AMD GPU: ") + hipGetErrorString(e) : "no AMD GPU";
      return;
    }
    check(hipSetDevice(0), "hipSetDevice");
    check(hipGetDeviceProperties(&prop_, 0), "hipGetDeviceProperties");
    check(hipStreamCreate(&stream_), "hipStreamCreate");
    check(hipEventCreate(&start_), "hipEventCreate");
    check(hipEventCreate(&stop_), "hipEventCreate");
    available_ = true;
  }
  nlohmann::json describe() override {
    nlohmann::json d = available_ ? nlohmann::json{{"available", true}, {"kind", "rocm"}, {"name", prop_.name},
                                                   {"arch", prop_.gcnArchName}, {"memory_bytes", prop_.totalGlobalMem},
                                                   {"cus", prop_.multiProcessorCount}}
                                  : nlohmann::json{{"available", false}, {"kind", "rocm"}, {"reason", reason_}};
    // The vendor library and the targets it has kernels for, known without a GPU (and a part of
    // the device's identity: another rocBLAS is another baseline).
#if KFORGE_ROCBLAS
    d["vendor"] = {{"name", "rocblas"}, {"version", rocblas_.version}, {"kernels_dir", rocblas_.kernels_dir.string()},
                   {"kernels_for", kernel_archs_}};
#else
    d["vendor"] = {{"name", "none"}, {"reason", "kforge-runner-rocm was built without rocBLAS"}};
#endif
    return d;
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    check(hipMalloc(&p, bytes), "hipMalloc");
    return p;
  }
  void release(void* p) override { (void)hipFree(p); }
  void upload(void* dst, const void* src, size_t bytes) override { check(hipMemcpy(dst, src, bytes, hipMemcpyHostToDevice), "upload"); }
  void download(void* dst, const void* src, size_t bytes) override { check(hipMemcpy(dst, src, bytes, hipMemcpyDeviceToHost), "download"); }
  void* stream() override { return stream_; }
  void sync() override {
    check(hipStreamSynchronize(stream_), "the kernel failed");
    check(hipGetLastError(), "the kernel failed");
  }
  void flush_l2() override {
    if (!flush_) flush_ = alloc(flush_bytes_);
    check(hipMemsetAsync(flush_, ++salt_, flush_bytes_, stream_), "L2 flush");
  }
  double time_ms(const std::function<void()>& fn) override {
    check(hipEventRecord(start_, stream_), "hipEventRecord");
    fn();
    check(hipEventRecord(stop_, stream_), "hipEventRecord");
    check(hipEventSynchronize(stop_), "the kernel failed");
    float ms = 0;
    check(hipEventElapsedTime(&ms, start_, stop_), "hipEventElapsedTime");
    return ms;
  }
#if KFORGE_ROCBLAS
  std::optional<std::function<void()>> vendor_gemm(const VendorGemm& g, std::string& why) override {
    const auto call = column_major_call(g, "rocBLAS", why);
    if (!call) return std::nullopt;
    // gcnArchName is a target ID ("gfx942:sramecc+:xnack-"); the kernels are per processor.
    const std::string arch = std::string(prop_.gcnArchName).substr(0, std::string(prop_.gcnArchName).find(':'));
    if (const std::string missing = rocblas_lacks(kernel_archs_, arch, rocblas_.version, rocblas_.kernels_dir); !missing.empty()) {
      why = missing;
      return std::nullopt;
    }
    if (!handle_) {
      if (rocblas_create_handle(&handle_) != rocblas_status_success) {
        handle_ = nullptr;
        why = "rocblas_create_handle failed";
        return std::nullopt;
      }
      rocblas_set_stream(handle_, stream_);
    }
    const rocblas_datatype t = rocblas_type(g.dtype);
    return [this, c = *call, t] {
      const float alpha = 1.0f, beta = 0.0f;
      // C is both the input scaled by beta (0) and the output D.
      rocblas_status s = rocblas_gemm_strided_batched_ex(
          handle_, c.trans_a ? rocblas_operation_transpose : rocblas_operation_none,
          c.trans_b ? rocblas_operation_transpose : rocblas_operation_none, rocblas_int(c.m), rocblas_int(c.n),
          rocblas_int(c.k), &alpha, c.a, t, rocblas_int(c.lda), c.stride_a, c.b, t, rocblas_int(c.ldb), c.stride_b, &beta,
          c.c, t, rocblas_int(c.ldc), c.stride_c, c.c, t, rocblas_int(c.ldc), c.stride_c, rocblas_int(c.batch),
          rocblas_datatype_f32_r, rocblas_gemm_algo_standard, 0, 0);
      if (s != rocblas_status_success)
        throw std::runtime_error(std::string("rocblas_gemm_strided_batched_ex failed: ") + rocblas_status_to_string(s));
    };
  }
  std::string vendor_name() const override { return "rocblas"; }
#else
  std::optional<std::function<void()>> vendor_gemm(const VendorGemm&, std::string& why) override {
    why = "no vendor baseline: kforge-runner-rocm was built without rocBLAS (docker/Dockerfile.rocm has it)";
    return std::nullopt;
  }
  std::string vendor_name() const override { return "none"; }
#endif

 private:
  bool available_ = false;
  std::string reason_;
  hipDeviceProp_t prop_{};
  hipStream_t stream_ = nullptr;
  hipEvent_t start_ = nullptr, stop_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_bytes_ = size_t(256) << 20;
  int salt_ = 0;
#if KFORGE_ROCBLAS
  RocblasLibrary rocblas_;
  std::vector<std::string> kernel_archs_;
  rocblas_handle handle_ = nullptr;
#endif
};

}  // namespace

Device& device() {
  static RocmDevice d;
  return d;
}

}  // namespace kforge::runner
