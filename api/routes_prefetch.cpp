// POST /prefetch (issue 16): warms a cache from a list of kernel requests, such as the
// manifest a client recorded while a model compiled (docs/API.md, "POST /prefetch").
//
// The whole list is validated before anything runs (each entry parsed, prepared and
// rendered as POST /kernels would): a malformed entry is a 400 naming /requests/<i>/....
// The answer is a job of kind "prefetch" that core::Prefetcher (core/build/prefetch.hpp) runs on
// its own thread; this file gives it the service's queue submissions, counters and problem
// documents, and wakes it on every job change (Server's queue observer calls
// prefetch_wake()). ~Server stops it before the queue goes.
#include <chrono>
#include <set>

#include "api/http_util.hpp"
#include "api/server.hpp"
#include "core/build/prefetch.hpp"
#include "core/base/utf8.hpp"

namespace kforge::api {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kManifestFormat = "kforge-prefetch/1";
constexpr size_t kMaxLabelBytes = 200;

// An entry's error, moved under /requests/<i>.
core::Error entry_error(core::Error e, size_t i) {
  const std::string at = "/requests/" + std::to_string(i);
  if (e.fields.empty()) e.fields.push_back({at, e.message});
  for (auto& f : e.fields) {
    if (!f.field.starts_with(at)) f.field = at + f.field;
  }
  e.message = at + ": " + e.message;
  return e;
}

}  // namespace

// POST /prefetch: validate everything, then queue the task and answer with its job.
void Server::post_prefetch(const httplib::Request& req, httplib::Response& res) {
  auto body = core::parse_json_body(req.body, config_.max_json_depth);
  if (!body) return send_error(res, body.error());
  if (!body->is_object())
    return send_problem(res, problem_json(400, "the request body must be a JSON object", ""));
  static const std::set<std::string> kFields = {"format", "requests", "label", "recorded",
                                                "wait_ms"};
  for (const auto& [k, v] : body->items()) {
    if (!kFields.contains(k)) {
      return send_problem(
          res, problem_json(400,
                            "unknown field `" + core::sanitize_utf8(k) +
                                "` (a prefetch takes format, requests, label, recorded, wait_ms)",
                            "/" + core::sanitize_utf8(k)));
    }
  }
  if (body->contains("format") && (*body)["format"] != kManifestFormat) {
    return send_problem(res, problem_json(400,
                                          std::string("format is \"") + kManifestFormat +
                                              "\" (the only manifest format this server reads)",
                                          "/format"));
  }
  std::string label;
  if (body->contains("label")) {
    const auto& l = (*body)["label"];
    if (!l.is_string() || l.get_ref<const std::string&>().size() > kMaxLabelBytes)
      return send_problem(res, problem_json(400, "label is a string of at most 200 bytes", "/label"));
    label = l;
  }
  if (body->contains("recorded") && !(*body)["recorded"].is_object()) {
    return send_problem(
        res, problem_json(400, "recorded is an object (the recorder's notes; not read)", "/recorded"));
  }
  auto wait = std::chrono::milliseconds(0);
  if (body->contains("wait_ms")) {
    const auto& w = (*body)["wait_ms"];
    if (!w.is_number_integer() || w.get<int64_t>() < 0)
      return send_problem(res, problem_json(400, "wait_ms is a non-negative integer (milliseconds)", "/wait_ms"));
    wait = std::min<std::chrono::milliseconds>(config_.request_deadline,
                                               std::chrono::milliseconds(w.get<int64_t>()));
  }
  if (req.get_header_value("Prefer").find("respond-async") != std::string::npos) wait = {};
  if (!body->contains("requests") || !(*body)["requests"].is_array())
    return send_problem(res, problem_json(400, "requests is a list of POST /kernels bodies", "/requests"));
  auto& list = (*body)["requests"];
  if (list.empty() || list.size() > config_.max_prefetch) {
    return send_problem(res, problem_json(400,
                                          std::to_string(list.size()) +
                                              " requests; a prefetch takes 1 to " +
                                              std::to_string(config_.max_prefetch) +
                                              " (--max-prefetch)",
                                          "/requests"));
  }

  std::vector<core::Prefetcher::Entry> entries;
  std::set<std::string> backends, archs;
  for (size_t i = 0; i < list.size(); ++i) {
    auto& entry = list[i];
    const std::string at = "/requests/" + std::to_string(i);
    if (!entry.is_object())
      return send_problem(res, problem_json(400, at + ": a request is a JSON object", at));
    core::Prefetcher::Entry e;
    if (entry.contains("label")) {
      const auto& l = entry["label"];
      if (!l.is_string() || l.get_ref<const std::string&>().size() > kMaxLabelBytes)
        return send_problem(res, problem_json(400, at + "/label: a string of at most 200 bytes", at + "/label"));
      e.label = l;
      entry.erase("label");
    }
    // What POST /kernels takes, as it is recorded: how long to wait is no part of a
    // request, and a prefetch compiles; it does not measure.
    entry.erase("wait_ms");
    entry.erase("benchmark");
    auto kreq = core::parse_kernel_request(entry, config_.limits);
    if (!kreq) return send_error(res, entry_error(kreq.error(), i));
    auto prepared = svc_.builder.prepare(*kreq);
    if (!prepared) return send_error(res, entry_error(prepared.error(), i));
    if (auto rendered = svc_.builder.render(*prepared); !rendered)
      return send_error(res, entry_error(rendered.error(), i));
    backends.insert(std::string(core::backend_name(kreq->backend)));
    archs.insert(prepared->archs.begin(), prepared->archs.end());
    e.req = std::move(*kreq);
    entries.push_back(std::move(e));
  }

  std::string joined_backends;
  for (const auto& b : backends) joined_backends += (joined_backends.empty() ? "" : ",") + b;
  nlohmann::json info = {{"kind", "prefetch"},
                         {"label", label.empty() ? nlohmann::json(nullptr) : nlohmann::json(label)},
                         {"template", nullptr},
                         {"backend", joined_backends},
                         {"archs", archs},
                         {"client", req.remote_addr},
                         {"request_id", res.get_header_value("X-Request-Id")},
                         {"key", nullptr},
                         {"kernel_name", nullptr},
                         {"prefetch",
                          {{"total", entries.size()},
                           {"done", 0},
                           {"hit", 0},
                           {"built", 0},
                           {"failed", 0},
                           {"in_flight", 0},
                           {"recent", nlohmann::json::array()}}}};
  auto job = prefetch_->enqueue(std::move(info), std::move(entries), req.remote_addr);
  if (!job) return send_error(res, job.error());
  res.set_header("Location", "/jobs/" + (*job)->id());
  if (wait.count() > 0 && (*job)->wait_until(Clock::now() + wait))
    return send_json(res, (*job)->to_json(true), 200);
  send_json(res, (*job)->to_json(false), 202);
}

