// The gemm template over HTTP against the real server: every CPU case is compiled,
// loaded, run on random data and compared with a float64 reference computed here (not
// the template's own reference rendering); CUDA and ROCm cases are compiled and their
// device code inspected (HMMA in the sm_90 cubin, v_mfma in the gfx90a code object).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "core/base/abi.hpp"
#include "core/toolchain/codeobj.hpp"
#include "core/base/dtype.hpp"
#include "core/base/fsutil.hpp"
#include "core/process/process.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;
using core::Dtype;
using nlohmann::json;

// ---- host-side tensors ----------------------------------------------------------------

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
double round_to(Dtype d, double v) {
  if (d == Dtype::kFloat16) return double(float(_Float16(float(v))));
  if (d == Dtype::kBFloat16) return from_bf16(to_bf16(float(v)));
  if (d == Dtype::kFloat32) return double(float(v));
  return v;
}

struct Tensor {
  json meta;
  Dtype dtype;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  std::vector<unsigned char> bytes;

  explicit Tensor(const json& m) : meta(m), dtype(*core::parse_dtype(m["dtype"].get<std::string>())) {
    sizes = m["sizes"].get<std::vector<int64_t>>();
    if (m.contains("strides")) {
      strides = m["strides"].get<std::vector<int64_t>>();
    } else {
      strides.assign(sizes.size(), 1);
      for (size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
    }
    offset = m.value("offset", int64_t{0});
    int64_t n = 1 + offset;
    for (size_t i = 0; i < sizes.size(); ++i) n += (sizes[i] - 1) * strides[i];
    bytes.assign(size_t(n) * core::dtype_size(dtype), 0);
  }
  double get(int64_t e) const {
    switch (dtype) {
      case Dtype::kFloat16: { _Float16 h; std::memcpy(&h, &bytes[e * 2], 2); return double(float(h)); }
      case Dtype::kBFloat16: { uint16_t b; std::memcpy(&b, &bytes[e * 2], 2); return from_bf16(b); }
      default: { float f; std::memcpy(&f, &bytes[e * 4], 4); return f; }
    }
  }
  void set(int64_t e, double v) {
    switch (dtype) {
      case Dtype::kFloat16: { _Float16 h = _Float16(float(v)); std::memcpy(&bytes[e * 2], &h, 2); break; }
      case Dtype::kBFloat16: { uint16_t b = to_bf16(float(v)); std::memcpy(&bytes[e * 2], &b, 2); break; }
      default: { float f = float(v); std::memcpy(&bytes[e * 4], &f, 4); break; }
    }
  }
  void randomize(std::mt19937& rng) {
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int64_t e = 0; e < int64_t(bytes.size() / core::dtype_size(dtype)); ++e) set(e, nd(rng));
  }
  // Element at an index right-aligned against a [b, m, n] output index (broadcasting).
  double at(const std::vector<int64_t>& idx) const {
    int64_t e = offset;
    const size_t r = sizes.size();
    for (size_t i = 0; i < r; ++i) {
      int64_t x = idx[idx.size() - r + i];
      if (sizes[i] > 1) e += x * strides[i];
    }
    return get(e);
  }
};

json tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides = {},
            int64_t offset = 0) {
  json t = {{"name", name}, {"dtype", dtype}, {"sizes", sizes}};
  if (!strides.empty()) t["strides"] = strides;
  if (offset) t["offset"] = offset;
  return t;
}

// A [M,K] (or [batch,M,K]) operand, row-major or transposed (column-major) in memory.
json operand(const std::string& name, const std::string& dtype, int64_t rows, int64_t cols, bool transposed, int64_t batch = 0) {
  if (batch == 0) return tensor(name, dtype, {rows, cols}, transposed ? std::vector<int64_t>{1, rows} : std::vector<int64_t>{cols, 1});
  return tensor(name, dtype, {batch, rows, cols},
                transposed ? std::vector<int64_t>{rows * cols, 1, rows} : std::vector<int64_t>{rows * cols, cols, 1});
}

double apply_op(const json& op, double v, const std::vector<Tensor>& ins, const std::vector<int64_t>& idx) {
  const std::string o = op["op"];
  if (o == "add") return v + ins[op["input"].get<size_t>()].at(idx);
  if (o == "mul") return v * ins[op["input"].get<size_t>()].at(idx);
  if (o == "scale") return v * op["value"].get<double>();
  if (o == "relu") return v > 0 ? v : 0;
  if (o == "sigmoid") return 1 / (1 + std::exp(-v));
  if (o == "silu") return v / (1 + std::exp(-v));
  if (o == "tanh") return std::tanh(v);
  if (o == "gelu" && op.value("approximate", "none") == "tanh") return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  if (o == "gelu") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  if (o == "cast") return round_to(*core::parse_dtype(op["dtype"].get<std::string>()), v);
  throw std::logic_error("op " + o);
}

// Whether this host runs code built for a cpu target: `native` always; the x86-64 psABI
// levels by CPUID (a kernel for a level the host lacks is compiled, never run here).
bool host_runs(const std::string& arch) {
  __builtin_cpu_init();
  if (arch == "x86-64-v4") return __builtin_cpu_supports("x86-64-v4");
  if (arch == "x86-64-v3") return __builtin_cpu_supports("x86-64-v3");
  return true;
}

