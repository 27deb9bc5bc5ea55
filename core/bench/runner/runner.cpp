// The runner protocol (DESIGN §7), shared by every runner program: JSON request on stdin,
// JSON results, one line per kernel, on fd 3 (a pipe the service opens; stdout when fd 3 is
// not open, for running a runner by hand), exit 0 unless the request itself was malformed.
// stdout and stderr are the kernel's: whatever it prints there is log, never a result. The
// runner moves fd 3 to a close-on-exec descriptor before it loads any kernel. The kernel
// still runs in this process and could find that descriptor, which is why the service marks
// timings of source-mode kernels as untrusted, and never runs one beside another kernel
// (docs/SECURITY.md).
//
// request := {"mode": "probe"}
//          | {"mode": "bench", ("artifact": path, "abi": Abi | "kernels": [{"artifact", "abi"}...]),
//             "tensors": [TensorMeta...],
//             "scalars": {name: int}?, "reference": {"artifact", "abi", "outputs_file"?}?,
//             "vendor": VendorGemm?, "warmup_ms": 25, "budget_ms": 100, "min_iters": 5,
//             "max_iters": 1000, "seed": 0, "rtol": x, "atol": x, "inputs_file": path?}
// (outputs_file, inputs_file: where an autotune's runners save and reuse the reference's
// outputs and the seeded inputs, which are the same for every choice)
// Every kernel of a request runs on the same tensors (their initial contents restored before
// each), against one reference computation; the vendor's call, where asked, is timed with each
// kernel, interleaved with it round by round, on a GPU (time_together); on the CPU once, after
// the last kernel, so that no kernel is timed while OpenBLAS's threads still spin.
// One result line per kernel, in order; the runner stops after a failed
// one (the device may be in an error state), and the service starts another for the rest.
// result  := {"status": "ok", "device", "min_ms", "median_ms", "p90_ms", "iters", "workspace_bytes",
//             "phases_ms": {"device_init", "inputs", "reference", "first_call", "verify", "timing", "vendor"},
//             "verify"?: {"max_abs_err", "max_rel_err", "passed", "rtol", "atol", "scale", "checked"},
//             "vendor"?: {"name", "min_ms", "median_ms", "p90_ms", "iters", "order", "epilogue"?, "asked_epilogue"}
//                        | {"status": "unavailable", "reason", "asked_epilogue"},
//             "vs_vendor"?: vendor median / kernel median}
//          | {"status": "failed", "reason"} | {"status": "unavailable", "reason"}
// (device_init is the first kernel's; inputs is the later kernels' restore; reference is the
// reference's run, or the read of its saved outputs, in the first kernel's; vendor is the
// setting up of the vendor's call, whose timing is in timing.) A kernel that
// crashes or hangs takes the runner with it; the service reports that for the kernel whose
// line is missing.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <ffi.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include "core/base/abi.hpp"
#include "core/bench/runner/device.hpp"
#include "core/base/fsutil.hpp"
#include "core/base/tensor.hpp"

