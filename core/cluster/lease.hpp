// Single flight across a cluster: one instance builds a kernel while the others wait for
// its manifest (docs/SCALING.md). A build lease is the Redis key `lease:<kernel key>` (SET
// NX PX, owner token instance:pid:nonce); its holder renews it every TTL/3 from a thread
// and releases it with a compare-and-delete, so a holder that dies stops renewing and its
// lease expires after the TTL, when a waiter takes the build over.
//
// A waiter does not wait out the TTL of a dead holder: each poll it asks the instance
// registry (core/cluster/registry.hpp) whether the holder's instance is still registered;
// an instance SIGKILLed stops writing its registry key, which expires (10 s), and the
// waiter then removes that holder's lease (compare-and-delete) and takes the build over.
//
// With Redis down, acquire() grants every lease: each instance builds for itself (a
// cluster without Redis is several independent caches, never a stuck one).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "core/cluster/registry.hpp"
#include "core/storage/redis.hpp"

namespace kforge::core::cluster {

class Leases {
 public:
  // `registry` (may be null) tells a dead holder's lease from a live one's.
  Leases(storage::Redis& redis, std::string instance, Registry* registry = nullptr);

  // Whether this instance now holds the lease on `key` (or Redis is down).
  bool acquire(const std::string& key, std::chrono::milliseconds ttl);
  void renew(const std::string& key, std::chrono::milliseconds ttl);
  void release(const std::string& key);
  // Whether some instance holds the lease on `key` (false when Redis is down).
  bool leased(const std::string& key);
  // Removes the lease on `key` when its holder's instance is no longer registered; whether
  // it did.
  bool break_dead(const std::string& key);

  // Holds the lease on `key` while it lives, renewing it every ttl/3; releases it after.
  class Holder {
   public:
    Holder(Leases& leases, std::string key, std::chrono::milliseconds ttl);
    ~Holder();
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;

   private:
    Leases& leases_;
    std::string key_;
    std::jthread renewer_;
  };

  // Runs `work` under the lease on `key`, unless another instance holds it: then waits,
  // asking `done()` every `poll` for the result that instance publishes, and takes the
  // lease (and the work) over when it expires. `joined` says the result is another's.
  template <typename T>
  T single_flight(const std::string& key, std::chrono::milliseconds ttl, const std::function<std::optional<T>()>& done,
                  const std::function<T()>& work, bool& joined, std::chrono::milliseconds poll = std::chrono::milliseconds(200)) {
    joined = false;
    bool waited = false;
    while (!acquire(key, ttl)) {
      if (!waited) waits_++;
      waited = true;
      std::this_thread::sleep_for(poll);  // another instance's build, not a clock
      if (auto r = done()) {
        joined = true;
        return std::move(*r);
      }
      if (break_dead(key)) dead_holders_++;
    }
    if (waited) takeovers_++;
    Holder holder(*this, key, ttl);
    if (auto r = done()) {  // published between the caller's lookup and the lease
      joined = true;
      return std::move(*r);
    }
    return work();
  }

  uint64_t waits() const { return waits_.load(); }          // builds that waited on another's lease
  uint64_t takeovers() const { return takeovers_.load(); }  // ... and then took it over
  uint64_t dead_holders() const { return dead_holders_.load(); }  // leases of dead instances broken

 private:
  std::string owner_token() const;

  storage::Redis& redis_;
  std::string instance_;
  Registry* registry_;
  std::atomic<uint64_t> waits_{0}, takeovers_{0}, dead_holders_{0};
};

}  // namespace kforge::core::cluster