void Server::prefetch_routes() {
  core::Prefetcher::Hooks hooks;
  hooks.submit = [this](const core::Prefetcher::Entry& e, const core::BuildPlan& plan, const core::Job& prefetch,
                        const std::string& client) {
    nlohmann::json info = job_info("kernel", e.req, client, "");
    info["archs"] = plan.prepared.archs;
    info["key"] = plan.key();
    info["kernel_name"] = plan.kernel_name();
    info["prefetch_job"] = prefetch.id();  // the prefetch it is part of
    return jobs_.submit(info, plan.key(), build_work(plan, nullptr));
  };
  hooks.hit = [this](const core::BuildPlan& plan, const std::string& client) {
    metrics_.cache_outcome("hit");
    hits_.record("POST /prefetch", client, plan.key());
  };
  hooks.cache_outcome = [this](const char* outcome) { metrics_.cache_outcome(outcome); };
  hooks.problem = [](const core::Error& e) { return problem_json(e); };
  prefetch_ = std::make_unique<core::Prefetcher>(svc_.builder, jobs_, std::move(hooks));
  route("POST", "/prefetch", "/prefetch", Role::kSubmit,
        [this](const httplib::Request& req, httplib::Response& res) { post_prefetch(req, res); });
}

void Server::prefetch_wake() {
  if (prefetch_) prefetch_->wake();
}

void Server::stop_prefetch() {
  if (prefetch_) prefetch_->stop();
}

}  // namespace kforge::api