namespace kforge::runner {
namespace {

using nlohmann::json;
using core::Dtype;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ---- host-side element conversion --------------------------------------------------------
float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
void store(Dtype d, unsigned char* p, double v) {
  switch (d) {
    case Dtype::kFloat32: { float f = float(v); std::memcpy(p, &f, 4); break; }
    case Dtype::kFloat64: std::memcpy(p, &v, 8); break;
    case Dtype::kFloat16: { _Float16 h = _Float16(float(v)); std::memcpy(p, &h, 2); break; }
    case Dtype::kBFloat16: { uint16_t b = float_to_bf16(float(v)); std::memcpy(p, &b, 2); break; }
    case Dtype::kInt8: { int8_t x = int8_t(std::lround(v * 4)); std::memcpy(p, &x, 1); break; }
    case Dtype::kUInt8: { uint8_t x = uint8_t(std::lround(std::abs(v) * 4)); std::memcpy(p, &x, 1); break; }
    case Dtype::kInt32: { int32_t x = int32_t(std::lround(v * 16)); std::memcpy(p, &x, 4); break; }
    case Dtype::kInt64: { int64_t x = int64_t(std::lround(v * 16)); std::memcpy(p, &x, 8); break; }
  }
}
double load(Dtype d, const unsigned char* p) {
  switch (d) {
    case Dtype::kFloat32: { float f; std::memcpy(&f, p, 4); return f; }
    case Dtype::kFloat64: { double x; std::memcpy(&x, p, 8); return x; }
    case Dtype::kFloat16: { _Float16 h; std::memcpy(&h, p, 2); return double(float(h)); }
    case Dtype::kBFloat16: { uint16_t b; std::memcpy(&b, p, 2); return bf16_to_float(b); }
    case Dtype::kInt8: { int8_t x; std::memcpy(&x, p, 1); return x; }
    case Dtype::kUInt8: { uint8_t x; std::memcpy(&x, p, 1); return x; }
    case Dtype::kInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case Dtype::kInt64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
  }
  return 0;
}

// ---- one loaded kernel, callable through libffi --------------------------------------------
ffi_type* ffi_for(const core::AbiArg& a) {
  if (a.kind != core::ArgKind::kScalar) return &ffi_type_pointer;
  std::string t = a.ctype;
  if (t.starts_with("const ")) t = t.substr(6);
  if (t == "int64_t" || t == "long" || t == "long long" || t == "ptrdiff_t" || t == "index_t") return &ffi_type_sint64;
  if (t == "uint64_t" || t == "size_t") return &ffi_type_uint64;
  if (t == "int" || t == "int32_t") return &ffi_type_sint32;
  if (t == "unsigned" || t == "unsigned int" || t == "uint32_t") return &ffi_type_uint32;
  if (t == "int16_t") return &ffi_type_sint16;
  if (t == "uint16_t") return &ffi_type_uint16;
  if (t == "int8_t") return &ffi_type_sint8;
  if (t == "uint8_t" || t == "bool") return &ffi_type_uint8;
  if (t == "float") return &ffi_type_float;
  if (t == "double") return &ffi_type_double;
  throw Failure("scalar argument `" + a.name + "` has a type the runner cannot pass: " + a.ctype);
}

struct Scalar {  // storage for one scalar argument value, of any width
  union { int64_t i64; uint64_t u64; int32_t i32; uint32_t u32; int16_t i16; uint16_t u16; int8_t i8; uint8_t u8; float f; double d; };
};

class Kernel {
 public:
  Kernel(const std::string& path, const json& abi_json, const json& scalar_values) {
    auto abi = core::Abi::from_json(abi_json);
    if (!abi) throw Failure(abi.error().message);
    abi_ = *abi;
    // Never unloaded: OpenMP or GPU runtime threads may still run code from it.
    handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!handle_) throw Failure(std::string("dlopen: ") + ::dlerror());
    fn_ = ::dlsym(handle_, abi_.symbol.c_str());
    if (!fn_) throw Failure("the artifact does not export " + abi_.symbol);
    for (const auto& a : abi_.args) types_.push_back(ffi_for(a));
    if (ffi_prep_cif(&cif_, FFI_DEFAULT_ABI, unsigned(types_.size()), &ffi_type_sint32, types_.data()) != FFI_OK) {
      throw Failure("ffi_prep_cif failed");
    }
    scalars_.resize(abi_.args.size());
    for (size_t i = 0; i < abi_.args.size(); ++i) {
      const auto& a = abi_.args[i];
      if (a.kind != core::ArgKind::kScalar) continue;
      std::optional<double> v;
      if (a.value) v = double(*a.value);
      if (scalar_values.contains(a.name)) v = scalar_values[a.name].get<double>();
      if (!v) throw Failure("no value for scalar argument `" + a.name + "` (give benchmark.scalars)");
      Scalar& s = scalars_[i];
      ffi_type* t = types_[i];
      if (t == &ffi_type_sint64) s.i64 = int64_t(*v);
      else if (t == &ffi_type_uint64) s.u64 = uint64_t(*v);
      else if (t == &ffi_type_sint32) s.i32 = int32_t(*v);
      else if (t == &ffi_type_uint32) s.u32 = uint32_t(*v);
      else if (t == &ffi_type_sint16) s.i16 = int16_t(*v);
      else if (t == &ffi_type_uint16) s.u16 = uint16_t(*v);
      else if (t == &ffi_type_sint8) s.i8 = int8_t(*v);
      else if (t == &ffi_type_uint8) s.u8 = uint8_t(*v);
      else if (t == &ffi_type_float) s.f = float(*v);
      else s.d = *v;
    }
  }
  const core::Abi& abi() const { return abi_; }

