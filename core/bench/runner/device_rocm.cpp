// An AMD GPU as a benchmark device (HIP runtime, built with the host compiler). No vendor
// baseline: hipBLAS is not part of the toolchain kforge builds against.
#include <hip/hip_runtime_api.h>

#include <stdexcept>
#include <string>

#include "core/bench/runner/device.hpp"

namespace kforge::runner {
namespace {

void check(hipError_t e, const char* what) {
  if (e != hipSuccess) throw std::runtime_error(std::string(what) + ": " + hipGetErrorString(e));
}

class RocmDevice final : public Device {
 public:
  RocmDevice() {
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
    if (!available_) return {{"available", false}, {"kind", "rocm"}, {"reason", reason_}};
    return {{"available", true}, {"kind", "rocm"}, {"name", prop_.name}, {"arch", prop_.gcnArchName},
            {"memory_bytes", prop_.totalGlobalMem}, {"cus", prop_.multiProcessorCount}};
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
  std::optional<std::function<void()>> vendor_gemm(const VendorGemm&, std::string& why) override {
    why = "no vendor baseline on rocm (hipBLAS is not built in)";
    return std::nullopt;
  }
  std::string vendor_name() const override { return "none"; }

 private:
  bool available_ = false;
  std::string reason_;
  hipDeviceProp_t prop_{};
  hipStream_t stream_ = nullptr;
  hipEvent_t start_ = nullptr, stop_ = nullptr;
  void* flush_ = nullptr;
  size_t flush_bytes_ = size_t(256) << 20;
  int salt_ = 0;
};

}  // namespace

Device& device() {
  static RocmDevice d;
  return d;
}

}  // namespace kforge::runner
