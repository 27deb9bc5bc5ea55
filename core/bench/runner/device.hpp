// What a runner needs from a device: memory, copies, a stream, a timer, an L2 flush, and
// the vendor library's GEMM for the baseline. One implementation per device kind
// (device_cpu.cpp, device_cuda.cpp, device_rocm.cpp), linked into its own runner program
// so that the service never loads a GPU runtime itself.
// Methods throw std::runtime_error on a device error; the runner turns that into a failed
// result (the kernel, not the runner, is usually at fault).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/base/dtype.hpp"

namespace kforge::runner {

// A GEMM the vendor library computes: row-major-or-transposed operands described by strides.
struct VendorGemm {
  int64_t M = 0, N = 0, K = 0, batch = 1;
  core::Dtype dtype = core::Dtype::kFloat32, out_dtype = core::Dtype::kFloat32;
  int64_t sAb = 0, sAm = 0, sAk = 0, sBb = 0, sBk = 0, sBn = 0, sCb = 0, sCm = 0, sCn = 0;
  const void* A = nullptr;
  const void* B = nullptr;
  void* C = nullptr;
  // The epilogue to fuse, where the library can: "bias", "gelu", "bias_gelu", "relu" or
  // "bias_relu" ("" for none); the bias is a vector of N elements in the output's dtype.
  std::string epilogue;
  const void* bias = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  // {"available": bool, "name": ..., "reason": ...} plus device facts.
  virtual nlohmann::json describe() = 0;
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void* stream() = 0;  // what the kernel's stream argument receives
  // Waits for the device and reports an asynchronous error (a faulting kernel).
  virtual void sync() = 0;
  virtual void flush_l2() = 0;
  // Milliseconds that `fn` took on the device (events on GPUs).
  virtual double time_ms(const std::function<void()>& fn) = 0;
  // Whether a kernel and the vendor's call are timed interleaved, round by round (and the
  // vendor with every kernel): on a GPU each call has the device to itself, so interleaving
  // only shares the clocks between them. Otherwise the vendor is timed after the last kernel.
  virtual bool interleaves() const { return true; }
  // A callable that runs the vendor GEMM, or nullopt with the reason in `why`.
  virtual std::optional<std::function<void()>> vendor_gemm(const VendorGemm& g, std::string& why) = 0;
  virtual std::string vendor_name() const = 0;
  // The vendor GEMM with g.epilogue fused into it, and in `fused` what the library computes
  // (its name for the call and epilogue), or nullopt with the reason in `why`.
  virtual std::optional<std::function<void()>> vendor_fused_gemm(const VendorGemm&, std::string& /*fused*/, std::string& why) {
    why = vendor_name() + " fuses no epilogue here";
    return std::nullopt;
  }
};

// The device of this runner program (defined in device_<kind>.cpp).
Device& device();

// Device memory released when it goes out of scope (every early return included).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(Device& dev, size_t bytes) : dev_(&dev), p_(bytes ? dev.alloc(bytes) : nullptr) {}
  DeviceMemory(DeviceMemory&& o) noexcept : dev_(o.dev_), p_(std::exchange(o.p_, nullptr)) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      reset();
      dev_ = o.dev_;
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { reset(); }
  void* get() const { return p_; }

 private:
  void reset() {
    if (p_) dev_->release(p_);
    p_ = nullptr;
  }
  Device* dev_ = nullptr;
  void* p_ = nullptr;
};

}  // namespace kforge::runner
