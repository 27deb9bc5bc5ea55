#include "core/cluster/registry.hpp"

namespace kforge::core::cluster {

using storage::Redis;

Registry::Registry(Redis& redis, std::string instance) : redis_(redis), instance_(std::move(instance)) {}

void Registry::heartbeat(const nlohmann::json& status, std::chrono::milliseconds ttl) {
  redis_.command({"SET", Redis::key("instance", instance_), status.dump(), "PX", std::to_string(ttl.count())});
}

std::optional<bool> Registry::alive(const std::string& instance) {
  auto r = redis_.command({"EXISTS", Redis::key("instance", instance)});
  if (!r || !r->ok()) return std::nullopt;
  return r->integer > 0;
}

nlohmann::json Registry::instances() {
  nlohmann::json out = nlohmann::json::array();
  std::string cursor = "0";
  do {
    auto r = redis_.command({"SCAN", cursor, "MATCH", Redis::key("instance", "*"), "COUNT", "100"});
    if (!r || !r->ok() || r->elements.size() != 2) return out;
    cursor = r->elements[0].str;
    for (const auto& key : r->elements[1].elements) {
      auto v = redis_.command({"GET", key.str});
      if (!v || v->nil()) continue;
      auto j = nlohmann::json::parse(v->str, nullptr, false);
      if (!j.is_discarded()) out.push_back(std::move(j));
    }
  } while (cursor != "0");
  return out;
}

}  // namespace kforge::core::cluster
