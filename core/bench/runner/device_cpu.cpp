// The host CPU as a benchmark device; OpenBLAS's cblas_sgemm is the vendor baseline.
#include <cblas.h>
#include <omp.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/bench/runner/device.hpp"

namespace kforge::runner {
namespace {

// (transpose?, leading dimension) of a rows x cols operand for a row-major BLAS call, or
// nullopt when neither dimension is contiguous.
std::optional<std::pair<bool, int64_t>> blas_layout(int64_t s_row, int64_t s_col, int64_t rows, int64_t cols) {
  if (s_col == 1 || cols == 1) return std::pair{false, std::max({s_row, cols, int64_t{1}})};
  if (s_row == 1 || rows == 1) return std::pair{true, std::max({s_col, rows, int64_t{1}})};
  return std::nullopt;
}

class CpuDevice final : public Device {
 public:
  nlohmann::json describe() override {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "unknown CPU";
    while (std::getline(in, line)) {
      if (line.starts_with("model name")) {
        model = line.substr(line.find(':') + 2);
        break;
      }
    }
    return {{"available", true}, {"kind", "cpu"}, {"name", model}, {"threads", omp_get_max_threads()}};
  }
  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::runtime_error("out of host memory");
    return p;
  }
  void release(void* p) override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void* stream() override { return nullptr; }
  // Not interleaved: OpenBLAS's threads keep spinning for a while after its call returns and
  // take the cores from the kernel timed next (with 2 cores, a 256^3 kernel interleaved with
  // it had a p90 of 13 ms against 0.2), so the vendor is timed once, after the last kernel.
  bool interleaves() const override { return false; }
  void sync() override {}
  void flush_l2() override {
    // Twice the last-level cache (8 to 64 MiB): writing it evicts every line of the operands.
    if (flush_.empty()) {
      long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
      size_t bytes = std::clamp<size_t>(l3 > 0 ? size_t(l3) * 2 : size_t(32) << 20, size_t(8) << 20, size_t(64) << 20);
      flush_.resize(bytes);
    }
    ++salt_;
    for (size_t i = 0; i < flush_.size(); i += 64) flush_[i] = salt_;
  }
  double time_ms(const std::function<void()>& fn) override {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::optional<std::function<void()>> vendor_gemm(const VendorGemm& g, std::string& why) override {
    if (g.dtype != core::Dtype::kFloat32 || g.out_dtype != core::Dtype::kFloat32) {
      why = "OpenBLAS is the cpu baseline for float32 only (it has no float16 GEMM, and sbgemm writes float32)";
      return std::nullopt;
    }
    auto a = blas_layout(g.sAm, g.sAk, g.M, g.K);
    auto b = blas_layout(g.sBk, g.sBn, g.K, g.N);
    auto c = blas_layout(g.sCm, g.sCn, g.M, g.N);
    if (!a || !b || !c || c->first) {
      why = "an operand has no unit stride (or C is column-major), which BLAS cannot take";
      return std::nullopt;
    }
    return [g, a = *a, b = *b, c = *c] {
      for (int64_t i = 0; i < g.batch; ++i) {
        cblas_sgemm(CblasRowMajor, a.first ? CblasTrans : CblasNoTrans, b.first ? CblasTrans : CblasNoTrans, int(g.M),
                    int(g.N), int(g.K), 1.0f, static_cast<const float*>(g.A) + i * g.sAb, int(a.second),
                    static_cast<const float*>(g.B) + i * g.sBb, int(b.second), 0.0f, static_cast<float*>(g.C) + i * g.sCb,
                    int(c.second));
      }
    };
  }
  std::string vendor_name() const override {
    return std::string(openblas_get_config()) + " (" + openblas_get_corename() + " kernels, " +
           std::to_string(openblas_get_num_threads()) + " threads)";
  }

 private:
  std::vector<char> flush_;
  char salt_ = 0;
};

}  // namespace

Device& device() {
  static CpuDevice d;
  return d;
}

}  // namespace kforge::runner
