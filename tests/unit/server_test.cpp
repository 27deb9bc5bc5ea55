#include "api/server.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "api/problem.hpp"
#include "unit/scratch.hpp"

namespace kforge::api {
namespace {

TEST(OpenApi, EveryRegisteredRouteIsDocumented) {
  testing::Scratch s;
  core::storage::DiskTier store(s.path());
  core::Toolchains toolchains({});
  core::storage::Storage storage(store);
  core::Builder builder(toolchains, storage, {});
  core::Bencher bencher(s.path() / "no-runners", store, std::chrono::seconds(5));
  auto sandbox = core::Sandbox::make("none", {});
  ASSERT_TRUE(sandbox);
  Auth auth;
  Server server({}, {builder, store, toolchains, bencher, *sandbox, auth});
  std::ifstream in(KFORGE_OPENAPI_PATH);
  auto spec = nlohmann::json::parse(in);
  ASSERT_FALSE(server.route_table().empty());
  for (const auto& [method, path] : server.route_table()) {
    std::string m = method;
    for (char& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_TRUE(spec["paths"].contains(path) && spec["paths"][path].contains(m))
        << method << " " << path << " is served but missing from api/openapi.json";
  }
}

TEST(Problem, KindsMapToStatuses) {
  EXPECT_EQ(status_for(core::ErrorKind::kBadRequest), 400);
  EXPECT_EQ(status_for(core::ErrorKind::kCompileFailed), 422);
  EXPECT_EQ(status_for(core::ErrorKind::kNotFound), 404);
  EXPECT_EQ(status_for(core::ErrorKind::kTooLarge), 413);
  auto e = core::Error::bad_field("/arch/1", "nope");
  e.extra["accepted_archs"] = {"sm_80"};
  auto j = problem_json(e);
  EXPECT_EQ(j["status"], 400);
  EXPECT_EQ(j["errors"][0]["field"], "/arch/1");
  EXPECT_EQ(j["accepted_archs"][0], "sm_80");
  EXPECT_EQ(j["type"], "/problems/bad-request");
}

}  // namespace
}  // namespace kforge::api
