// The instance registry of a cluster: each instance writes its status (id, version, queue,
// cache outcomes: api/server.cpp instance_status()) to the Redis key `instance:<id>` every
// few seconds with an expiry, so the key lives exactly as long as the instance keeps
// writing it. /status lists every registered instance; a build lease whose holder's key has
// expired belongs to a dead instance (core/cluster/lease.hpp).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/storage/redis.hpp"

namespace kforge::core::cluster {

class Registry {
 public:
  Registry(storage::Redis& redis, std::string instance);

  // This instance's status, expiring after `ttl` unless written again.
  void heartbeat(const nlohmann::json& status, std::chrono::milliseconds ttl);
  // Every registered instance's status (empty when Redis is down).
  nlohmann::json instances();
  // Whether `instance` is registered now; nullopt when Redis cannot say (down).
  std::optional<bool> alive(const std::string& instance);
  const std::string& instance() const { return instance_; }

 private:
  storage::Redis& redis_;
  std::string instance_;
};

}  // namespace kforge::core::cluster