class Gemm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new Scratch();
    server_ = new ServerProcess(scratch_->path() / "cache", scratch_->path() / "server.log");
  }
  static void TearDownTestSuite() {
    delete server_;
    delete scratch_;
  }

  // Compiles `req`, runs it on random inputs and checks every output (or a sample of
  // large outputs) against float64 within the output dtype's tolerance.
  void run_cpu(json req) {
    req["backend"] = "cpu";
    req["template"] = "gemm";
    if (!req.contains("arch")) req["arch"] = "native";
    auto r = post_json(*server_, "/kernels", req.dump());
    ASSERT_EQ(r.status, 200) << r.raw.substr(0, 4000);
    const std::string name = r.body["kernel_name"];
    EXPECT_TRUE(name.starts_with(req.value("reference", false) ? "cpu_gemm_ref_" : "cpu_gemm_"));
    if (!host_runs(req["arch"])) {
      GTEST_SKIP() << "compiled for " << req["arch"] << "; not run: this host's CPU lacks that ISA level";
    }
    auto so = get(*server_, r.body["artifact"]["url"]);
    // A fresh file per load: rewriting a mapped .so (same kernel twice) would crash the loader.
    static int loads = 0;
    fs::path path = scratch_->path() / (name + "." + std::to_string(loads++) + ".so");
    ASSERT_TRUE(core::write_file(path, so.raw));
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    ASSERT_NE(h, nullptr) << ::dlerror();
    void* fn = ::dlsym(h, name.c_str());
    ASSERT_NE(fn, nullptr);

    std::mt19937 rng(1234);
    std::vector<Tensor> ins;
    for (const auto& m : req["inputs"]) {
      ins.emplace_back(m);
      ins.back().randomize(rng);
    }
    Tensor out(req["output"]);
    // Arguments in ABI order: input_reorder, output, M N K batch, workspace_size, workspace, stream.
    const json& abi = r.body["abi"];
    std::vector<void*> ptrs;
    std::vector<int64_t> scalars;
    for (const auto& a : abi["args"]) {
      if (a["kind"] == "tensor") {
        if (a["binds"] == req["output"]["name"]) { ptrs.push_back(out.bytes.data()); continue; }
        for (size_t i = 0; i < ins.size(); ++i) {
          if (a["binds"] == req["inputs"][i]["name"]) ptrs.push_back(ins[i].bytes.data());
        }
      } else if (a["kind"] == "scalar") {
        scalars.push_back(a["value"].get<int64_t>());
      }
    }
    ASSERT_EQ(scalars.size(), 4u);
    ASSERT_LE(ptrs.size(), 5u);
    using Fn5 = int (*)(void*, void*, void*, void*, void*, int64_t, int64_t, int64_t, int64_t, size_t*, uint8_t*, void*);
    const size_t nt = ptrs.size();  // the C call needs the exact arity
    size_t ws = 0;
    auto call = [&](size_t* wsq, uint8_t* wsp) -> int {
      switch (nt) {
        case 3: return reinterpret_cast<int (*)(void*, void*, void*, int64_t, int64_t, int64_t, int64_t, size_t*, uint8_t*, void*)>(fn)(
            ptrs[0], ptrs[1], ptrs[2], scalars[0], scalars[1], scalars[2], scalars[3], wsq, wsp, nullptr);
        case 4: return reinterpret_cast<int (*)(void*, void*, void*, void*, int64_t, int64_t, int64_t, int64_t, size_t*, uint8_t*, void*)>(fn)(
            ptrs[0], ptrs[1], ptrs[2], ptrs[3], scalars[0], scalars[1], scalars[2], scalars[3], wsq, wsp, nullptr);
        case 5: return reinterpret_cast<Fn5>(fn)(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], scalars[0], scalars[1], scalars[2], scalars[3], wsq, wsp, nullptr);
        default: ADD_FAILURE() << nt << " tensors"; return -1;
      }
    };
    ASSERT_EQ(call(&ws, nullptr), 0);
    EXPECT_EQ(ws, abi["workspace_bytes"].get<uint64_t>());
    EXPECT_EQ(ws, r.body["workspace_bytes"].get<uint64_t>());
    std::vector<uint8_t> workspace(ws + 1);
    ASSERT_EQ(call(nullptr, workspace.data()), 0);

    // The reference, in float64.
    const int64_t batch = scalars[3], M = scalars[0], N = scalars[1], K = scalars[2];
    const Tensor& A = ins[0];
    const Tensor& B = ins[1];
    // A cast in the epilogue rounds to that dtype: judge at the coarsest dtype involved.
    Dtype od = out.dtype;
    for (const auto& op : req.value("epilogue", json::array())) {
      if (op["op"] == "cast" && op["dtype"] == "bfloat16") od = Dtype::kBFloat16;
      if (op["op"] == "cast" && op["dtype"] == "float16" && od == Dtype::kFloat32) od = Dtype::kFloat16;
    }
    const double rtol = od == Dtype::kFloat32 ? 1e-4 : od == Dtype::kFloat16 ? 2e-3 : 1e-2;
    const double atol = (od == Dtype::kFloat32 ? 1e-5 : od == Dtype::kFloat16 ? 1e-3 : 1e-2) * std::sqrt(double(K));
    const int64_t total = batch * M * N;
    const int64_t samples = total > 4096 ? 4096 : total;
    std::uniform_int_distribution<int64_t> pick(0, total - 1);
    double worst = 0;
    int64_t bad = 0;
    for (int64_t s = 0; s < samples; ++s) {
      const int64_t flat = total > 4096 ? pick(rng) : s;
      const int64_t b = flat / (M * N), m = flat / N % M, n = flat % N;
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += A.at(A.sizes.size() == 3 ? std::vector<int64_t>{b, m, k} : std::vector<int64_t>{m, k}) *
                                             B.at(B.sizes.size() == 3 ? std::vector<int64_t>{b, k, n} : std::vector<int64_t>{k, n});
      std::vector<int64_t> idx = out.sizes.size() == 3 ? std::vector<int64_t>{b, m, n} : std::vector<int64_t>{m, n};
      for (const auto& op : req.value("epilogue", json::array())) acc = apply_op(op, acc, ins, idx);
      const double got = out.at(idx);
      const double err = std::abs(got - acc);
      worst = std::max(worst, err / (atol + rtol * std::abs(acc)));
      if (!(err <= atol + rtol * std::abs(acc))) {
        if (bad++ < 5) ADD_FAILURE() << name << " [" << b << "," << m << "," << n << "] got " << got << " want " << acc;
      }
    }
    EXPECT_EQ(bad, 0) << "of " << samples << " checked; worst error / tolerance " << worst;
  }

  static Scratch* scratch_;
  static ServerProcess* server_;
};
Scratch* Gemm::scratch_ = nullptr;
ServerProcess* Gemm::server_ = nullptr;

json gemm(const std::string& dt, int64_t M, int64_t N, int64_t K, bool ta, bool tb, const std::string& out_dt = "") {
  return {{"inputs", {operand("A", dt, M, K, ta), operand("B", dt, K, N, tb)}},
          {"output", tensor("C", out_dt.empty() ? dt : out_dt, {M, N})}};
}

TEST_F(Gemm, CpuMatrixOfDtypesLayoutsAndShapes) {
  for (const char* dt : {"float32", "float16", "bfloat16"}) {
    for (int layout = 0; layout < 4; ++layout) {
      for (auto [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1}, {127, 253, 61}, {1024, 1024, 1024}}) {
        SCOPED_TRACE(std::string(dt) + " layout " + "NT"[layout / 2 ? 1 : 0] + "NT"[layout % 2] + " " + std::to_string(M) + "x" +
                     std::to_string(N) + "x" + std::to_string(K));
        run_cpu(gemm(dt, M, N, K, layout / 2, layout % 2));
      }
    }
  }
}

TEST_F(Gemm, CpuEveryEpilogueOpAloneAndAChain) {
  const int64_t M = 67, N = 45, K = 300;  // K > kc (128 below): partial sums live between K panels
  const std::vector<json> ops = {
      {{"op", "add"}, {"input", 2}}, {{"op", "mul"}, {"input", 2}}, {{"op", "scale"}, {"value", -0.5}},
      {{"op", "relu"}}, {{"op", "gelu"}}, {{"op", "gelu"}, {"approximate", "tanh"}}, {{"op", "silu"}},
      {{"op", "sigmoid"}}, {{"op", "tanh"}}, {{"op", "cast"}, {"dtype", "bfloat16"}}};
  for (const auto& op : ops) {
    SCOPED_TRACE(op.dump());
    json req = gemm("float32", M, N, K, false, false);
    if (op.contains("input")) req["inputs"].push_back(tensor("E", "float32", {M, N}));
    req["epilogue"] = {op};
    req["params"] = {{"kc", 128}};
    run_cpu(req);
  }
  // Bias by column ([N]), by row ([M, 1]), full-shape residual; float16 in, float16 out.
  for (auto bias : {std::vector<int64_t>{N}, std::vector<int64_t>{M, 1}, std::vector<int64_t>{M, N}}) {
    json req = gemm("float16", M, N, K, true, false);
    req["inputs"].push_back(tensor("bias", "float16", bias));
    req["epilogue"] = {{{"op", "add"}, {"input", 2}}};
    req["params"] = {{"kc", 128}};
    run_cpu(req);
  }
  // A 3-op chain with two operands, bfloat16, reordered kernel arguments.
  json chain = gemm("bfloat16", M, N, K, false, true, "float32");
  chain["inputs"].push_back(tensor("bias", "float32", {N}));
  chain["inputs"].push_back(tensor("gate", "bfloat16", {M, N}));
  chain["input_reorder"] = {2, 0, 1, 3};
  chain["epilogue"] = {{{"op", "add"}, {"input", 2}}, {{"op", "gelu"}, {"approximate", "tanh"}}, {{"op", "mul"}, {"input", 3}}};
  run_cpu(chain);
}

