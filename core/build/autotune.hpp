// Autotuning (POST /autotune): one template request and a list of parameter choices (or the
// template's default catalog). Every choice compiles in parallel through the Builder (so
// cached kernels cost nothing), then each is benchmarked on this host's device, one at a
// time; the answer ranks them by median time, failed choices last with their reason, and
// names the winner. With verify, each choice is checked against the template's reference
// rendering and one that disagrees cannot win. Results are cached by (the request without
// its parameters, the choices, the device), so a repeated autotune answers at once:
//   <root>/v1/autotune/<akey[0:2]>/<akey>.json
// Errors: kBadRequest for a bad base request or bad choices (naming "/choices/<i>").
// Each autotune run is logged (core/base/log.hpp) as an `autotune` record and one
// `autotune_choice` record per choice, the Inductor-style table in their messages.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/bench/bench.hpp"
#include "core/build/build.hpp"

namespace kforge::core {

class Autotuner {
 public:
  // Builds one choice (blocking); the service routes it through its job queue, so the
  // compiles are bounded and shared with identical requests. Empty: builder.build().
  using Compile = std::function<Result<BuildResult>(const KernelRequest&)>;
  Autotuner(Builder& builder, Bencher& bencher, storage::DiskTier& store, Compile compile = {});

  // `choices` is "default" or an array of params objects; `body` is the request's JSON
  // (for the error pointers of each choice).
  // `phase` hears "benchmarking" when every choice is compiled.
  using Phase = std::function<void(const char*)>;
  Result<nlohmann::json> run(const KernelRequest& base, const nlohmann::json& choices, const Phase& phase = {});

 private:
  Builder& builder_;
  Bencher& bencher_;
  storage::DiskTier& store_;
  Compile compile_;
};

}  // namespace kforge::core