  // Calls with the given tensor pointers (by binds name); workspace_size non-null = query.
  int call(const std::map<std::string, void*>& tensors, size_t* workspace_size, void* workspace, void* stream) {
    std::vector<void*> ptrs(abi_.args.size());
    std::vector<void*> values(abi_.args.size());
    for (size_t i = 0; i < abi_.args.size(); ++i) {
      const auto& a = abi_.args[i];
      switch (a.kind) {
        case core::ArgKind::kTensor: {
          auto it = tensors.find(a.binds);
          ptrs[i] = it == tensors.end() ? nullptr : it->second;
          values[i] = &ptrs[i];
          break;
        }
        case core::ArgKind::kScalar: values[i] = &scalars_[i]; break;
        case core::ArgKind::kWorkspaceSize: ptrs[i] = workspace_size; values[i] = &ptrs[i]; break;
        case core::ArgKind::kWorkspace: ptrs[i] = workspace; values[i] = &ptrs[i]; break;
        case core::ArgKind::kStream: ptrs[i] = stream; values[i] = &ptrs[i]; break;
      }
    }
    ffi_sarg rc = 0;
    ffi_call(&cif_, FFI_FN(fn_), &rc, values.data());
    return int(int32_t(rc));
  }

 private:
  core::Abi abi_;
  void* handle_ = nullptr;
  void* fn_ = nullptr;
  ffi_cif cif_{};
  std::vector<ffi_type*> types_;
  std::vector<Scalar> scalars_;
};

// ---- tensors ------------------------------------------------------------------------------
struct Buffer {
  core::TensorMeta meta;
  size_t bytes = 0;
  DeviceMemory dev;
  std::vector<unsigned char> host;  // the initial contents
};

size_t storage_bytes(const core::TensorMeta& t) { return size_t(t.storage_elements()) * core::dtype_size(t.dtype); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The statistics of one function's timed runs.
json stats(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t p90 = (t.size() * 9 + 9) / 10 - 1;  // the smallest time that 90% of the runs do not exceed
  return {{"min_ms", t.front()}, {"median_ms", median(t)}, {"p90_ms", t[std::min(p90, t.size() - 1)]}, {"iters", t.size()}};
}

// Inductor's benchmarker: warm up, estimate, size the loop to a budget, flush L2 before
// each timed run, report min and median. The loop also stops once its wall time (flushes
// included) passes max_wall_ms, so a microsecond kernel does not spend minutes flushing.
// Several functions (a kernel and the vendor's call) are timed together where the device
// interleaves them: each round runs every one once, starting one further along each round,
// so that they share the GPU's clocks and none always follows the same other. The estimate
// that sizes the loop is the median warm-up call of the slowest function: the mean let
// cuBLAS's first call, which loads its kernels, cut its loop to 5 calls at the top clocks
// against the kernel's 500, and fp16 4096^3 read 0.92x cuBLAS where it reads 0.98x timed
// together (docs/BENCHMARKS.md).
std::vector<json> time_together(Device& dev, const std::vector<std::function<void()>>& fns, const json& req) {
  if (fns.size() > 1 && !dev.interleaves()) {  // one after the other
    std::vector<json> out;
    for (const auto& fn : fns) out.push_back(time_together(dev, {fn}, req).front());
    return out;
  }
  const double warmup_ms = req.value("warmup_ms", 25.0), budget_ms = req.value("budget_ms", 100.0);
  const int min_iters = req.value("min_iters", 5), max_iters = req.value("max_iters", 1000);
  const size_t n = fns.size();
  std::vector<std::vector<double>> warm(n);
  double spent = 0;
  while (warm[0].size() < 3 || (spent < warmup_ms * double(n) && warm[0].size() < 1000)) {
    for (size_t f = 0; f < n; ++f) {
      warm[f].push_back(dev.time_ms(fns[f]));
      spent += warm[f].back();
    }
  }
  double estimate = 1e-4;
  for (const auto& w : warm) estimate = std::max(estimate, median(w));
  const int iters = std::clamp(int(budget_ms / estimate), min_iters, max_iters);
  const double max_wall_ms = req.value("max_wall_ms", std::max(2000.0, 10 * budget_ms)) * double(n);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::vector<double>> times(n);
  for (int i = 0; i < iters; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const size_t f = (size_t(i) + j) % n;
      dev.flush_l2();
      times[f].push_back(dev.time_ms(fns[f]));
    }
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i + 1 >= min_iters && wall > max_wall_ms) break;
  }
  dev.sync();
  std::vector<json> out;
  for (auto& t : times) out.push_back(stats(std::move(t)));
  return out;
}