// Where the partial sums of several K panels live (C itself for a float32 output with no
// epilogue tensor, else the workspace), K cut into equal panels, and the threads' grid over
// C's micro-tiles (rows first; columns too when there are few row panels; threads with
// nothing to do) on ragged edges, every layout, and a batch whose panels alternate B buffers.
TEST_F(Gemm, CpuSplitKAndThreadGridsCoverEveryPath) {
  struct Case {
    int64_t M, N, K;
    bool ta, tb;
    const char* dt;
    const char* out;
    int kc, threads;
    bool bias;
  };
  for (const Case& c : std::vector<Case>{{131, 77, 1000, false, false, "float32", "float32", 128, 2, false},
                                         {131, 77, 1000, true, true, "float32", "float32", 128, 2, true},
                                         {70, 90, 515, false, true, "float16", "float16", 64, 2, false},
                                         {3, 500, 700, false, true, "float32", "float32", 64, 4, false},
                                         {50, 40, 200, true, false, "bfloat16", "float32", 64, 8, true},
                                         {1, 1, 300, false, false, "float32", "float32", 64, 4, false}}) {
    SCOPED_TRACE(std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + " " + c.dt + " kc " +
                 std::to_string(c.kc) + " threads " + std::to_string(c.threads) + (c.bias ? " bias" : ""));
    json req = gemm(c.dt, c.M, c.N, c.K, c.ta, c.tb, c.out);
    if (c.bias) {
      req["inputs"].push_back(tensor("bias", c.out, {c.N}));
      req["epilogue"] = {{{"op", "add"}, {"input", 2}}, {{"op", "relu"}}};
    }
    req["params"] = {{"kc", c.kc}, {"threads", c.threads}};
    run_cpu(req);
  }
  json batched = {{"inputs", {operand("A", "float32", 33, 300, true, 3), operand("B", "float32", 300, 29, false, 3)}},
                  {"output", tensor("C", "float32", {3, 33, 29})},
                  {"params", {{"kc", 64}}}};
  run_cpu(batched);
}

TEST_F(Gemm, CpuBatchedWithSharedOperandAndOffsets) {
  json req = {{"inputs", {operand("A", "float32", 33, 70, false, 3), operand("B", "float32", 70, 29, true, 3)}},
              {"output", tensor("C", "float32", {3, 33, 29})}};
  run_cpu(req);
  // B shared by every batch ([K, N]), A a strided view with a storage offset, float16.
  json shared = {{"inputs", {tensor("A", "float16", {4, 20, 50}, {1200, 60, 1}, 7), operand("B", "float16", 50, 30, false)}},
                 {"output", tensor("C", "float16", {4, 20, 30}, {600, 30, 1})},
                 {"epilogue", {{{"op", "relu"}}}}};
  run_cpu(shared);
}

TEST_F(Gemm, CpuReferenceRenderingComputesTheSame) {
  json req = gemm("bfloat16", 37, 41, 300, true, false, "float32");
  req["inputs"].push_back(tensor("bias", "float32", {41}));
  req["epilogue"] = {{{"op", "add"}, {"input", 2}}, {{"op", "gelu"}}};
  req["reference"] = true;
  run_cpu(req);
}

// Register blockings for 16 vector registers of 8 floats (AVX2) and for 32 of 16 (AVX-512),
// each on the target that has them: both compile on every host, each runs where it can.
TEST_F(Gemm, CpuTuningParametersChangeTheKernelNotTheResultOnAvx2) {
  json a = gemm("float32", 100, 200, 300, false, false);
  a["arch"] = "x86-64-v3";
  a["params"] = {{"mr", 6}, {"nr", 16}, {"vec", 8}, {"kc", 128}, {"mc", 48}};
  run_cpu(a);
  json b = gemm("float32", 100, 200, 300, false, false);
  b["arch"] = "x86-64-v3";
  b["params"] = {{"mr", 4}, {"nr", 24}, {"vec", 8}, {"kc", 512}, {"threads", 1}};
  run_cpu(b);
}

TEST_F(Gemm, CpuTuningParametersChangeTheKernelNotTheResultOnAvx512) {
  json a = gemm("float32", 100, 200, 300, false, false);
  a["arch"] = "x86-64-v4";
  a["params"] = {{"mr", 6}, {"nr", 32}, {"vec", 16}, {"kc", 128}, {"mc", 48}};
  run_cpu(a);
  json b = gemm("float32", 100, 200, 300, false, false);
  b["arch"] = "x86-64-v4";
  b["params"] = {{"mr", 4}, {"nr", 64}, {"vec", 16}, {"kc", 512}, {"threads", 1}};
  run_cpu(b);
}

