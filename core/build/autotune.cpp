#include "core/build/autotune.hpp"

#include <algorithm>
#include <deque>
#include <future>
#include <iomanip>
#include <sstream>

#include "core/base/fsutil.hpp"
#include "core/base/hash.hpp"
#include "core/base/log.hpp"
#include "core/templates/template.hpp"

namespace kforge::core {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kMaxChoices = 64;

std::string shape_of(const TemplateSpec& t) {
  std::ostringstream s;
  s << t.name << "(";
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    s << (i ? ", " : "");
    for (size_t d = 0; d < t.inputs[i].sizes.size(); ++d) s << (d ? "x" : "") << t.inputs[i].sizes[d];
    s << " " << dtype_name(t.inputs[i].dtype);
  }
  s << ")";
  return s.str();
}

}  // namespace

Autotuner::Autotuner(Builder& builder, Bencher& bencher, storage::DiskTier& store, Compile compile)
    : builder_(builder), bencher_(bencher), store_(store), compile_(std::move(compile)) {
  if (!compile_) compile_ = [this](const KernelRequest& r) { return builder_.build(r); };
}

Result<json> Autotuner::run(const KernelRequest& base_in, const json& choices_in, const Phase& phase) {
  if (!base_in.tmpl) return fail_field("/template", "autotuning needs a template request");
  KernelRequest base = base_in;
  base.tmpl->params = json::object();
  auto prepared = builder_.prepare(base);  // validates everything but the parameters
  if (!prepared) return std::unexpected(prepared.error());
  if (auto r = prepared->check_runnable(); !r) return std::unexpected(r.error());
  const auto* tmpl = templates::Registry::builtin().find(base.tmpl->name);

  json choices = choices_in;
  if (choices.is_string() && choices == "default") {
    const templates::TemplateRequest treq = prepared->template_request();
    choices = json::array();
    for (auto& c : tmpl->default_choices(treq)) choices.push_back(c);
  }
  if (!choices.is_array() || choices.empty()) return fail_field("/choices", "a non-empty list of parameter objects, or \"default\"");
  if (choices.size() > kMaxChoices) return fail_field("/choices", "at most " + std::to_string(kMaxChoices) + " choices");
  for (size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_object()) return fail_field("/choices/" + std::to_string(i), "a choice is an object of parameters");
  }
  BenchOptions opts = BenchOptions::from_json(base.benchmark.is_null() ? json::object() : base.benchmark);
  if (base.backend == Backend::kCpu) opts.runner_env = vendor_env(prepared->cpu);
  if (base.tmpl) opts.problem = base.tmpl->to_json();  // what every choice runs on (its kernel may serve other M too)
  const json device = bencher_.device_identity(std::string(backend_name(base.backend)));

  // The autotune key: the request without its parameters, the choices, the device. An asked
  // vendor is keyed by how it is timed: with each choice (a ranking stored when it was timed
  // once, with the first choice, answers no longer; one without the vendor still does).
  json canon = {{"format", storage::DiskTier::kFormat}, {"kind", "autotune"}, {"identity", prepared->toolchain->identity},
                {"request", prepared->req.canonical(prepared->archs)}, {"choices", choices}, {"device", device},
                {"verify", opts.verify}, {"vendor", opts.vendor ? json("with each choice") : json(false)}};
  canon["request"]["template"].erase("params");
  const std::string akey = sha256_hex(canon.dump());
  // Measured before, here or by another instance of the cluster on the same kind of device.
  if (!opts.force) {
    if (auto j = builder_.storage().find_autotune(akey)) {
      (*j)["cache"] = "hit";
      return *j;
    }
  }

  // Compile every choice at once: compile_ bounds how many compilers really run.
  struct Outcome {
    json params;
    std::optional<json> manifest;
    json error;
  };
  std::vector<Outcome> outcomes(choices.size());
  auto compile_one = [&](size_t i) {
    KernelRequest r = base;
    r.tmpl->params = choices[i];
    r.benchmark = json();
    outcomes[i].params = choices[i];
    auto built = compile_(r);
    if (built) {
      outcomes[i].manifest = built->manifest;
      outcomes[i].params = built->manifest["template"]["params"];
    } else {
      const Error& e = built.error();
      outcomes[i].error = {{"stage", "compile"}, {"reason", e.message}};
      if (!e.fields.empty()) outcomes[i].error["field"] = e.fields.front().field, outcomes[i].error["reason"] = e.fields.front().message;
      if (e.extra.contains("log")) outcomes[i].error["log"] = e.extra["log"];
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::future<void>> all;
    for (size_t i = 0; i < choices.size(); ++i) all.push_back(std::async(std::launch::async, compile_one, i));
    for (auto& f : all) f.get();
  }
  const double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::optional<json> reference;
  json reference_error;
  if (opts.verify && bencher_.available(base.backend)) {
    KernelRequest r = base;
    r.reference = true;
    r.benchmark = json();
    auto built = compile_(r);
    if (built) reference = built->manifest;
    else reference_error = built.error().message;
  }

  // Benchmark, one at a time, in one runner (Bencher::run_all), with the vendor's call where
  // asked (on a GPU interleaved with each choice); the reference computed once.
  BenchOptions run_opts = opts;
  auto ref_dir = store_.make_staging();
  if (!ref_dir) return std::unexpected(ref_dir.error());
  run_opts.reference_outputs = (*ref_dir / "reference.bin").string();
  run_opts.saved_inputs = (*ref_dir / "inputs.bin").string();  // every choice gets the same inputs
  RemoveOnExit remove_ref{*ref_dir};
  // Every kernel benchmarked here stays in the cache until the ranking is done (eviction
  // after another build would otherwise take it from under its benchmark).
  std::deque<storage::DiskTier::Pin> pins;
  for (const auto& o : outcomes) {
    if (o.manifest) pins.emplace_back(store_, (*o.manifest)["key"].get<std::string>());
  }
  if (reference) pins.emplace_back(store_, reference->value("key", ""));
  json vendor;  // the winner's, timed with it (on the CPU, the one timed after the last choice)
  json ranked = json::array();
  if (phase) phase("benchmarking");
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<json> built;
  for (const auto& o : outcomes) {
    if (o.manifest) built.push_back(*o.manifest);
  }
  std::vector<json> timings = bencher_.run_all(built, run_opts, reference);
  size_t next_timing = 0;
  for (auto& o : outcomes) {
    json entry = {{"params", o.params}};
    if (!o.manifest) {
      entry["status"] = "failed";
      entry["error"] = o.error;
      ranked.push_back(entry);
      continue;
    }
    entry["key"] = (*o.manifest)["key"];
    entry["kernel_name"] = (*o.manifest)["kernel_name"];
    json b = std::move(timings[next_timing++]);
    if (opts.vendor && b.contains("vendor") && vendor.is_null()) vendor = b["vendor"];  // not a stored one nobody asked for
    const std::string st = b.value("status", "failed");
    entry["benchmark"] = b;
    if (st == "ok" && b.contains("verify") && b["verify"].contains("passed") && !b["verify"]["passed"].get<bool>()) {
      entry["status"] = "failed";
      entry["error"] = {{"stage", "verify"}, {"reason", "the result disagrees with the reference (max abs error " +
                                                          b["verify"]["max_abs_err"].dump() + ")"}};
    } else if (st == "ok" && !b.value("trusted", false)) {
      // Only kforge's own renderings rank (a template's are); never a timing that code of
      // unknown origin could have written (core/bench/bench.hpp).
      entry["status"] = "failed";
      entry["error"] = {{"stage", "benchmark"}, {"reason", "the timing was measured around untrusted code"}};
    } else if (st == "ok") {
      entry["status"] = "ok";
      entry["median_ms"] = b["median_ms"];
      entry["min_ms"] = b["min_ms"];
    } else if (st == "unavailable") {
      entry["status"] = "compiled";  // built; no device here to time it on
      entry["error"] = {{"stage", "benchmark"}, {"reason", b.value("reason", "")}};
    } else {
      entry["status"] = "failed";
      entry["error"] = {{"stage", "benchmark"}, {"reason", b.value("reason", "")}};
    }
    ranked.push_back(entry);
  }
  const double bench_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  std::stable_sort(ranked.begin(), ranked.end(), [](const json& a, const json& b) {
    auto score = [](const json& e) { return e["status"] == "ok" ? 0 : e["status"] == "compiled" ? 1 : 2; };
    if (score(a) != score(b)) return score(a) < score(b);
    return score(a) == 0 && a["median_ms"].get<double>() < b["median_ms"].get<double>();
  });
  for (size_t i = 0; i < ranked.size(); ++i) ranked[i]["rank"] = i + 1;

  json out = {{"template", base.tmpl->name}, {"backend", backend_name(base.backend)}, {"archs", prepared->archs},
              {"device", device}, {"choices", ranked}, {"cache", "miss"}, {"autotune_key", akey},
              {"compile_seconds", compile_s}, {"benchmark_seconds", bench_s}};
  if (!ranked.empty() && ranked[0]["status"] == "ok") {
    out["winner"] = ranked[0];
    if (opts.vendor && ranked[0]["benchmark"].contains("vendor")) vendor = ranked[0]["benchmark"]["vendor"];
  } else {
    out["winner"] = nullptr;
    out["winner_reason"] = !bencher_.available(base.backend)
                               ? "no " + std::string(backend_name(base.backend)) + " device on this host: " + device.value("reason", "")
                               : "no choice compiled, ran and verified";
  }
  if (!vendor.is_null()) {
    out["vendor"] = vendor;
    if (out["winner"].is_object() && vendor.contains("median_ms")) {
      out["vs_vendor"] = vendor["median_ms"].get<double>() / out["winner"]["median_ms"].get<double>();
    }
  }
  if (!reference_error.is_null()) out["reference_error"] = reference_error;

  // Inductor-style log: a record for the problem, then one per choice, relative to the best.
  {
    std::ostringstream head;
    head << "AUTOTUNE " << shape_of(*prepared->req.tmpl) << " on " << device.value("name", backend_name(base.backend));
    if (vendor.contains("median_ms"))
      head << " (" << vendor.value("name", "vendor") << " " << std::fixed << std::setprecision(4)
           << vendor["median_ms"].get<double>() << " ms)";
    log::info("autotune", head.str())
        .str("template", base.tmpl->name)
        .str("device", device.value("name", ""))
        .json("vendor_ms", vendor.contains("median_ms") ? vendor["median_ms"] : json(nullptr))
        .num("choices", uint64_t{ranked.size()})
        .str("autotune_key", akey);
  }
  const double best = out["winner"].is_object() ? out["winner"]["median_ms"].get<double>() : 0;
  for (const auto& e : ranked) {
    std::ostringstream l;
    l << "  " << e.value("kernel_name", std::string("(not built)")) << " ";
    if (e["status"] == "ok") {
      l << std::fixed << std::setprecision(4) << e["median_ms"].get<double>() << " ms " << std::setprecision(1)
        << 100.0 * best / e["median_ms"].get<double>() << "%";
    } else {
      l << e["status"].get<std::string>() << ": " << e["error"].value("reason", "");
    }
    l << " " << e["params"].dump();
    log::info("autotune_choice", l.str())
        .num("rank", e.value("rank", int64_t{0}))
        .json("kernel_name", e.value("kernel_name", json(nullptr)))
        .json("status", e["status"])
        .json("median_ms", e.value("median_ms", json(nullptr)))
        .json("params", e["params"]);
  }
  if (out["winner"].is_object()) {
    builder_.storage().remember_autotune(akey, out);
    // Each timed choice keeps the ranking it took part in, for its page on the status page.
    for (const auto& e : ranked) {
      if (e.contains("key")) (void)store_.put_ranking(e["key"], out);
    }
  }
  return out;
}

}  // namespace kforge::core