// Milliseconds since the last call, for the phases a result reports.
class PhaseClock {
 public:
  double lap() {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// Runs fn(c) for every chunk c in [0, chunks) on all cores at once.
template <class F>
void on_every_core(size_t chunks, F&& fn) {
  const size_t threads = std::min<size_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (size_t c = 0; c < chunks; ++c) fn(c);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t c = t; c < chunks; c += threads) fn(c);
    });
  }
  for (auto& th : pool) th.join();
}

constexpr size_t kChunk = size_t(1) << 20;  // elements per piece of work for one core

// Fills `bytes` of `dtype` elements with standard normal values. The elements come in chunks of
// 2^20, each drawn from its own generator seeded by (seed, tensor, chunk), so the values depend
// on the seed and the shapes only; the chunks are filled by all cores at once (one thread drew
// 48 Mi fp16 values in 2.2 s, most of a 4096^3 choice's benchmark on an H100).
void fill_normal(core::Dtype dtype, unsigned char* host, size_t bytes, uint64_t seed, uint64_t tensor) {
  const size_t es = core::dtype_size(dtype), n = bytes / es;
  on_every_core((n + kChunk - 1) / kChunk, [&](size_t c) {
    std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(tensor), uint32_t(c), uint32_t(c >> 32)};
    std::mt19937_64 rng(seq);
    std::normal_distribution<double> normal(0.0, 1.0);
    const size_t end = std::min(n, (c + 1) * kChunk);
    for (size_t e = c * kChunk; e < end; ++e) store(dtype, host + e * es, normal(rng));
  });
}

// Calls fn(byte offset) for the elements [first, last) of the tensor's own elements (not the
// gaps of a strided view), in row-major order of the sizes.
template <typename F>
void for_each_element(const core::TensorMeta& m, int64_t first, int64_t last, F&& fn) {
  std::vector<int64_t> idx(m.rank(), 0);  // element `first`
  for (int64_t rest = first, i = int64_t(m.rank()) - 1; i >= 0; --i) {
    idx[size_t(i)] = rest % m.sizes[size_t(i)];
    rest /= m.sizes[size_t(i)];
  }
  for (int64_t k = first; k < last; ++k) {
    int64_t e = m.offset;
    for (size_t i = 0; i < m.rank(); ++i) e += idx[i] * m.strides[i];
    fn(size_t(e) * core::dtype_size(m.dtype));
    for (size_t i = m.rank(); i-- > 0;) {
      if (++idx[i] < m.sizes[i]) break;
      idx[i] = 0;
    }
  }
}

// A kernel's output against the reference's, in chunks on every core (one core took 0.44-0.67
// s per 4096^3 fp16 choice of an autotune on an H100, its largest phase). An element passes
// within atol + rtol x max(|reference|, the reference's RMS): an output near zero is the sum
// of terms as large as the others, and rounds as they do (fp16 425x7176x28672: outputs of RMS
// 169 differ by 0.03 between tilings and the reference where the output is 0.002, while
// every tiling agrees with every other).
struct Comparison {
  double max_abs = 0, max_rel = 0, scale = 0;
  int64_t checked = 0, bad = 0;
};
Comparison compare(const core::TensorMeta& m, const unsigned char* got, const unsigned char* want, double rtol, double atol) {
  const int64_t n = m.numel();
  const size_t chunks = n > 0 ? (size_t(n) + kChunk - 1) / kChunk : 0;
  auto range = [&](size_t c) { return std::pair{int64_t(c * kChunk), std::min<int64_t>(n, int64_t((c + 1) * kChunk))}; };
  std::vector<double> squares(chunks, 0.0);
  on_every_core(chunks, [&](size_t c) {
    const auto [first, last] = range(c);
    for_each_element(m, first, last, [&](size_t at) {
      const double w = load(m.dtype, &want[at]);
      squares[c] += w * w;
    });
  });
  double sum = 0;
  for (double q : squares) sum += q;
  const double scale = n > 0 ? std::sqrt(sum / double(n)) : 0.0;
  std::vector<Comparison> part(chunks);
  on_every_core(chunks, [&](size_t c) {
    const auto [first, last] = range(c);
    Comparison& p = part[c];
    for_each_element(m, first, last, [&](size_t at) {
      const double g = load(m.dtype, &got[at]), w = load(m.dtype, &want[at]);
      const double err = std::abs(g - w);
      p.max_abs = std::max(p.max_abs, err);
      if (std::abs(w) > 1e-6) p.max_rel = std::max(p.max_rel, err / std::abs(w));
      if (!(err <= atol + rtol * std::max(std::abs(w), scale))) ++p.bad;
      ++p.checked;
    });
  });
  Comparison all;
  all.scale = scale;
  for (const Comparison& p : part) {
    all.max_abs = std::max(all.max_abs, p.max_abs);
    all.max_rel = std::max(all.max_rel, p.max_rel);
    all.checked += p.checked;
    all.bad += p.bad;
  }
  return all;
}