// What `native` is on this host, what a target offers, and what becomes of parameters that
// do not fit it; the psABI levels are compiled on every host.
TEST_F(Gemm, CpuTargetsFollowTheirIsaAndNativeIsTheWholeHost) {
  auto tc = get(*server_, "/toolchains");
  ASSERT_EQ(tc.status, 200);
  const json& cpu = tc.body["cpu"];
  const std::string native = cpu["native"];
  const json& isa = cpu["native_isa"];
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  auto has = [&](const std::string& f) {
    for (const auto& x : isa["features"]) if (x == f) return true;
    return false;
  };
  EXPECT_EQ(has("avx512f"), avx512) << native;
  EXPECT_EQ(has("avx2"), bool(__builtin_cpu_supports("avx2"))) << native;
  EXPECT_EQ(isa["vector_registers"], avx512 ? 32 : 16);
  EXPECT_EQ(isa["vector_floats"], avx512 ? 16 : has("avx") ? 8 : 4);

  // The resolved target, spelled out, is the same request as `native`.
  json req = gemm("float32", 64, 48, 32, false, false);
  req["backend"] = "cpu";
  req["template"] = "gemm";
  req["arch"] = "native";
  auto by_native = post_json(*server_, "/render", req.dump());
  ASSERT_EQ(by_native.status, 200) << by_native.raw;
  EXPECT_EQ(by_native.body["archs"][0], native);
  req["arch"] = native;
  EXPECT_EQ(post_json(*server_, "/render", req.dump()).body["key"], by_native.body["key"]);
  // Every feature `native` adds to its -march name reaches the compiler's command line.
  const json& argv = by_native.body["compile"]["argv"][0];
  for (size_t at = native.find('+'); at != std::string::npos; at = native.find('+', at + 1)) {
    const std::string item = native.substr(at + 1, native.find('+', at + 1) - at - 1);
    if (item.find('=') != std::string::npos) continue;
    EXPECT_NE(std::find(argv.begin(), argv.end(), "-m" + item), argv.end()) << item << " in " << argv.dump();
  }

  // Each target's defaults fit its registers; the same parameters on the narrower target
  // need more registers than it has: a 400 naming the field.
  for (auto [arch, vec, regs] : std::vector<std::tuple<std::string, int, int>>{{"x86-64-v3", 8, 16}, {"x86-64-v4", 16, 32}}) {
    req["arch"] = arch;
    auto r = post_json(*server_, "/render", req.dump());
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["template"]["params"]["vec"], vec) << arch;
    const int mr = r.body["template"]["params"]["mr"], nr = r.body["template"]["params"]["nr"];
    EXPECT_LE(mr * (nr / vec) + nr / vec + 1, regs) << arch;
    bool march = false;
    for (const auto& a : r.body["compile"]["argv"][0]) march |= a == "-march=" + arch;
    EXPECT_TRUE(march) << r.body["compile"].dump();
  }
  req["arch"] = "x86-64-v3";
  req["params"] = {{"mr", 12}, {"nr", 32}, {"vec", 8}};
  auto too_many = post_json(*server_, "/render", req.dump());
  EXPECT_EQ(too_many.status, 400);
  EXPECT_EQ(too_many.body["errors"][0]["field"], "/params/mr") << too_many.raw;
  EXPECT_NE(too_many.raw.find("the target has 16"), std::string::npos) << too_many.raw;
  req["params"] = {{"vec", 16}};
  auto too_wide = post_json(*server_, "/render", req.dump());
  EXPECT_EQ(too_wide.status, 400);
  EXPECT_EQ(too_wide.body["errors"][0]["field"], "/params/vec") << too_wide.raw;

  // A target with a feature no host here has compiles, but a benchmark of it is refused with
  // the missing feature named, never run into a SIGILL.
  req.erase("params");
  req["arch"] = "x86-64-v4+avx5124fmaps";
  auto compiled = post_json(*server_, "/kernels", req.dump());
  EXPECT_EQ(compiled.status, 200) << compiled.raw;
  req["benchmark"] = true;
  auto refused = post_json(*server_, "/kernels", req.dump());
  EXPECT_EQ(refused.status, 400) << refused.raw;
  EXPECT_EQ(refused.body["errors"][0]["field"], "/arch");
  EXPECT_NE(refused.raw.find("avx5124fmaps"), std::string::npos) << refused.raw;
  // Unknown features and foreign flags in a target are refused before any compiler runs.
  req.erase("benchmark");
  for (const char* bad : {"x86-64-v3+avx9000", "x86-64-v3+fplugin=/tmp/p.so", "x86-64-v3 -B/tmp"}) {
    req["arch"] = bad;
    auto r = post_json(*server_, "/render", req.dump());
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(r.body["errors"][0]["field"], "/arch") << r.raw;
  }
}

TEST_F(Gemm, RepeatedTemplateRequestIsAnsweredWithoutRendering) {
  json req = gemm("float32", 64, 64, 64, false, false);
  req["backend"] = "cpu";
  req["template"] = "gemm";
  auto first = post_json(*server_, "/kernels", req.dump());
  ASSERT_EQ(first.status, 200);
  auto again = post_json(*server_, "/kernels", req.dump());
  EXPECT_EQ(again.body["cache"], "hit");
  EXPECT_FALSE(again.body["phases_ms"].contains("render"));  // the request key answered it
  // Spelling out the defaults is the same request.
  auto tmpl = get(*server_, "/templates/gemm");
  json defaults = json::object();
  for (const auto& p : tmpl.body["backends"]["cpu"]["params"]) defaults[p["name"].get<std::string>()] = p["default"];
  req["params"] = defaults;
  auto spelled = post_json(*server_, "/kernels", req.dump());
  EXPECT_EQ(spelled.body["key"], first.body["key"]);
  EXPECT_FALSE(spelled.body["phases_ms"].contains("render"));
}

TEST_F(Gemm, BadTemplateRequestsNameTheFieldAndTheLimit) {
  auto bad = [&](json req, const std::string& field, const std::string& says) {
    if (!req.contains("backend")) req["backend"] = "cpu";
    if (!req.contains("template")) req["template"] = "gemm";
    auto r = post_json(*server_, "/kernels", req.dump());
    EXPECT_EQ(r.status, 400) << req.dump();
    bool named = false;
    for (const auto& e : r.body["errors"]) {
      if (e["field"] == field && e["message"].get<std::string>().find(says) != std::string::npos) named = true;
    }
    EXPECT_TRUE(named) << "want " << field << " saying '" << says << "' in " << r.raw;
  };
  bad(json{{"template", "conv9d"}, {"inputs", {tensor("A", "float32", {2, 2})}}, {"output", tensor("C", "float32", {2, 2})}}, "/template", "unknown template");
  json g = gemm("float32", 8, 8, 8, false, false);
  auto with = [&](json base, const std::string& key, json value) { base[key] = value; return base; };
  bad(with(g, "params", {{"mr", 5}}), "/params/mr", "not allowed");
  bad(with(g, "params", {{"mr", 14}, {"mc", 96}}), "/params/mc", "multiple of mr");
  bad(with(g, "params", {{"nr", 24}, {"vec", 16}}), "/params/nr", "multiple of vec");
  bad(with(g, "params", {{"tile", 3}}), "/params/tile", "unknown parameter");
  bad(with(with(g, "arch", "x86-64"), "params", {{"vec", 16}, {"nr", 32}, {"mr", 4}}), "/params/vec", "wider vectors");
  // Without explicit parameters, the defaults follow the arch and are valid there.
  json plain = with(g, "arch", "x86-64");
  plain["backend"] = "cpu";
  plain["template"] = "gemm";
  EXPECT_EQ(post_json(*server_, "/render", plain.dump()).status, 200);
  json wrong_k = g;
  wrong_k["inputs"][1] = operand("B", "float32", 9, 8, false);
  bad(wrong_k, "/inputs/1/sizes", "K differs");
  json wrong_out = g;
  wrong_out["output"] = tensor("C", "float32", {8, 9});
  bad(wrong_out, "/output/sizes", "N = 9");
  json int_a = g;
  int_a["inputs"][0]["dtype"] = "int32";
  int_a["inputs"][1]["dtype"] = "int32";
  bad(int_a, "/inputs/0/dtype", "float32, float16 or bfloat16");
  json neg = g;
  neg["inputs"][0]["strides"] = {-8, 1};
  bad(neg, "/inputs/0/strides/0", "negative");
  json overlap = g;
  overlap["output"]["strides"] = {1, 1};
  bad(overlap, "/output/strides", "overlap");
  json bias = g;
  bias["inputs"].push_back(tensor("bias", "float32", {7}));
  bias["epilogue"] = {{{"op", "add"}, {"input", 2}}};
  bad(bias, "/inputs/2/sizes/0", "does not broadcast");
  json unused = g;
  unused["inputs"].push_back(tensor("x", "float32", {8}));
  bad(unused, "/inputs/2", "not used");
  json badop = g;
  badop["epilogue"] = {{{"op", "softmax"}}};
  bad(badop, "/epilogue/0/op", "unknown op");
  json cuda_smem = g;
  cuda_smem["backend"] = "cuda";
  cuda_smem["arch"] = "sm_80";
  cuda_smem["inputs"][0]["dtype"] = "float16";
  cuda_smem["inputs"][1]["dtype"] = "float16";
  cuda_smem["params"] = {{"block_m", 256}, {"block_n", 256}, {"block_k", 64}, {"stages", 5}, {"warps", 8}};
  if (get(*server_, "/toolchains").body["cuda"]["available"]) bad(cuda_smem, "/params/stages", "shared memory");
  json old_arch = cuda_smem;
  old_arch["params"] = json::object();
  old_arch["arch"] = "sm_75";
  if (get(*server_, "/toolchains").body["cuda"]["available"]) bad(old_arch, "/arch", "sm_80 or newer");
}

