// Times rendered cpu gemm kernels (.so files from the cache) beside OpenBLAS's cblas_sgemm in
// one process, alternating them round by round with the last-level cache flushed before every
// call, and prints each one's median against OpenBLAS's. For comparing kernel variants on a
// noisy machine: the service's runner times one kernel at a time.
//
// Build: g++ -O2 -std=c++17 bench/cpu_kernel_ab.cpp -o /tmp/cpu_kernel_ab -lopenblas -ldl
// Run:   OPENBLAS_CORETYPE=SkylakeX /tmp/cpu_kernel_ab N nn|nt ROUNDS KERNEL.so:SYMBOL...
//        (square float32 N x N x N, B row-major or transposed, as the kernels were rendered;
//        KERNEL.so is <cache>/v1/objects/<k[0:2]>/<k>/kernel.so, SYMBOL its kernel_name)
#include <dlfcn.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

using Fn = int (*)(const float*, const float*, float*, int64_t, int64_t, int64_t, int64_t, size_t*, uint8_t*, void*);

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s N nn|nt ROUNDS KERNEL.so:SYMBOL...\n", argv[0]);
    return 2;
  }
  const int64_t n = std::atoll(argv[1]);
  const bool bt = argv[2][1] == 't';
  const int rounds = std::atoi(argv[3]);
  std::vector<char> junk(size_t(64) << 20);
  auto flush = [&] { for (size_t i = 0; i < junk.size(); i += 64) junk[i]++; };
  std::vector<float> A(size_t(n * n)), B(size_t(n * n)), C(size_t(n * n)), R(size_t(n * n));
  for (auto& x : A) x = float(std::rand()) / float(RAND_MAX) - 0.5f;
  for (auto& x : B) x = float(std::rand()) / float(RAND_MAX) - 0.5f;
  std::vector<std::function<void()>> fns = {[&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans, int(n), int(n), int(n), 1.f, A.data(), int(n),
                B.data(), int(n), 0.f, R.data(), int(n));
  }};
  std::vector<std::string> names = {"openblas"};
  std::vector<std::vector<uint8_t>> workspaces(static_cast<size_t>(argc));
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto colon = arg.rfind(':');
    void* h = colon == std::string::npos ? nullptr : ::dlopen(arg.substr(0, colon).c_str(), RTLD_NOW | RTLD_LOCAL);
    Fn f = h ? reinterpret_cast<Fn>(::dlsym(h, arg.substr(colon + 1).c_str())) : nullptr;
    if (!f) {
      std::fprintf(stderr, "cannot load %s: %s\n", arg.c_str(), h ? "no such symbol" : ::dlerror());
      return 1;
    }
    size_t ws = 0;
    f(nullptr, nullptr, nullptr, n, n, n, 1, &ws, nullptr, nullptr);
    workspaces[size_t(i)].resize(ws + 64);
    uint8_t* w = workspaces[size_t(i)].data();
    fns.push_back([&, f, w, arg] {
      if (int rc = f(A.data(), B.data(), C.data(), n, n, n, 1, nullptr, w, nullptr)) {
        std::fprintf(stderr, "%s returned %d\n", arg.c_str(), rc);
        std::exit(1);
      }
    });
    names.push_back(arg);
  }
  fns[0]();
  for (size_t i = 1; i < fns.size(); ++i) {
    fns[i]();
    double worst = 0;
    for (size_t j = 0; j < C.size(); ++j) worst = std::max(worst, double(std::fabs(C[j] - R[j])));
    if (worst > 1e-3) std::printf("%s: WRONG, max |C - OpenBLAS| = %g\n", names[i].c_str(), worst);
  }
  std::vector<std::vector<double>> ms(fns.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < fns.size(); ++i) {
      for (int k = 0; k < 3; ++k) {
        flush();
        const auto t0 = std::chrono::steady_clock::now();
        fns[i]();
        ms[i].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  double base = 0;
  for (size_t i = 0; i < fns.size(); ++i) {
    std::sort(ms[i].begin(), ms[i].end());
    const double med = ms[i][ms[i].size() / 2];
    if (i == 0) base = med;
    std::printf("%-50s median %8.3f ms  min %8.3f ms  %6.1f GFLOP/s  OpenBLAS/this %.3f\n", names[i].c_str(), med, ms[i][0],
                2.0 * double(n) * double(n) * double(n) / med / 1e6, base / med);
  }
  return 0;
}
