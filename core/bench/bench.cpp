#include "core/bench/bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "core/base/tensor.hpp"
#include "core/templates/gemm_problem.hpp"
#include "core/base/utf8.hpp"

namespace kforge::core {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

size_t index_of(Backend b) { return static_cast<size_t>(b); }

// The template a run is for: the request's, else the one the manifest was built for.
const json& template_of(const json& manifest, const BenchOptions& o) {
  static const json kNone;
  if (o.problem.is_object()) return o.problem;
  const auto it = manifest.find("template");
  return it != manifest.end() ? *it : kNone;
}

// The gemm problem of a template spec (as the manifest and request store it), if it is a gemm.
std::optional<templates::GemmProblem> gemm_of(const json& t) {
  if (!t.is_object() || t.value("template", "") != "gemm") return std::nullopt;
  TemplateSpec spec;
  for (const auto& in : t["inputs"]) spec.inputs.push_back(*parse_tensor(in, "", true));
  spec.output = *parse_tensor(t["output"], "", true);
  return templates::gemm_problem(spec);
}

// Whether the ABI has a size the caller gives at run time (no fixed value).
bool has_runtime_scalars(const json& abi) {
  return std::any_of(abi["args"].begin(), abi["args"].end(), [](const json& a) { return a["kind"] == "scalar" && !a.contains("value"); });
}

// The epilogue of template spec `t` as a vendor library fuses one (cuBLASLt's epilogues): an
// optional bias over N (an [N] or [1, N] vector in the output's dtype, added first), then an
// optional gelu or relu. {"ops": "bias_gelu", "bias": name, "offset": n}, or null where the
// epilogue is anything else and the baseline can only be the plain gemm.
json vendor_epilogue(const json& t) {
  const json& ops = t.value("epilogue", json::array());
  if (ops.empty()) return nullptr;
  json out = json::object();
  size_t i = 0;
  const int input = ops[0].value("input", -1);
  if (ops[0].value("op", "") == "add" && input >= 0 && size_t(input) < t["inputs"].size()) {
    const json& bias = t["inputs"][size_t(input)];
    const json& sizes = bias["sizes"];
    const int64_t n = t["output"]["sizes"].back().get<int64_t>();
    const bool vector = (sizes.size() == 1 || (sizes.size() == 2 && sizes[0] == 1)) && sizes.back() == n;
    if (!vector || (n > 1 && bias["strides"].back() != 1) || bias["dtype"] != t["output"]["dtype"]) return nullptr;
    out = {{"ops", "bias"}, {"bias", bias["name"]}, {"offset", bias.value("offset", int64_t{0})}};
    ++i;
  }
  if (i < ops.size()) {
    const std::string op = ops[i].value("op", "");
    if (op != "gelu" && op != "relu") return nullptr;
    out["ops"] = out.contains("ops") ? "bias_" + op : op;
    if (op == "gelu") out["gelu"] = ops[i].value("approximate", "none") == "tanh" ? "tanh" : "erf";
    ++i;
  }
  return i == ops.size() ? out : json(nullptr);
}

// The gemm's vendor call: problem `g` of template spec `t`, with the epilogue where the vendor
// library can fuse it.
json vendor_request(const templates::GemmProblem& g, const json& t) {
  json v{{"M", g.M}, {"N", g.N}, {"K", g.K}, {"batch", g.batch}, {"dtype", dtype_name(g.ab)},
         {"out_dtype", dtype_name(g.out)}, {"sAb", g.sAb}, {"sAm", g.sAm}, {"sAk", g.sAk}, {"sBb", g.sBb},
         {"sBk", g.sBk}, {"sBn", g.sBn}, {"sCb", g.sCb}, {"sCm", g.sCm}, {"sCn", g.sCn}, {"offA", g.offA},
         {"offB", g.offB}, {"offC", g.offC}, {"a", t["inputs"][0]["name"]}, {"b", t["inputs"][1]["name"]},
         {"c", t["output"]["name"]}};
  if (json e = vendor_epilogue(t); !e.is_null()) v["epilogue"] = std::move(e);
  return v;
}

// TensorMeta for every tensor argument: the template's own, or the client's (source mode).
std::optional<json> tensors_for(const json& manifest, const BenchOptions& o, std::string& why) {
  json out = json::array();
  if (manifest.contains("template")) {
    const json& t = template_of(manifest, o);
    for (const auto& in : t["inputs"]) out.push_back(in);
    out.push_back(t["output"]);
    return out;
  }
  const json& args = manifest["abi"]["args"];
  size_t next_in = 0;
  for (const auto& a : args) {
    if (a["kind"] != "tensor") continue;
    json meta;
    if (a.value("const", false)) {
      if (!o.inputs.is_array() || next_in >= o.inputs.size()) {
        why = "benchmark.inputs must describe every input tensor of the signature (" + a["name"].get<std::string>() + " is missing)";
        return std::nullopt;
      }
      meta = o.inputs[next_in++];
    } else {
      if (!o.output.is_object()) {
        why = "benchmark.output must describe the output tensor `" + a["name"].get<std::string>() + "`";
        return std::nullopt;
      }
      meta = o.output;
    }
    meta["name"] = a["binds"];  // bound by position, named as the ABI expects
    out.push_back(meta);
  }
  return out;
}

// Whether a result can be believed: a template kernel is kforge's own rendering; a
// source-mode kernel is the client's code, which ran in the runner's process and could
// have written the result itself (docs/SECURITY.md). Its timings are shown to whoever asks
// for that kernel, marked, and never rank anything.
bool trusted_timing(const json& manifest) { return manifest.contains("template"); }

}  // namespace