// Writes `parts` one after the other to `path`, whole or not at all (through path.tmp), for a
// later runner of the same autotune; a file that cannot be written is only a lost shortcut.
// One past the sandbox's file-size limit (RLIMIT_FSIZE: 1 GiB; an autotune of 7675x8192x32768
// has 1 GiB of inputs) is not started: writing past the limit would end in EFBIG (SIGXFSZ is
// ignored, runner_main()) and a half-written .tmp.
void save(const std::string& path, const std::vector<std::string_view>& parts) {
  size_t total = 0;
  for (std::string_view p : parts) total += p.size();
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && total > limit.rlim_cur) return;
  std::ofstream out(path + ".tmp", std::ios::binary);
  for (std::string_view p : parts) out.write(p.data(), std::streamsize(p.size()));
  out.close();
  if (out) {
    std::rename((path + ".tmp").c_str(), path.c_str());
  } else {
    std::remove((path + ".tmp").c_str());
  }
}

// The tensors every kernel of a request runs on: seeded inputs (and an initial output) on
// the device, their host copies, and the reference's outputs for them. Built once per
// runner; each kernel after the first gets the initial contents again (restore), so one
// that writes where it should not cannot change what the next one computes or is
// compared with.
class Workload {
 public:
  Workload(Device& dev, const json& req) : dev_(dev) {
    const uint64_t seed = req.value("seed", uint64_t{0});
    size_t total = 0;
    for (const auto& tj : req.at("tensors")) {
      auto t = core::parse_tensor(tj, "/tensors", true);
      if (!t) throw Failure("tensor: " + t.error().message);
      Buffer b;
      b.meta = *t;
      b.bytes = std::max<size_t>(storage_bytes(*t), 1);
      b.host.resize(b.bytes);
      total += b.bytes;
      auto [it, added] = buffers_.emplace(t->name, std::move(b));
      if (!added) throw Failure("two tensors named `" + t->name + "`");
      in_order_.push_back(&it->second);
    }
    // The inputs depend on the seed and the tensors only: an earlier runner of the same
    // autotune may have saved them (its file starts with that tag), and reading them back is
    // cheaper than drawing them again (0.25 s for a 4096^3 fp16 gemm on an H100).
    const std::string inputs_file = req.value("inputs_file", "");
    const std::string tag = json{{"seed", seed}, {"tensors", req.at("tensors")}}.dump() + "\n";
    std::string saved;  // empty when there is no such file yet
    if (!inputs_file.empty()) saved = core::read_file(inputs_file).value_or(std::string());
    const bool reuse = saved.size() == tag.size() + total && std::equal(tag.begin(), tag.end(), saved.begin());
    size_t at = tag.size();
    uint64_t tensor_index = 0;
    for (Buffer* b : in_order_) {
      if (reuse) {
        std::memcpy(b->host.data(), saved.data() + at, b->bytes);
        at += b->bytes;
      } else {
        fill_normal(b->meta.dtype, b->host.data(), b->bytes, seed, tensor_index++);
      }
      b->dev = DeviceMemory(dev, b->bytes);
    }
    restore();
    if (!inputs_file.empty() && !reuse) {
      std::vector<std::string_view> parts = {tag};
      for (const Buffer* b : in_order_) parts.emplace_back(reinterpret_cast<const char*>(b->host.data()), b->bytes);
      save(inputs_file, parts);
    }
    for (auto& [name, b] : buffers_) ptrs_[name] = b.dev.get();
  }

  // Every tensor's initial contents, on the device again.
  void restore() {
    for (Buffer* b : in_order_) dev_.upload(b->dev.get(), b->host.data(), b->bytes);
  }
  const std::map<std::string, void*>& ptrs() const { return ptrs_; }
  Buffer& buffer(const std::string& name) { return buffers_.at(name); }
  bool has(const std::string& name) const { return buffers_.contains(name); }