TEST_F(Gemm, RenderIsADryRunAndTemplatesAreDescribed) {
  json req = gemm("float16", 128, 64, 32, false, false);
  req["backend"] = "cpu";
  req["template"] = "gemm";
  const double runs = metric(*server_, "kforge_compiler_runs_total");
  auto r = post_json(*server_, "/render", req.dump());
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(metric(*server_, "kforge_compiler_runs_total"), runs);
  const std::string src = r.body["source"];
  const std::string name = r.body["kernel_name"];
  EXPECT_NE(src.find("PT_EXPORT int " + name + "("), std::string::npos);
  EXPECT_EQ(r.body["abi"]["args"].size(), 10u);
  EXPECT_EQ(r.body["abi"]["args"][3]["name"], "M");
  EXPECT_EQ(r.body["abi"]["args"][3]["value"], 128);
  // The rendered text parses back to the same signature (source mode would agree).
  std::string placeholder = src;
  placeholder.replace(placeholder.find(name + "("), name.size(), "KERNEL_NAME");
  auto parsed = core::parse_signature(placeholder, core::Backend::kCpu);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->args.size(), 10u);
  EXPECT_EQ(parsed->args[0].dtype, Dtype::kFloat16);
  req["reference"] = true;
  auto ref = post_json(*server_, "/render", req.dump());
  EXPECT_NE(ref.body["key"], r.body["key"]);
  EXPECT_TRUE(ref.body["kernel_name"].get<std::string>().starts_with("cpu_gemm_ref_"));
  auto list = get(*server_, "/templates");
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(list.body["templates"][0]["name"], "gemm");
  auto one = get(*server_, "/templates/gemm");
  for (const char* b : {"cpu", "cuda", "rocm"}) {
    EXPECT_FALSE(one.body["backends"][b]["params"].empty()) << b;
    EXPECT_FALSE(one.body["backends"][b]["default_choices"].empty()) << b;
  }
  EXPECT_EQ(get(*server_, "/templates/nope").status, 404);
}

// ---- gpu code, compiled here and inspected ------------------------------------------------

// The dtypes and layouts the CUDA cases compile. Under the sanitizers (scripts/test.sh's second
// pass) one of each list: the service's code a compile runs is the same for every dtype and
// layout, nvcc's minutes are not, and the normal pass compiles them all. Every rendering is
// checked under the sanitizers by tests/unit/gemm_render_test.cpp.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kEveryCudaCase = false;
#else
constexpr bool kEveryCudaCase = true;
#endif
std::vector<std::string> cuda_dtypes(std::vector<std::string> all) { return kEveryCudaCase ? all : decltype(all){all.front()}; }
std::vector<int> cuda_layouts() { return kEveryCudaCase ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{3}; }

std::string disassemble(const std::vector<std::string>& argv) {
  core::ProcessSpec spec;
  spec.argv = argv;
  spec.cwd = "/";
  spec.env = {"PATH=/usr/bin:/bin"};
  spec.output_cap = 64 << 20;
  auto r = core::run_process(spec);
  return r && r->ok() ? r->output : "";
}

