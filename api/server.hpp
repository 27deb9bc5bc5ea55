// The HTTP face of kforge on cpp-httplib (DESIGN §2). Routes translate between HTTP and
// the core: they parse and bound the input, call the Builder or the store, and render
// results or problem+json errors. No domain logic lives here.
// bind() reserves the port (0 picks a free one) before run() serves, so a caller can
// print the real address first; stop() makes run() return. Safe to stop from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/autotune.hpp"
#include "core/bench/bench.hpp"
#include "core/build.hpp"
#include "core/request.hpp"
#include "core/store.hpp"
#include "core/toolchain.hpp"

namespace httplib {
class Server;
}

namespace kforge::api {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  size_t max_body_bytes = 4 << 20;
  size_t max_json_depth = 32;
  core::RequestLimits limits;
};

// The JSON a client gets for one kernel: the manifest's view plus URLs and wrappers.
nlohmann::json kernel_view(const nlohmann::json& manifest);

class Server {
 public:
  Server(ServerConfig config, core::Builder& builder, core::DiskStore& store,
         const core::Toolchains& toolchains, core::Bencher& bencher, core::Autotuner& autotuner);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  core::Result<int> bind();  // the bound port
  void run();                // blocks until stop()
  void stop();

  // (method, OpenAPI path) of every registered route.
  const std::vector<std::pair<std::string, std::string>>& route_table() const { return routes_; }

 private:
  void routes();

  ServerConfig config_;
  core::Builder& builder_;
  core::DiskStore& store_;
  const core::Toolchains& toolchains_;
  core::Bencher& bencher_;
  core::Autotuner& autotuner_;
  std::unique_ptr<httplib::Server> http_;
  std::vector<std::pair<std::string, std::string>> routes_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace kforge::api