  // The reference's outputs (host bytes per written tensor) for these inputs, computed on
  // first use (or loaded from `outputs_file`, where an earlier runner of the same autotune
  // saved them) on copies of the outputs' initial contents.
  const std::map<std::string, std::vector<unsigned char>>& reference(const json& r, const json& scalars,
                                                                    const std::vector<std::string>& outputs) {
    if (reference_ready_) return reference_;
    reference_ready_ = true;
    const std::string saved = r.value("outputs_file", "");
    size_t total = 0;
    for (const auto& o : outputs) total += buffers_.at(o).bytes;
    std::string blob;
    if (!saved.empty()) blob = core::read_file(saved).value_or(std::string());
    if (blob.size() == total && total > 0) {
      size_t at = 0;
      for (const auto& o : outputs) {
        const size_t n = buffers_.at(o).bytes;
        reference_[o].assign(blob.begin() + std::ptrdiff_t(at), blob.begin() + std::ptrdiff_t(at + n));
        at += n;
      }
      return reference_;
    }
    Kernel ref(r.at("artifact").get<std::string>(), r.at("abi"), scalars);
    std::map<std::string, void*> rptrs = ptrs_;
    std::map<std::string, DeviceMemory> copies;
    for (const auto& o : outputs) {
      Buffer& b = buffers_.at(o);
      DeviceMemory copy(dev_, b.bytes);
      dev_.upload(copy.get(), b.host.data(), b.bytes);
      rptrs[o] = copy.get();
      copies.emplace(o, std::move(copy));
    }
    size_t rws = 0;
    if (ref.call({}, &rws, nullptr, dev_.stream()) != 0) throw Failure("the reference's workspace query failed");
    DeviceMemory rworkspace(dev_, rws);
    if (int rr = ref.call(rptrs, nullptr, rworkspace.get(), dev_.stream()); rr != 0) throw Failure("the reference returned " + std::to_string(rr));
    dev_.sync();
    for (const auto& o : outputs) {
      reference_[o].resize(buffers_.at(o).bytes);
      dev_.download(reference_[o].data(), copies.at(o).get(), buffers_.at(o).bytes);
    }
    if (!saved.empty()) {
      std::vector<std::string_view> parts;
      for (const auto& o : outputs) parts.emplace_back(reinterpret_cast<const char*>(reference_[o].data()), reference_[o].size());
      save(saved, parts);
    }
    return reference_;
  }

 private:
  Device& dev_;
  std::map<std::string, Buffer> buffers_;
  std::vector<Buffer*> in_order_;
  std::map<std::string, void*> ptrs_;
  bool reference_ready_ = false;
  std::map<std::string, std::vector<unsigned char>> reference_;
};

// The vendor library's call for the request's gemm, on the workload's tensors, and what it
// is: {"name", "epilogue"?, "asked_epilogue"}, or {"status": "unavailable", ...} without a call.
struct VendorCall {
  std::optional<std::function<void()>> fn;
  json about;
};
VendorCall vendor_call(Device& dev, Workload& w, const json& v) {
  VendorGemm g;
  g.M = v.at("M"), g.N = v.at("N"), g.K = v.at("K"), g.batch = v.value("batch", 1);
  g.dtype = *core::parse_dtype(v.at("dtype").get<std::string>());
  g.out_dtype = *core::parse_dtype(v.value("out_dtype", v.at("dtype").get<std::string>()));
  for (auto [k, dst] : {std::pair{"sAb", &g.sAb}, {"sAm", &g.sAm}, {"sAk", &g.sAk}, {"sBb", &g.sBb}, {"sBk", &g.sBk},
                        {"sBn", &g.sBn}, {"sCb", &g.sCb}, {"sCm", &g.sCm}, {"sCn", &g.sCn}}) {
    *dst = v.at(k).get<int64_t>();
  }
  auto at = [&](const std::string& tensor, int64_t off) {
    Buffer& b = w.buffer(tensor);
    return static_cast<unsigned char*>(b.dev.get()) + off * int64_t(core::dtype_size(b.meta.dtype));
  };
  g.A = at(v.at("a"), v.value("offA", int64_t{0}));
  g.B = at(v.at("b"), v.value("offB", int64_t{0}));
  g.C = at(v.at("c"), v.value("offC", int64_t{0}));
  // The epilogue the library fuses where it can; else the plain gemm, saying that the
  // epilogue is not in its time. "asked_epilogue" tells a stored result what it answered.
  const json asked = v.value("epilogue", json());
  std::string why, fused, not_fused;
  if (asked.is_object()) {
    g.epilogue = asked.value("ops", "");
    if (asked.contains("bias")) g.bias = at(asked.at("bias"), asked.value("offset", int64_t{0}));
    if (auto fn = dev.vendor_fused_gemm(g, fused, not_fused)) {
      return {std::move(fn), {{"name", fused}, {"epilogue", "fused"}, {"asked_epilogue", asked}}};
    }
    g.epilogue.clear();
    g.bias = nullptr;
  }
  if (auto fn = dev.vendor_gemm(g, why)) {
    json about = {{"name", dev.vendor_name()}, {"asked_epilogue", asked}};
    if (asked.is_object()) about["epilogue"] = "not included: " + not_fused;
    return {std::move(fn), std::move(about)};
  }
  return {std::nullopt, {{"status", "unavailable"}, {"name", dev.vendor_name()}, {"reason", why}, {"asked_epilogue", asked}}};
}