TEST_F(Gemm, CudaCasesCompileAndSm90Float16UsesTensorCores) {
  if (!get(*server_, "/toolchains").body["cuda"].value("available", false)) {
    if (const char* req = std::getenv("KFORGE_REQUIRE_BACKENDS"); req && std::string(req).find("cuda") != std::string::npos) FAIL() << "cuda required";
    GTEST_SKIP() << "no nvcc";
  }
  for (const std::string& dt : cuda_dtypes({"float16", "bfloat16", "float32"})) {
    for (int layout : cuda_layouts()) {
      json req = gemm(dt, 127, 253, 61, layout / 2, layout % 2);
      req["backend"] = "cuda";
      req["template"] = "gemm";
      req["arch"] = {"sm_80", "sm_90"};
      req["inputs"].push_back(tensor("bias", "float32", {253}));
      req["epilogue"] = {{{"op", "add"}, {"input", 2}}, {{"op", "silu"}}};
      auto r = post_json(*server_, "/kernels", req.dump());
      ASSERT_EQ(r.status, 200) << dt << " " << layout << r.raw.substr(0, 3000);
      std::set<std::string> cubins;
      for (const auto& o : r.body["code_objects"]) if (o["kind"] == "cubin") cubins.insert(o["arch"]);
      EXPECT_TRUE(cubins.contains("sm_80") && cubins.contains("sm_90"));
    }
  }
  // The HMMA check: cuobjdump where the toolkit has it, else the mma instruction in the PTX
  // the fat binary carries is checked by compiling to PTX through /render's source.
  json req = gemm("float16", 512, 512, 512, false, false);
  req["backend"] = "cuda";
  req["template"] = "gemm";
  req["arch"] = "sm_90";
  auto r = post_json(*server_, "/kernels", req.dump());
  ASSERT_EQ(r.status, 200);
  auto so = get(*server_, r.body["artifact"]["url"]);
  fs::path path = scratch_->path() / "tc.so";
  ASSERT_TRUE(core::write_file(path, so.raw));
  fs::path cuobjdump = core::find_program("cuobjdump", "/usr/local/cuda/bin:/usr/bin");
  if (!cuobjdump.empty()) {
    std::string sass = disassemble({cuobjdump.string(), "-sass", path.string()});
    EXPECT_NE(sass.find("HMMA"), std::string::npos);
  } else {
    // No cuobjdump in this toolkit: ask ptxas itself for the sm_90 SASS through nvdisasm-free means,
    // i.e. compile the rendered source to a cubin and look for HMMA in its text section.
    auto rr = post_json(*server_, "/render", req.dump());
    fs::path cu = scratch_->path() / "tc.cu";
    ASSERT_TRUE(core::write_file(cu, rr.body["source"].get<std::string>()));
    fs::path nvcc = core::find_program("nvcc", "/usr/local/cuda/bin");
    fs::path cubin = scratch_->path() / "tc.cubin";
    core::ProcessSpec spec;
    spec.argv = {nvcc.string(), "-cubin", "-arch=sm_90", "-o", cubin.string(), cu.string()};
    spec.cwd = scratch_->path();
    spec.env = {"PATH=/usr/local/cuda/bin:/usr/bin:/bin", "HOME=" + scratch_->path().string()};
    auto out = core::run_process(spec);
    ASSERT_TRUE(out && out->ok()) << (out ? out->output : "");
    fs::path nvdisasm = core::find_program("nvdisasm", "/usr/local/cuda/bin");
    if (!nvdisasm.empty()) {
      EXPECT_NE(disassemble({nvdisasm.string(), cubin.string()}).find("HMMA"), std::string::npos);
    } else {
      // Without a disassembler, the PTX carried in the fat binary must hold the mma.
      fs::path ptx = scratch_->path() / "tc.ptx";
      core::ProcessSpec p2 = spec;
      p2.argv = {nvcc.string(), "-ptx", "-arch=sm_90", "-o", ptx.string(), cu.string()};
      ASSERT_TRUE(core::run_process(p2)->ok());
      EXPECT_NE(core::read_file(ptx).value().find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"), std::string::npos);
    }
  }
}

TEST_F(Gemm, CudaSm90aTakesTheTmaWgmmaKernelAndChecksItsLimits) {
  if (!get(*server_, "/toolchains").body["cuda"].value("available", false)) {
    if (const char* req = std::getenv("KFORGE_REQUIRE_BACKENDS"); req && std::string(req).find("cuda") != std::string::npos) FAIL() << "cuda required";
    GTEST_SKIP() << "no nvcc";
  }
  // Both 16-bit types in every layout, ragged against the tiles in M, N and K, with an
  // epilogue: sm_90a without params is the wgmma kernel, and it compiles without spills.
  for (const std::string& dt : cuda_dtypes({"float16", "bfloat16"})) {
    for (int layout : cuda_layouts()) {
      SCOPED_TRACE(dt + " layout " + std::to_string(layout));
      json req = gemm(dt, 200, 264, 136, layout / 2, layout % 2);
      req["backend"] = "cuda";
      req["template"] = "gemm";
      req["arch"] = "sm_90a";
      req["inputs"].push_back(tensor("bias", "float32", {264}));
      req["epilogue"] = {{{"op", "add"}, {"input", 2}}, {{"op", "silu"}}};
      auto r = post_json(*server_, "/kernels", req.dump());
      ASSERT_EQ(r.status, 200) << r.raw.substr(0, 3000);
      EXPECT_EQ(r.body["template"]["params"]["mma"], "wgmma");
      EXPECT_EQ(r.body["template"]["params"]["block_k"], 64);
      bool saw_wgmma_kernel = false;
      for (const auto& res : r.body["compile"]["resources"]) {
        EXPECT_EQ(res["arch"], "sm_90a");
        EXPECT_EQ(res["spill_stores"], 0) << res.dump();
        if (res["function"].get<std::string>().find("gemm_wgmma") != std::string::npos) saw_wgmma_kernel = true;
      }
      EXPECT_TRUE(saw_wgmma_kernel) << r.body["compile"]["resources"].dump();
    }
  }
  // Without params the tiling follows the problem: 64x128 tiles (one consumer warpgroup, 8
  // stages) for fewer than 66 tiles of 128x256, else 128x256 with two consumers, in clusters
  // of two where those tiles fill the 132 SMs.
  for (auto [M, N, bm, bn, cluster] : std::vector<std::tuple<int64_t, int64_t, int, int, int>>{
           {512, 512, 64, 128, 1}, {8, 4096, 64, 128, 1}, {2048, 2048, 128, 256, 1}, {1024, 8192, 128, 256, 2}}) {
    json small = gemm("float16", M, N, 256, false, false);
    small["backend"] = "cuda";
    small["template"] = "gemm";
    small["arch"] = "sm_90a";
    auto r = post_json(*server_, "/render", small.dump());
    ASSERT_EQ(r.status, 200) << r.raw.substr(0, 2000);
    EXPECT_EQ(r.body["template"]["params"]["block_m"], bm) << M << "x" << N;
    EXPECT_EQ(r.body["template"]["params"]["block_n"], bn) << M << "x" << N;
    EXPECT_EQ(r.body["template"]["params"]["mma"], "wgmma");
    EXPECT_EQ(r.body["template"]["params"]["split_k"], 1) << M << "x" << N << ": K = 256 is 4 slices, too few to split";
    EXPECT_EQ(r.body["template"]["params"]["cluster_m"], cluster) << M << "x" << N;
    EXPECT_EQ(r.body["workspace_bytes"], 0);
  }
  // Where even 64x128 tiles leave half the 132 SMs idle and K is deep, K is split: as many
  // parts as bring the units up to the SMs (at most 8, 4 slices each at least), and the
  // workspace holds a float partial sum per part and output.
  for (auto [B, M, N, K, split] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int>>{
           {1, 1, 4096, 4096, 4}, {1, 128, 4096, 4096, 2}, {1, 16, 2048, 4096, 8}, {1, 16, 2048, 1024, 4}, {1, 1, 11008, 4096, 1}, {2, 16, 1024, 4096, 8}}) {
    json skinny = gemm("float16", M, N, K, false, false);
    if (B > 1) {
      skinny["inputs"] = {tensor("A", "float16", {B, M, K}), tensor("B", "float16", {B, K, N})};
      skinny["output"] = tensor("C", "float16", {B, M, N});
    }
    skinny["backend"] = "cuda";
    skinny["template"] = "gemm";
    skinny["arch"] = "sm_90a";
    auto r = post_json(*server_, "/render", skinny.dump());
    ASSERT_EQ(r.status, 200) << r.raw.substr(0, 2000);
    SCOPED_TRACE(std::to_string(B) + "x" + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
    EXPECT_EQ(r.body["template"]["params"]["block_m"], 64);
    EXPECT_EQ(r.body["template"]["params"]["split_k"], split);
    // A kernel that takes M at run time (one batch, M > 1) says its workspace per M, when asked.
    const bool any_m = B == 1 && M > 1;
    EXPECT_EQ(r.body["workspace_bytes"], split > 1 && any_m ? json(nullptr) : json(split > 1 ? int64_t(split) * B * M * N * 4 : 0));
  }
  // The PTX holds the Hopper instructions: the m64n256k16 wgmma, the TMA tile copy and, in a
  // cluster, its multicast; a stage goes back to the peer block by a plain remote arrive (a
  // `.release.cluster` one fences memory on every hand-back and made the kernel 2x slower).
  json big = gemm("float16", 2048, 2048, 512, false, false);
  big["backend"] = "cuda";
  big["template"] = "gemm";
  big["arch"] = "sm_90a";
  big["params"] = {{"mma", "wgmma"}, {"cluster_m", 2}};
  auto rr = post_json(*server_, "/render", big.dump());
  ASSERT_EQ(rr.status, 200) << rr.raw.substr(0, 2000);
  fs::path cu = scratch_->path() / "wg.cu", ptx = scratch_->path() / "wg.ptx";
  ASSERT_TRUE(core::write_file(cu, rr.body["source"].get<std::string>()));
  fs::path nvcc = core::find_program("nvcc", "/usr/local/cuda/bin");
  core::ProcessSpec spec;
  spec.argv = {nvcc.string(), "-std=c++17", "-ptx", "-gencode", "arch=compute_90a,code=compute_90a", "-o", ptx.string(), cu.string()};
  spec.cwd = scratch_->path();
  spec.env = {"PATH=/usr/local/cuda/bin:/usr/bin:/bin", "HOME=" + scratch_->path().string()};
  auto out = core::run_process(spec);
  ASSERT_TRUE(out && out->ok()) << (out ? out->output : "");
  const std::string text = core::read_file(ptx).value();
  EXPECT_NE(text.find("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"), std::string::npos);
  EXPECT_NE(text.find("cp.async.bulk.tensor.3d"), std::string::npos);
  EXPECT_NE(text.find("setmaxnreg"), std::string::npos);
  EXPECT_NE(text.find(".multicast::cluster"), std::string::npos);
  EXPECT_NE(text.find("mbarrier.arrive.shared::cluster.b64"), std::string::npos);
  EXPECT_EQ(text.find("mbarrier.arrive.release.cluster"), std::string::npos);
  json req = gemm("float16", 512, 512, 512, false, false);
  req["backend"] = "cuda";
  req["template"] = "gemm";
  req["arch"] = "sm_90a";

  // What the kernel cannot do is a 400 naming the field.
  auto bad = [&](json body, const std::string& field, const std::string& says) {
    auto r = post_json(*server_, "/render", body.dump());
    EXPECT_EQ(r.status, 400) << body.dump();
    bool named = false;
    for (const auto& e : r.body["errors"]) {
      if (e["field"] == field && e["message"].get<std::string>().find(says) != std::string::npos) named = true;
    }
    EXPECT_TRUE(named) << field << " / " << says << " not in " << r.raw;
  };
  json wg = req;
  wg["params"] = {{"mma", "wgmma"}};  // the rest of the tiling defaults to the wgmma one
  EXPECT_EQ(post_json(*server_, "/render", wg.dump()).status, 200);
  json plain_hopper = wg;
  plain_hopper["arch"] = "sm_90";
  bad(plain_hopper, "/arch", "sm_90a");
  struct ParamCase {
    const char* param;
    int value;
    const char* field;
    const char* says;
  };
  for (const ParamCase& c : {ParamCase{"block_k", 32, "/params/block_k", "must be 64"}, ParamCase{"warps", 4, "/params/warps", "8, 12 or 16"},
                             ParamCase{"warps", 8, "/params/block_n", "accumulators per thread"},
                             ParamCase{"warps", 16, "/params/block_m", "a multiple of 192"},
                             ParamCase{"stages", 6, "/params/stages", "shared memory"}}) {
    json b = wg;
    b["params"][c.param] = c.value;
    bad(b, c.field, c.says);
  }
  json shallow = gemm("float16", 512, 512, 256, false, false);  // 4 K slices: 8 parts would leave 4 with nothing
  shallow["backend"] = "cuda";
  shallow["template"] = "gemm";
  shallow["arch"] = "sm_90a";
  shallow["params"] = {{"mma", "wgmma"}, {"split_k", 8}};
  bad(shallow, "/params/split_k", "at most 4");
  json sync_split = req;  // mma_sync splits K too, in slices of its block_k
  sync_split["params"] = {{"mma", "mma_sync"}, {"split_k", 2}};
  EXPECT_EQ(post_json(*server_, "/render", sync_split.dump()).status, 200);
  json sync_shallow = shallow;
  sync_shallow["params"] = {{"mma", "mma_sync"}, {"block_k", 64}, {"split_k", 8}};
  bad(sync_shallow, "/params/split_k", "at most 4");
  json sync_cluster = req;
  sync_cluster["params"] = {{"mma", "mma_sync"}, {"cluster_m", 2}};
  bad(sync_cluster, "/params/cluster_m", "wgmma");
  json f32 = wg;
  f32["inputs"][0]["dtype"] = f32["inputs"][1]["dtype"] = f32["output"]["dtype"] = "float32";
  bad(f32, "/params/mma", "float16 or bfloat16");
  json f32_split = f32;
  f32_split["params"] = {{"split_k", 2}};
  bad(f32_split, "/params/split_k", "float32 takes 1");
  // A leading dimension TMA cannot take (516: not a multiple of 8) is copied into the workspace
  // first; an operand with no unit stride at all cannot be loaded even so.
  json unaligned = wg;
  unaligned["inputs"][0] = tensor("A", "float16", {512, 512}, {1, 516});  // column-major, leading dimension 516
  auto packed = post_json(*server_, "/render", unaligned.dump());
  ASSERT_EQ(packed.status, 200) << packed.raw.substr(0, 2000);
  EXPECT_NE(packed.body["source"].get<std::string>().find("constexpr bool A_PACKED = true, B_PACKED = false;"), std::string::npos);
  EXPECT_EQ(packed.body["workspace_bytes"], 512 * 512 * 2);  // the copy: 512 columns of 512, dense
  json strided = wg;
  strided["inputs"][0] = tensor("A", "float16", {512, 512}, {1032, 2});
  bad(strided, "/inputs/0/strides", "stride 1");
  // Without params, such a layout falls back to the mma_sync kernel by itself.
  json fallback = req;
  fallback["inputs"][0] = tensor("A", "float16", {512, 512}, {1032, 2});
  auto fb = post_json(*server_, "/kernels", fallback.dump());
  ASSERT_EQ(fb.status, 200) << fb.raw.substr(0, 2000);
  EXPECT_EQ(fb.body["template"]["params"]["mma"], "mma_sync");
}

TEST_F(Gemm, CudaTensorCoreKernelsTakeMAtRunTimeWhereNoStrideDependsOnIt) {
  if (!get(*server_, "/toolchains").body["cuda"].value("available", false)) {
    if (const char* req = std::getenv("KFORGE_REQUIRE_BACKENDS"); req && std::string(req).find("cuda") != std::string::npos) FAIL() << "cuda required";
    GTEST_SKIP() << "no nvcc";
  }
  auto cuda = [](json body, const std::string& arch) {
    body["backend"] = "cuda";
    body["template"] = "gemm";
    body["arch"] = arch;
    return body;
  };
  auto render = [&](const json& body) {
    auto r = post_json(*server_, "/render", body.dump());
    EXPECT_EQ(r.status, 200) << r.raw.substr(0, 2000);
    return r.body;
  };
  auto m_arg = [](const json& abi) {
    for (const auto& a : abi["args"]) {
      if (a["name"] == "M") return a;
    }
    return json();
  };
  // Row-major A and C, one batch: the Hopper default, its split-K default for few rows, and
  // mma_sync render one source for every M (so one key and one compile), without kM; the ABI's
  // M has no value and the wrappers take it.
  const json residual = tensor("res", "float16", {0, 4096});  // sizes[0] set per M below
  for (auto [arch, M1, M2] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"sm_90a", 2048, 8192}, {"sm_90a", 16, 24}, {"sm_80", 100, 3000}}) {
    SCOPED_TRACE(arch + " M " + std::to_string(M1) + " and " + std::to_string(M2));
    auto at = [&](int64_t M) {
      json b = cuda(gemm("float16", M, 4096, 4096, false, false), arch);
      json res = residual;
      res["sizes"][0] = M;
      b["inputs"].push_back(tensor("bias", "float32", {4096}));
      b["inputs"].push_back(res);
      b["epilogue"] = {{{"op", "add"}, {"input", 2}}, {{"op", "mul"}, {"input", 3}}};
      return render(b);
    };
    const json a = at(M1), b = at(M2);
    EXPECT_EQ(a["key"], b["key"]);
    EXPECT_EQ(a["source"], b["source"]);
    EXPECT_EQ(a["template"]["params"], b["template"]["params"]);
    EXPECT_FALSE(m_arg(a["abi"]).contains("value")) << a["abi"].dump();
    EXPECT_EQ(m_arg(a["abi"])["kind"], "scalar");
    EXPECT_EQ(a["source"].get<std::string>().find("kM"), std::string::npos);
    EXPECT_NE(a["source"].get<std::string>().find("M > (int64_t(1) << 31) - 256"), std::string::npos);
    EXPECT_NE(a["wrapper"]["python"].get<std::string>().find("M, N=4096, K=4096, batch=1"), std::string::npos)
        << a["wrapper"]["python"];
    // The tensors' layouts name M where the caller's tensors have M rows (issue 40): A, C and
    // the residual; B and the bias (broadcast over M) are fixed.
    std::map<std::string, json> sizes;
    for (const auto& arg : a["abi"]["args"])
      if (arg["kind"] == "tensor") sizes[arg["binds"]] = arg["sizes"];
    EXPECT_EQ(sizes["A"], json({"M", 4096}));
    EXPECT_EQ(sizes["B"], json({4096, 4096}));
    EXPECT_EQ(sizes["bias"], json({4096}));
    EXPECT_EQ(sizes["res"], json({"M", 4096}));
    EXPECT_EQ(sizes["C"], json({"M", 4096}));
    EXPECT_NE(a["wrapper"]["python"].get<std::string>().find("_pointer(\"A\", A, \"float16\", (M, 4096), (4096, 1), 0, False)"),
              std::string::npos)
        << a["wrapper"]["python"];
  }
  // Where a stride depends on M, or the kernel is not a tensor-core one, M stays fixed: one
  // row (its stride says nothing), a batch (the batch strides are M x K and M x N), A
  // column-major (its K stride is M), an epilogue input whose M dimension is not outermost,
  // float32 (the SIMT kernel) and the cpu.
  json one_row = cuda(gemm("float16", 1, 4096, 4096, false, false), "sm_90a");
  json batched = cuda(gemm("float16", 256, 512, 256, false, false), "sm_90a");
  batched["inputs"] = {tensor("A", "float16", {2, 256, 256}), tensor("B", "float16", {2, 256, 512})};
  batched["output"] = tensor("C", "float16", {2, 256, 512});
  json a_colmajor = cuda(gemm("float16", 256, 512, 256, true, false), "sm_90a");
  json transposed_input = cuda(gemm("float16", 256, 512, 256, false, false), "sm_90a");
  transposed_input["inputs"].push_back(tensor("res", "float16", {256, 512}, {1, 256}));
  transposed_input["epilogue"] = {{{"op", "add"}, {"input", 2}}};
  json f32 = cuda(gemm("float32", 256, 512, 256, false, false), "sm_90a");
  json cpu = gemm("float32", 256, 512, 256, false, false);
  cpu["backend"] = "cpu";
  cpu["template"] = "gemm";
  for (const auto& [what, body] : std::vector<std::pair<std::string, json>>{
           {"one row", one_row}, {"batched", batched}, {"A column-major", a_colmajor}, {"transposed epilogue input", transposed_input},
           {"float32", f32}, {"cpu", cpu}}) {
    const json r = render(body);
    EXPECT_EQ(m_arg(r["abi"]).value("value", int64_t(-1)), body["output"]["sizes"][body["output"]["sizes"].size() - 2].get<int64_t>())
        << what << ": " << r["abi"].dump();
    EXPECT_NE(r["source"].get<std::string>().find("kM = "), std::string::npos) << what;
  }
  // The cache: a kernel built for one M is a hit for another, and its manifest says M is open.
  json first = cuda(gemm("float16", 96, 136, 72, false, false), "sm_80");
  first["params"] = {{"block_m", 64}, {"block_n", 64}, {"block_k", 32}, {"warps", 4}, {"stages", 2}, {"mma", "mma_sync"}};
  json second = first;
  second["inputs"][0]["sizes"][0] = 333;
  second["inputs"][0].erase("strides");
  second["output"]["sizes"][0] = 333;
  second["output"].erase("strides");
  auto r1 = post_json(*server_, "/kernels", first.dump());
  ASSERT_EQ(r1.status, 200) << r1.raw.substr(0, 3000);
  EXPECT_EQ(r1.body["cache"], "miss");
  auto r2 = post_json(*server_, "/kernels", second.dump());
  ASSERT_EQ(r2.status, 200) << r2.raw.substr(0, 3000);
  EXPECT_EQ(r2.body["cache"], "hit");
  EXPECT_EQ(r2.body["key"], r1.body["key"]);
  EXPECT_FALSE(m_arg(r2.body["abi"]).contains("value"));
  EXPECT_EQ(r2.body["workspace_bytes"], 0);
}

