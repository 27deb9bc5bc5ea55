// Job routes: GET /jobs, /jobs/{id}, /jobs/{id}/events (server-sent events).
#include <regex>

#include "api/http_util.hpp"
#include "api/server.hpp"

namespace kforge::api {
namespace {

// Checks the {id} path parameter; the job, or an answered 400/404 and null.
std::shared_ptr<core::Job> find_job(const core::JobQueue& jobs, const httplib::Request& req,
                                    httplib::Response& res) {
  static const std::regex kId("j[0-9]{1,20}(-[a-z0-9]{1,32})?");
  const std::string id = req.matches[1];
  if (!std::regex_match(id, kId)) {
    send_problem(res, problem_json(400, "a job id is `j`, digits and, in a cluster, `-<instance>`, as /jobs lists them", "/id"));
    return nullptr;
  }
  auto job = jobs.find(id);
  if (!job)
    send_problem(
        res, problem_json(404, "no job " + id + " (the history keeps the most recent jobs only)"));
  return job;
}

// Each event carries the job's version as its `id`: a client whose stream dropped sends it
// back as Last-Event-ID and is sent only what changed since (EventSource does so itself).
std::string sse_event(const char* event, uint64_t id, const nlohmann::json& data) {
  return std::string("id: ") + std::to_string(id) + "\nevent: " + event + "\ndata: " + dump_json(data, -1) + "\n\n";
}

}  // namespace

void Server::job_routes() {
  route(
      "GET", "/jobs", "/jobs", Role::kRead,
      [this](const httplib::Request& req, httplib::Response& res) {
        size_t limit = 100;
        if (req.has_param("limit")) {
          const std::string v = req.get_param_value("limit");
          if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos || std::stoul(v) == 0) {
            return send_problem(
                res, problem_json(400, "limit is a number of jobs (1 to 999999)", "/limit"));
          }
          limit = std::stoul(v);
        }
        nlohmann::json list = nlohmann::json::array();
        for (const auto& j : jobs_.recent(limit)) list.push_back(j->to_json(false));
        send_json(res, {{"jobs", list},
                        {"queue",
                         {{"depth", jobs_.depth()},
                          {"max", jobs_.max_queue()},
                          {"workers", jobs_.workers()},
                          {"busy", jobs_.busy()}}}});
      });

  route("GET", "/jobs/{id}", R"(/jobs/([^/]+))", Role::kRead,
        [this](const httplib::Request& req, httplib::Response& res) {
          if (auto job = find_job(jobs_, req, res)) send_json(res, job->to_json(true));
        });

  // One `state` event per change (the job as /jobs/{id} shows it, without the result), an
  // `end` event with the result when it finishes, and a comment every 15 s to keep the
  // connection open through proxies. Every event's `id` is the job's version; with
  // Last-Event-ID (a resumed stream) the first event waits for a version after it, and a
  // job that finished at that version is sent its `end` alone.
  route("GET", "/jobs/{id}/events", R"(/jobs/([^/]+)/events)", Role::kRead,
        [this](const httplib::Request& req, httplib::Response& res) {
          auto job = find_job(jobs_, req, res);
          if (!job) return;
          uint64_t last_id = 0;
          bool resume = false;
          if (req.has_header("Last-Event-ID")) {
            const std::string v = req.get_header_value("Last-Event-ID");
            if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
              return send_problem(res, problem_json(400, "Last-Event-ID is the `id` of an event this stream sent (digits)",
                                                    "/Last-Event-ID"));
            last_id = std::stoull(v);
            resume = last_id <= job->version();  // else not an id of this job: from the start
          }
          res.set_header("Cache-Control", "no-cache");
          res.set_header("X-Accel-Buffering", "no");  // nginx: pass events through at once
          res.set_chunked_content_provider(
              "text/event-stream",
              [job, seen = resume ? last_id : 0, first = !resume, resumed = resume](
                  size_t, httplib::DataSink& sink) mutable {
                if (!sink.is_writable()) return false;
                std::string out;
                if (resumed) {
                  resumed = false;
                  if (job->version() <= seen && job->finished()) {  // the last state was seen; the end maybe not
                    out = sse_event("end", seen, job->to_json(true));
                    if (!sink.write(out.data(), out.size())) return false;
                    sink.done();
                    return true;
                  }
                }
                const uint64_t now =
                    first ? job->version() : job->wait_change(seen, std::chrono::seconds(15));
                if (!first && now <= seen) {
                  const std::string ping = ": keep-alive\n\n";
                  return sink.write(ping.data(), ping.size());
                }
                first = false;
                // Asked once: a job that finished between two questions would end the stream
                // without its `end`. A finished job changes no more: its version is final.
                const bool done = job->finished();
                seen = done ? job->version() : now;
                out = sse_event("state", seen, job->to_json(false));
                if (done) out += sse_event("end", seen, job->to_json(true));
                if (!sink.write(out.data(), out.size())) return false;
                if (done) sink.done();
                return true;
              });
        });
}

}  // namespace kforge::api