// One kernel of the request ({"artifact", "abi"}) on the workload: first call, verification
// against the reference, timing, and the vendor's time where `vendor` is asked of it.
json bench_one(Device& dev, Workload& w, const json& k, const json& req, bool vendor, PhaseClock& clock, json phases) {
  const json scalars = req.value("scalars", json::object());
  Kernel kernel(k.at("artifact").get<std::string>(), k.at("abi"), scalars);
  for (const auto* a : kernel.abi().tensors()) {
    if (!w.has(a->binds)) throw Failure("no tensor named `" + a->binds + "` for argument `" + a->name + "`");
  }
  // Outputs: the tensors the kernel writes (non-const pointers).
  std::vector<std::string> outputs;
  for (const auto* a : kernel.abi().tensors()) {
    if (!a->is_const) outputs.push_back(a->binds);
  }
  // The reference's outputs, computed (once) before any kernel has run on the inputs.
  const std::map<std::string, std::vector<unsigned char>>* want = nullptr;
  if (req.contains("reference")) {
    want = &w.reference(req["reference"], scalars, outputs);
    phases["reference"] = clock.lap();
  }
  // The workspace query touches no tensor: pass none.
  size_t ws = 0;
  int rc = kernel.call({}, &ws, nullptr, dev.stream());
  if (rc != 0) return {{"status", "failed"}, {"reason", "the workspace query returned " + std::to_string(rc)}};
  DeviceMemory workspace(dev, ws);

  rc = kernel.call(w.ptrs(), nullptr, workspace.get(), dev.stream());
  dev.sync();
  if (rc != 0) return {{"status", "failed"}, {"reason", "the kernel returned " + std::to_string(rc)}};

  json out = {{"status", "ok"}, {"device", dev.describe()}, {"workspace_bytes", ws}};
  phases["first_call"] = clock.lap();

  if (want) {
    double max_abs = 0, max_rel = 0, scale = 0;
    int64_t checked = 0, bad = 0;
    double rtol = req.value("rtol", -1.0), atol = req.value("atol", -1.0);
    for (const auto& o : outputs) {
      Buffer& b = w.buffer(o);
      std::vector<unsigned char> got(b.bytes);
      dev.download(got.data(), b.dev.get(), b.bytes);
      const Dtype d = b.meta.dtype;
      if (rtol < 0) rtol = d == Dtype::kFloat32 ? 1e-4 : d == Dtype::kFloat16 ? 2e-3 : d == Dtype::kBFloat16 ? 1.6e-2 : 1e-6;
      if (atol < 0) atol = d == Dtype::kFloat32 ? 1e-4 : d == Dtype::kFloat16 ? 1e-2 : d == Dtype::kBFloat16 ? 5e-2 : 1e-6;
      const Comparison c = compare(b.meta, got.data(), want->at(o).data(), rtol, atol);
      max_abs = std::max(max_abs, c.max_abs);
      max_rel = std::max(max_rel, c.max_rel);
      scale = std::max(scale, c.scale);
      checked += c.checked;
      bad += c.bad;
    }
    out["verify"] = {{"max_abs_err", max_abs}, {"max_rel_err", max_rel}, {"passed", bad == 0}, {"mismatches", bad},
                     {"checked", checked}, {"rtol", rtol}, {"atol", atol}, {"scale", scale}, {"against", "reference"}};
    phases["verify"] = clock.lap();
  }

  // The kernel, and the vendor's call where asked and available, timed together.
  std::vector<std::function<void()>> fns = {[&] { kernel.call(w.ptrs(), nullptr, workspace.get(), dev.stream()); }};
  VendorCall vc;
  if (vendor) {
    vc = vendor_call(dev, w, req["vendor"]);
    if (vc.fn) fns.push_back(*vc.fn);
    phases["vendor"] = clock.lap();
  }
  std::vector<json> timed = time_together(dev, fns, req);
  out.update(timed[0]);
  phases["timing"] = clock.lap();
  if (vendor) {
    out["vendor"] = vc.about;
    if (vc.fn) {
      out["vendor"].update(timed[1]);
      // Round by round with the kernel, or after it (what a stored result answers).
      out["vendor"]["order"] = dev.interleaves() ? "interleaved" : "after the kernel";
      out["vs_vendor"] = timed[1]["median_ms"].get<double>() / std::max(out["median_ms"].get<double>(), 1e-9);
    }
  }
  out["phases_ms"] = phases;
  return out;
}

}  // namespace

