// Autotuning (POST /autotune): one template request and a list of parameter choices (or the
// template's default catalog). Every choice compiles in parallel through the Builder (so
// cached kernels cost nothing), then each is benchmarked on this host's device, one at a
// time; the answer ranks them by median time, failed choices last with their reason, and
// names the winner. With verify, each choice is checked against the template's reference
// rendering and one that disagrees cannot win. Results are cached by (the request without
// its parameters, the choices, the device), so a repeated autotune answers at once:
//   <root>/v1/autotune/<akey[0:2]>/<akey>.json
// Errors: kBadRequest for a bad base request or bad choices (naming "/choices/<i>").
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/bench/bench.hpp"
#include "core/build.hpp"

namespace kforge::core {

class Autotuner {
 public:
  using Log = std::function<void(const std::string&)>;
  Autotuner(Builder& builder, Bencher& bencher, DiskStore& store, size_t parallel_compiles, Log log);

  // `choices` is "default" or an array of params objects; `body` is the request's JSON
  // (for the error pointers of each choice).
  Result<nlohmann::json> run(const KernelRequest& base, const nlohmann::json& choices);

 private:
  Builder& builder_;
  Bencher& bencher_;
  DiskStore& store_;
  size_t parallel_;
  Log log_;
};

}  // namespace kforge::core