fs::path executable_dir() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : self.parent_path();
}

BenchOptions BenchOptions::from_json(const json& j) {
  BenchOptions o;
  if (!j.is_object()) return o;
  o.verify = j.value("verify", false);
  o.vendor = j.value("vendor", false);
  o.force = j.value("force", false);
  o.budget_ms = j.value("budget_ms", 100.0);
  o.inputs = j.value("inputs", json());
  o.output = j.value("output", json());
  o.extra_args = j.value("extra_args", json());
  return o;
}

Bencher::Bencher(fs::path runner_dir, storage::DiskTier& store, std::chrono::milliseconds timeout,
                 std::vector<std::string> runner_env, Spawner spawn)
    : runner_dir_(std::move(runner_dir)),
      store_(store),
      timeout_(timeout),
      runner_env_(std::move(runner_env)),
      spawn_(std::move(spawn)) {
  for (Backend b : kAllBackends) {
    json probe = run_runner(b, {{"mode", "probe"}}).front();
    if (!probe.contains("available")) {
      probe = {{"available", false}, {"kind", backend_name(b)}, {"reason", probe.value("reason", "the runner did not answer")}};
    }
    devices_[std::string(backend_name(b))] = probe;
  }
}

bool Bencher::available(Backend b) const {
  return devices_[std::string(backend_name(b))].value("available", false);
}

std::vector<std::string> vendor_env(const CpuIsa& isa) {
  const bool avx512 = isa.has("avx512f") && isa.has("avx512bw") && isa.has("avx512dq") && isa.has("avx512vl") &&
                      isa.has("avx512cd");
  const char* core = avx512                            ? "SkylakeX"
                     : isa.has("avx2") && isa.has("fma") ? "Haswell"
                     : isa.has("avx")                   ? "Sandybridge"
                     : isa.has("sse4.2")                ? "Nehalem"
                                                        : "Prescott";
  return {std::string("OPENBLAS_CORETYPE=") + core};
}