TEST_F(Gemm, RocmCasesCompileAndGfx90aFloat16UsesMfma) {
  if (!get(*server_, "/toolchains").body["rocm"].value("available", false)) {
    if (const char* req = std::getenv("KFORGE_REQUIRE_BACKENDS"); req && std::string(req).find("rocm") != std::string::npos) FAIL() << "rocm required";
    GTEST_SKIP() << "no hipcc";
  }
  std::string f16_key;
  for (const char* dt : {"float16", "bfloat16", "float32"}) {
    for (int layout : {0, 3}) {
      json req = gemm(dt, 127, 253, 61, layout / 2, layout % 2);
      req["backend"] = "rocm";
      req["template"] = "gemm";
      req["arch"] = {"gfx90a", "gfx1030"};
      req["epilogue"] = {{{"op", "gelu"}}};
      auto r = post_json(*server_, "/kernels", req.dump());
      ASSERT_EQ(r.status, 200) << dt << r.raw.substr(0, 3000);
      std::set<std::string> archs;
      for (const auto& o : r.body["code_objects"]) archs.insert(o["arch"]);
      EXPECT_EQ(archs, (std::set<std::string>{"gfx90a", "gfx1030"}));
      if (std::string(dt) == "float16" && layout == 0) f16_key = r.body["key"];
    }
  }
  // Unbundle the gfx90a code object and disassemble it with Debian's LLVM.
  auto so = get(*server_, "/kernels/" + f16_key + "/artifact");
  fs::path path = scratch_->path() / "mfma.so";
  ASSERT_TRUE(core::write_file(path, so.raw));
  const std::string llvm = "/usr/lib/llvm-15/bin";
  fs::path fb = scratch_->path() / "fb.bin", co = scratch_->path() / "gfx90a.co";
  ASSERT_FALSE(disassemble({"/usr/bin/objcopy", "--dump-section", ".hip_fatbin=" + fb.string(), path.string()}).find("error") != std::string::npos);
  disassemble({llvm + "/clang-offload-bundler", "--unbundle", "--type=o", "--input=" + fb.string(),
               "--targets=hipv4-amdgcn-amd-amdhsa--gfx90a", "--output=" + co.string()});
  ASSERT_TRUE(fs::exists(co));
  std::string dis = disassemble({llvm + "/llvm-objdump", "-d", "--mcpu=gfx90a", co.string()});
  EXPECT_NE(dis.find("v_mfma_f32_16x16x16f16"), std::string::npos);
  // And the gfx1030 object, without MFMA hardware, has none.
  fs::path co2 = scratch_->path() / "gfx1030.co";
  disassemble({llvm + "/clang-offload-bundler", "--unbundle", "--type=o", "--input=" + fb.string(),
               "--targets=hipv4-amdgcn-amd-amdhsa--gfx1030", "--output=" + co2.string()});
  std::string dis2 = disassemble({llvm + "/llvm-objdump", "-d", "--mcpu=gfx1030", co2.string()});
  EXPECT_FALSE(dis2.empty());
  EXPECT_EQ(dis2.find("v_mfma"), std::string::npos);
}

}  // namespace
}  // namespace kforge::testing