// Takes the result channel (fd 3) away from where a kernel would look for it first.
int take_result_fd() {
  if (::fcntl(3, F_GETFD) == -1) return -1;
  const int fd = ::fcntl(3, F_DUPFD_CLOEXEC, 100);
  ::close(3);
  return fd;
}

// One result line, written whole before the next kernel runs (a kernel that crashes the
// runner later leaves the lines before it intact).
void write_line(int fd, const json& out) {
  const std::string line = out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (fd < 0) {
    std::cout << line << std::flush;
    return;
  }
  std::cout.flush();
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
}

int runner_main() {
  // A write past RLIMIT_FSIZE fails (EFBIG) instead of killing the runner: its files are shortcuts.
  std::signal(SIGXFSZ, SIG_IGN);
  const int result_fd = take_result_fd();
  struct CloseAtExit {
    int fd;
    ~CloseAtExit() {
      if (fd >= 0) ::close(fd);
    }
  } close_at_exit{result_fd};
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  json req = json::parse(ss.str(), nullptr, false);
  if (req.is_discarded() || !req.is_object()) {
    write_line(result_fd, {{"status", "failed"}, {"reason", "the runner's request is not JSON"}});
    return 2;
  }
  // The kernels to run: "kernels", or the request's own artifact and abi.
  json kernels = req.value("kernels", json::array());
  if (kernels.empty() && req.contains("artifact")) kernels.push_back({{"artifact", req["artifact"]}, {"abi", req.value("abi", json())}});
  const size_t answers = std::max<size_t>(kernels.size(), 1);  // lines owed: one a kernel, one for none
  size_t done = 0;
  try {
    PhaseClock clock;
    Device& dev = device();
    json d = dev.describe();
    const double init_ms = clock.lap();
    if (req.value("mode", "bench") == "probe") {
      write_line(result_fd, d);
      return 0;
    }
    if (!d.value("available", false)) {
      for (; done < answers; ++done) write_line(result_fd, {{"status", "unavailable"}, {"reason", d.value("reason", "no device")}});
      return 0;
    }
    if (kernels.empty()) throw Failure("no kernel to run (give artifact and abi, or kernels)");
    Workload work(dev, req);
    const bool vendor = req.contains("vendor");
    for (; done < kernels.size(); ++done) {
      json out;
      try {
        if (done > 0) work.restore();
        const json phases = {{"device_init", done == 0 ? init_ms : 0.0}, {"inputs", clock.lap()}};
        const bool with_vendor = vendor && (dev.interleaves() || done + 1 == kernels.size());
        out = bench_one(dev, work, kernels[done], req, with_vendor, clock, phases);
      } catch (const std::exception& e) {
        out = {{"status", "failed"}, {"reason", e.what()}};
      }
      write_line(result_fd, out);
      // A failed kernel may have left the device in an error state: the service starts
      // another runner for the kernels after it.
      if (out.value("status", "") == "failed") return 0;
    }
  } catch (const std::exception& e) {
    // The device or the workload failed before any kernel ran: that answers for every kernel.
    for (size_t i = done; i < answers; ++i) write_line(result_fd, {{"status", "failed"}, {"reason", e.what()}});
  }
  return 0;
}

}  // namespace kforge::runner

// Under AddressSanitizer (CI's second build) a kernel's fault must still end the runner by
// its signal, as in a normal build, so the service reports the crash the same way.
extern "C" __attribute__((used, visibility("default"))) const char* __asan_default_options() {
  return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0";
}

int main() { return kforge::runner::runner_main(); }