std::vector<json> Bencher::run_runner(Backend b, const json& request, const std::vector<std::string>& env) {
  const fs::path runner = runner_dir_ / ("kforge-runner-" + std::string(backend_name(b)));
  if (::access(runner.c_str(), X_OK) != 0) {
    return {{{"status", "unavailable"}, {"reason", "no runner program " + runner.string() + " (not built on this host)"}}};
  }
  // The runner's own empty directory is all it may write, besides the reference outputs
  // an autotune shares between its runs; it may read the artifacts it is handed.
  auto dir = store_.make_staging();
  if (!dir) return {{{"status", "failed"}, {"reason", dir.error().message}}};
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{*dir};
  const json kernels = request.value("kernels", json::array());
  const size_t expected = std::max<size_t>(kernels.size(), 1);
  ProcessSpec spec;
  spec.argv = {runner.string()};
  spec.cwd = *dir;
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir->string(), "TMPDIR=" + dir->string(), "LANG=C"};
  spec.gpu = b != Backend::kCpu;
  spec.readable = {runner_dir_};
  for (const auto& k : kernels) spec.readable.push_back(fs::path(k.value("artifact", "")).parent_path());
  if (request.contains("reference")) {
    const json& r = request["reference"];
    spec.readable.push_back(fs::path(r.value("artifact", "")).parent_path());
    if (r.contains("outputs_file")) spec.writable.push_back(fs::path(r.value("outputs_file", "")).parent_path());
  }
  if (request.contains("inputs_file")) spec.writable.push_back(fs::path(request.value("inputs_file", "")).parent_path());
  for (const char* pass : {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OMP_NUM_THREADS", "LD_LIBRARY_PATH"}) {
    if (const char* v = std::getenv(pass)) spec.env.push_back(std::string(pass) + "=" + v);
  }
  if (const char* v = std::getenv("LD_LIBRARY_PATH")) {  // the GPU runtime's libraries
    std::string_view rest = v;
    while (!rest.empty()) {
      auto colon = rest.find(':');
      if (colon) spec.readable.emplace_back(rest.substr(0, colon));
      rest = colon == std::string_view::npos ? "" : rest.substr(colon + 1);
    }
  }
  spec.env.insert(spec.env.end(), runner_env_.begin(), runner_env_.end());
  for (const auto& e : env) {
    const std::string name = e.substr(0, e.find('=') + 1);
    if (std::none_of(runner_env_.begin(), runner_env_.end(), [&](const std::string& x) { return x.starts_with(name); }))
      spec.env.push_back(e);
  }
  spec.stdin_data = request.dump();
  spec.timeout = request.value("mode", "") == "probe" ? std::chrono::milliseconds(60000) : timeout_ * int64_t(expected);
  spec.output_cap = 4 << 20;
  spec.result_fd = true;  // the results come over fd 3; stdout and stderr are the kernel's
  auto r = spawn_(spec);
  if (!r) return {{{"status", "failed"}, {"reason", "cannot start the runner: " + r.error().message}}};
  // Whole lines, each one JSON object, one per kernel; a line cut short is where the runner
  // died. The runner writes a kernel's line before it starts the next kernel.
  std::vector<json> answers;
  bool malformed = false;
  for (size_t at = 0; answers.size() < expected;) {
    const size_t nl = r->result.find('\n', at);
    if (nl == std::string::npos) break;
    json j = json::parse(std::string_view(r->result).substr(at, nl - at), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      malformed = true;
      break;
    }
    answers.push_back(std::move(j));
    at = nl + 1;
  }
  // The kernels' printing: any bytes, so cut on a character boundary and made UTF-8.
  std::string out = r->output;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  for (json& j : answers) {
    if (j.value("status", "") == "failed" && !out.empty()) j["output_tail"] = utf8_tail(out, 2000);
  }
  // A runner that exited cleanly answered every kernel, or stopped after a failed one.
  const bool stopped = !answers.empty() && answers.back().value("status", "") == "failed";
  if (r->ok() && !malformed && (answers.size() == expected || stopped)) return answers;
  std::string reason = "the runner " + r->describe();
  if (r->term_signal != 0 || r->timed_out) reason += ": the kernel crashed or hung";
  else if (r->ok() && !malformed && answers.empty()) reason += " without a result: the kernel ended the process before the runner answered";
  else if (r->ok()) reason += malformed ? " with a malformed result" : " before it answered for every kernel";
  answers.push_back({{"status", "failed"}, {"reason", sanitize_utf8(reason)}, {"output_tail", utf8_tail(out, 2000)}});
  return answers;
}

