#include "core/cluster/lease.hpp"

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <random>

namespace kforge::core::cluster {

using storage::Redis;

Leases::Leases(Redis& redis, std::string instance, Registry* registry)
    : redis_(redis), instance_(std::move(instance)), registry_(registry) {}

std::string Leases::owner_token() const {
  static const std::string nonce = [] {
    std::random_device rd;
    return std::to_string(rd()) + std::to_string(rd());
  }();
  return instance_ + ":" + std::to_string(::getpid()) + ":" + nonce;
}

bool Leases::acquire(const std::string& key, std::chrono::milliseconds ttl) {
  auto r = redis_.command({"SET", Redis::key("lease", key), owner_token(), "NX", "PX", std::to_string(ttl.count())});
  if (!r) return true;  // Redis down: no one coordinates, build here
  return r->ok() && !r->nil();
}

void Leases::renew(const std::string& key, std::chrono::milliseconds ttl) {
  static const std::string kRenew =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
  redis_.command({"EVAL", kRenew, "1", Redis::key("lease", key), owner_token(), std::to_string(ttl.count())});
}

void Leases::release(const std::string& key) {
  static const std::string kRelease =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
  redis_.command({"EVAL", kRelease, "1", Redis::key("lease", key), owner_token()});
}

bool Leases::break_dead(const std::string& key) {
  if (!registry_) return false;
  auto holder = redis_.command({"GET", Redis::key("lease", key)});
  if (!holder || !holder->ok() || holder->nil()) return false;
  const std::string token = holder->str;  // instance:pid:nonce
  const std::string instance = token.substr(0, token.find(':'));
  if (instance.empty() || registry_->alive(instance).value_or(true)) return false;
  static const std::string kBreak =
      "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
  auto r = redis_.command({"EVAL", kBreak, "1", Redis::key("lease", key), token});
  return r && r->ok() && r->integer > 0;
}

bool Leases::leased(const std::string& key) {
  auto r = redis_.command({"EXISTS", Redis::key("lease", key)});
  return r && r->ok() && r->integer > 0;
}

Leases::Holder::Holder(Leases& leases, std::string key, std::chrono::milliseconds ttl)
    : leases_(leases), key_(std::move(key)), renewer_([this, ttl](std::stop_token stop) {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        while (!stop.stop_requested()) {
          cv.wait_for(lock, stop, ttl / 3, [] { return false; });
          if (!stop.stop_requested()) leases_.renew(key_, ttl);
        }
      }) {}

Leases::Holder::~Holder() {
  renewer_.request_stop();
  renewer_.join();
  leases_.release(key_);
}

}  // namespace kforge::core::cluster
