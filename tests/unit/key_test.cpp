// core/build/key: the keys of a fixed set of source-mode requests, pinned. A kernel key and a
// request key are a function of what the request asks and of the toolchain (fixed here,
// not discovered, so the pins hold on any host): a change that moves one of them makes
// every cache in the field a cold one, and must be made on purpose (then the pins change
// with it, and the commit says why). Template requests are keyed through their rendering
// and the renderers' digest (KFORGE_RENDERER_DIGEST), which changes with the renderers'
// sources by design; they are not pinned here.
#include <gtest/gtest.h>

#include "core/build/build.hpp"
#include "core/base/hash.hpp"
#include "core/storage/storage.hpp"
#include "unit/scratch.hpp"

namespace kforge::core {
namespace {

using nlohmann::json;

Toolchain fixed_toolchain(Backend b, std::string compiler, std::string version, std::vector<std::string> archs) {
  Toolchain t;
  t.backend = b;
  t.available = true;
  t.compiler = std::move(compiler);
  t.version_text = std::move(version);
  t.identity = sha256_hex(t.compiler.string() + "\n" + t.version_text);
  t.archs = std::move(archs);
  return t;
}

constexpr const char* kCpuSource = R"(#include <cstddef>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, void* stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  for (int64_t i = 0; i < n; ++i) y[i] = 2 * x[i];
  return 0;
}
)";

constexpr const char* kCudaSource = R"(#include <cuda_runtime.h>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
__global__ void twice(const float* x, float* y, int64_t n) { int64_t i = blockIdx.x * 256 + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  twice<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)";

constexpr const char* kRocmSource = R"(#include <hip/hip_runtime.h>
#include <cstdint>
#define PT_EXPORT __attribute__((visibility("default")))
__global__ void twice(const float* x, float* y, int64_t n) { int64_t i = blockIdx.x * 256 + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }
extern "C" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, uint8_t* workspace, hipStream_t stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  hipLaunchKernelGGL(twice, dim3((n + 255) / 256), dim3(256), 0, stream, x, y, n);
  return hipGetLastError() == hipSuccess ? 0 : 1;
}
)";

struct Pinned {
  const char* name;
  json request;
  const char* request_key;
  const char* kernel_key;  // the answer's key (the export entry's with export_name)
};

TEST(Key, SourceModeKeysArePinned) {
  testing::Scratch s;
  Toolchains toolchains({fixed_toolchain(Backend::kCpu, "/usr/bin/x86_64-linux-gnu-g++-12",
                                         "g++ (Debian 12.2.0-14+deb12u1) 12.2.0", {"x86-64", "x86-64-v3", "x86-64-v4"}),
                         fixed_toolchain(Backend::kCuda, "/usr/local/cuda-13.0/bin/nvcc",
                                         "Cuda compilation tools, release 13.0, V13.0.88", {"sm_80", "sm_90", "sm_90a"}),
                         fixed_toolchain(Backend::kRocm, "/usr/bin/hipcc", "HIP version: 5.2.21153-0",
                                         {"gfx90a", "gfx942"})});
  toolchains.set_objcopy("/usr/bin/objcopy");
  storage::DiskTier disk(s.path());
  storage::Storage storage(disk);
  Builder builder(toolchains, storage, {});
  const std::string exported = std::string(kCpuSource).replace(std::string(kCpuSource).find("KERNEL_NAME"), 11, "cutlass_1234abcd");
  const std::vector<Pinned> cases = {
      {"cpu", {{"backend", "cpu"}, {"arch", "x86-64-v3"}, {"source", kCpuSource}}, "c2e4db9f5dc22f69147b2af8f2b4ad5329b5125f8bb1832b211dbf8e5a4d9596",
       "ff99396e28ef5b8d48777a1ada20ce14659ed1b6ae7321d059325811fab921e5"},
      {"cpu O2 fast-math", {{"backend", "cpu"}, {"arch", "x86-64-v3"}, {"source", kCpuSource}, {"options", {{"opt_level", "O2"}, {"fast_math", true}}}}, "9b34af55525ee5cb40bc5029e665e0068e3be158ac38f86bd104fb6c8ef970b5",
       "24c5a9850dc36e59bc7319caf0d3fff4da1381cd437dfded548d91e28ab18efa"},
      {"cpu defines aot", {{"backend", "cpu"}, {"arch", "x86-64-v4"}, {"source", kCpuSource}, {"options", {{"aot", true}, {"defines", {{"N", "4"}, {"FLAG", nullptr}}}}}}, "a52a46a2f4bb48d455a22ee33718bd84e7deafd6fed5ffb1ae7a6773d7916f78",
       "e8d7678d3ee5a1514a95478a929fd4d95a1fcfc8be29b39c3778a3d30c721b6b"},
      {"cpu export_name", {{"backend", "cpu"}, {"arch", "x86-64"}, {"source", exported}, {"export_name", "cutlass_1234abcd"}}, "2d74e17f463e51d2c7518634375e1f6f2939f95c5b42274a098dcd9ff8aaa39e",
       "e53275cdbf0817cdc6810a0f90c8beb96b883650f0f0d0bfde6d1bb63d8775da"},
      {"cuda sm_90a", {{"backend", "cuda"}, {"arch", "sm_90a"}, {"source", kCudaSource}}, "ad3bd5b743f41217ca93ff5c75130d775061d734d91cd289b4d52eb29016bf3a",
       "8302a71da9e9ae0972acee66500ce119122160e8c2ec423f88428c4f4a937124"},
      {"cuda fat", {{"backend", "cuda"}, {"arch", {"sm_80", "sm_90"}}, {"source", kCudaSource}, {"options", {{"debug_info", true}}}}, "f5d4635aacae154983d1ff0ac17e1bbb1dc7aa6e9aac348a94e96a6cef9aa7af",
       "3bcc6ee9afc9211c3a9d50361a5c101b1ed38dfd727ca5724fd9141bc9864583"},
      {"rocm", {{"backend", "rocm"}, {"arch", {"gfx90a", "gfx942"}}, {"source", kRocmSource}}, "27d576f6871255b677707578d3fadb79a5ce74ee274919de7cbcec69a7603e1e",
       "0e1555c2fe1bf2c918013c5b30daf43485157f0a60b458fc09d87ae9a9145b5f"},
  };
  for (const auto& c : cases) {
    auto req = parse_kernel_request(c.request, {});
    ASSERT_TRUE(req) << c.name << ": " << req.error().message;
    auto prepared = builder.prepare(*req);
    ASSERT_TRUE(prepared) << c.name << ": " << prepared.error().message;
    auto kernel = builder.render(*prepared);
    ASSERT_TRUE(kernel) << c.name << ": " << kernel.error().message;
    EXPECT_EQ(prepared->request_key, c.request_key) << c.name << ": the request key moved";
    EXPECT_EQ(kernel->answer_key(), c.kernel_key) << c.name << ": the kernel key moved";
  }
}

}  // namespace
}  // namespace kforge::core