std::vector<json> Bencher::run_all(const std::vector<json>& manifests, const BenchOptions& o, const std::optional<json>& reference) {
  std::vector<json> results(manifests.size());
  struct Pending {
    size_t index;
    Backend backend;
    std::string digest;
    std::string stored;  // the name the result is stored under in its entry
    json shared;  // the runner's request without the kernel: the same for an autotune's choices
    json kernel;  // {"artifact", "abi"}
    json vendor;  // the vendor call asked of this kernel, or null
  };
  std::vector<Pending> pending;
  for (size_t i = 0; i < manifests.size(); ++i) {
    const json& manifest = manifests[i];
    const bool vendor = o.vendor;
    auto backend = parse_backend(manifest.value("backend", ""));
    if (!backend) {
      results[i] = {{"status", "failed"}, {"reason", "manifest without a backend"}};
      continue;
    }
    const json& device = devices_[std::string(backend_name(*backend))];
    if (!device.value("available", false)) {
      results[i] = {{"status", "unavailable"}, {"reason", device.value("reason", "no device for " + std::string(backend_name(*backend)))}};
      continue;
    }
    const std::string digest = sha256_hex(device_identity(std::string(backend_name(*backend))).dump()).substr(0, 16);
    const std::string key = manifest.value("key", "");
    // A result answers for a device and for what ran on it: a template kernel's tensors are
    // its own, a source-mode kernel's are the request's (other tensors: another result).
    // A template kernel that takes M at run time is the same kernel for every M: its result
    // is keyed by the tensors it ran on as well.
    std::string name = digest;
    if (!manifest.contains("template")) {
      const json workload = {{"inputs", o.inputs}, {"output", o.output}, {"extra_args", o.extra_args}};
      name += "-" + sha256_hex(workload.dump()).substr(0, 16);
    } else if (has_runtime_scalars(manifest["abi"])) {
      const json& t = template_of(manifest, o);
      name += "-" + sha256_hex(json{{"inputs", t["inputs"]}, {"output", t["output"]}}.dump()).substr(0, 16);
    }
    const std::string stored = name;  // the entry's benchmark result of that name (DiskTier::bench_result)
    // A template kernel's problem (source mode has none): the gemm's sizes and vendor call,
    // read where a result is to be run or the vendor call asked (the runner times it with every
    // kernel on a GPU; on the CPU after the last one only, so there a stored result of another
    // choice has none and is measured again when a vendor time is asked of it).
    auto gemm_problem = [&] { return manifest.contains("template") ? gemm_of(template_of(manifest, o)) : std::nullopt; };
    const auto vendor_gemm = vendor ? gemm_problem() : std::nullopt;
    const json vendor_req = vendor_gemm ? vendor_request(*vendor_gemm, template_of(manifest, o)) : json();
    if (!o.force) {
      if (auto found = store_.bench_result(key, stored)) {
        json cached = std::move(*found);
        // Reused only when it answers what was asked now: a vendor time for this epilogue, taken
        // with the kernel's (`order`; older results timed it once, with an autotune's first choice).
        auto vendor_answers = [&] {
          const json asked = vendor_req.is_object() ? vendor_req.value("epilogue", json()) : json();
          if (!cached.contains("vendor") || !cached["vendor"].is_object()) return false;
          const json& v = cached["vendor"];
          return v.value("asked_epilogue", json()) == asked && (v.contains("order") || v.value("status", "") == "unavailable");
        };
        if (!cached.is_discarded() && (!o.verify || cached.contains("verify")) && (!vendor || vendor_answers())) {
          cached["cached"] = true;
          cached["trusted"] = trusted_timing(manifest);
          results[i] = cached;
          continue;
        }
      }
    }
    std::string why;
    auto tensors = tensors_for(manifest, o, why);
    if (!tensors) {
      results[i] = {{"status", "failed"}, {"reason", why}};
      continue;
    }
    const auto gemm = vendor ? vendor_gemm : gemm_problem();
    json req = {{"mode", "bench"}, {"tensors", *tensors}, {"budget_ms", o.budget_ms}, {"seed", 0}};
    if (o.extra_args.is_array()) {
      json scalars = json::object();
      size_t n = 0;
      for (const auto& a : manifest["abi"]["args"]) {
        if (a["kind"] == "scalar" && n < o.extra_args.size()) scalars[a["name"].get<std::string>()] = o.extra_args[n++];
      }
      req["scalars"] = scalars;
    } else if (gemm) {  // the sizes of the problem at hand
      req["scalars"] = {{"M", gemm->M}, {"N", gemm->N}, {"K", gemm->K}, {"batch", gemm->batch}};
    }
    if (o.verify && reference) {
      req["reference"] = {{"artifact", store_.artifact_path(reference->value("key", "")).string()},
                          {"abi", (*reference)["abi"]}};
      if (!o.reference_outputs.empty()) req["reference"]["outputs_file"] = o.reference_outputs;
    }
    if (!o.saved_inputs.empty()) req["inputs_file"] = o.saved_inputs;
    const json kernel = {{"artifact", store_.artifact_path(key).string()}, {"abi", manifest["abi"]}};
    pending.push_back({i, *backend, digest, stored, std::move(req), kernel, vendor_req});
  }

  // Consecutive template kernels with the same request share a runner.
  for (size_t p = 0; p < pending.size();) {
    size_t q = p + 1;
    if (trusted_timing(manifests[pending[p].index])) {
      while (q < pending.size() && pending[q].backend == pending[p].backend && trusted_timing(manifests[pending[q].index]) &&
             pending[q].shared == pending[p].shared && pending[q].vendor == pending[p].vendor)
        ++q;
    }
    const json& vendor = pending[p].vendor;  // timed with each kernel of the runner
    std::lock_guard<std::mutex> lock(device_locks_[index_of(pending[p].backend)]);
    for (size_t next = p; next < q;) {
      json req = pending[p].shared;
      req["kernels"] = json::array();
      for (size_t k = next; k < q; ++k) req["kernels"].push_back(pending[k].kernel);
      if (!vendor.is_null()) req["vendor"] = vendor;
      for (json& a : run_runner(pending[p].backend, req, o.runner_env)) {
        if (next == q) break;
        results[pending[next++].index] = std::move(a);
        runs_++;
      }
    }
    p = q;
  }

  for (const Pending& k : pending) {
    json& result = results[k.index];
    const json& manifest = manifests[k.index];
    result["device_digest"] = k.digest;
    result["trusted"] = trusted_timing(manifest);
    if (o.verify && !reference) {
      result["verify"] = {{"status", "unavailable"}, {"reason", "no reference rendering for a source-mode kernel"}};
    }
    if (o.vendor && k.vendor.is_null() && result.value("status", "") == "ok") {
      result["vendor"] = {{"status", "unavailable"}, {"reason", "a vendor baseline exists for the gemm template only"}};
    }
    if (result.value("status", "") == "ok")
      (void)store_.put_bench_result(manifests[k.index].value("key", ""), k.stored, result);
    result["cached"] = false;
  }
  return results;
}

}  // namespace kforge::core
