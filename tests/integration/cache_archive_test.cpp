// Export and import between two real instances (issue 16): 50 kernels built on one, moved
// by `kforge cache export|import` and by GET /cache/export + POST /cache/import into
// instances with their own empty caches, where every request is a hit with no compiler
// run; a damaged archive imports nothing and names the entry; the routes are admin-only.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

#include "core/base/fsutil.hpp"
#include "integration/server_process.hpp"
#include "unit/scratch.hpp"

namespace kforge::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kKernels = 50;

// A cheap source-mode cpu kernel; `salt` makes a distinct one. Its 4 KiB table of noise
// keeps the archive from compressing 40-fold (as real kernels do not), so that it spans
// many of the 128 KiB blocks libarchive decompresses at a time.
std::string kernel(int salt) {
  std::mt19937 rng(salt);
  std::string table;
  for (int i = 0; i < 4096; ++i) table += std::to_string(rng() & 0xff) + ",";
  return json{{"backend", "cpu"},
              {"arch", "native"},
              {"source",
               "#include <cstddef>\n#include <cstdint>\n#define PT_EXPORT __attribute__((visibility(\"default\")))\n"
               "static const unsigned char kTable[4096] = {" + table + "};\n"
               "extern \"C\" PT_EXPORT int KERNEL_NAME(const float* x, float* y, int64_t n, size_t* workspace_size, "
               "uint8_t* workspace, void* stream) {\n  if (workspace_size) { *workspace_size = 0; return 0; }\n"
               "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * " +
                   std::to_string(salt) + ".5f + kTable[i & 4095];\n  return 0;\n}\n"}}
      .dump();
}

// Runs `kforge ARGS...`; its exit status, with stdout in `out` and stderr in `err`.
int kforge(std::vector<std::string> args, std::string* out = nullptr, std::string* err = nullptr) {
  static int n = 0;
  const fs::path base = fs::temp_directory_path() / ("kforge-cli-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
  args.insert(args.begin(), KFORGE_BINARY);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open((base.string() + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open((base.string() + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (out) *out = core::read_file(base.string() + ".out").value_or("");
  if (err) *err = core::read_file(base.string() + ".err").value_or("");
  fs::remove(base.string() + ".out");
  fs::remove(base.string() + ".err");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class CacheTransfer : public ::testing::Test {
 protected:
  std::unique_ptr<ServerProcess> start(const std::string& cache, std::vector<std::string> args = {}) {
    return std::make_unique<ServerProcess>(scratch_ / cache, scratch_ / ("server." + std::to_string(n_++) + ".log"),
                                           std::move(args));
  }
  // Posts the 50 kernels (four at a time); their keys, each answer's "cache" checked.
  std::vector<std::string> post_all(const ServerProcess& s, const std::string& want_cache) {
    std::vector<std::string> keys(kKernels);
    std::vector<std::future<void>> workers;
    std::atomic<int> next{0};
    for (int w = 0; w < 4; ++w) {
      workers.push_back(std::async(std::launch::async, [&] {
        for (int i; (i = next++) < kKernels;) {
          Reply r = post_json(s, "/kernels", kernel(i));
          EXPECT_EQ(r.status, 200) << r.raw;
          if (r.status != 200) continue;
          EXPECT_EQ(r.body.value("cache", ""), want_cache) << "kernel " << i;
          keys[i] = r.body.value("key", "");
        }
      }));
    }
    for (auto& w : workers) w.get();
    return keys;
  }
  Scratch scratch_;
  int n_ = 0;
};

TEST_F(CacheTransfer, FiftyKernelsMoveToFreshInstancesAsHits) {
  auto a = start("a", {"--compile-jobs", "2"});
  const std::vector<std::string> keys = post_all(*a, "miss");
  ASSERT_EQ(metric(*a, "kforge_compiler_runs_total"), double(kKernels));

  // Exported twice while A serves: by the CLI from its directory, and over HTTP.
  const fs::path cli_archive = scratch_ / "cli.tar.zst";
  auto t0 = Clock::now();
  std::string out, err;
  ASSERT_EQ(kforge({"cache", "export", "--cache-dir", (scratch_ / "a").string(), "-o", cli_archive.string()}, &out, &err), 0)
      << err;
  const double export_cli_s = seconds_since(t0);
  json exported = json::parse(out);
  EXPECT_EQ(exported["entries"], kKernels) << out;
  EXPECT_EQ(exported["requests"], kKernels) << out;
  EXPECT_EQ(exported["bytes"], fs::file_size(cli_archive));

  t0 = Clock::now();
  auto res = a->client().Get("/cache/export");
  const double export_http_s = seconds_since(t0);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/zstd");
  EXPECT_TRUE(res->get_header_value("Content-Disposition").starts_with("attachment; filename=\"kforge-cache-"));
  EXPECT_EQ(res->get_header_value("X-Kforge-Entries"), std::to_string(kKernels));
  const std::string http_archive = res->body;
  ASSERT_TRUE(core::write_file(scratch_ / "http.tar.zst", http_archive));
  a.reset();

  // B1: an empty cache, filled by the CLI while B1 serves from it.
  auto b1 = start("b1");
  t0 = Clock::now();
  ASSERT_EQ(kforge({"cache", "import", cli_archive.string(), "--cache-dir", (scratch_ / "b1").string()}, &out, &err), 0) << err;
  const double import_cli_s = seconds_since(t0);
  json imported = json::parse(out);
  EXPECT_EQ(imported["imported"], kKernels) << out;
  EXPECT_EQ(imported["present"], 0) << out;
  EXPECT_EQ(imported["requests"]["imported"], kKernels) << out;
  EXPECT_EQ(post_all(*b1, "hit"), keys);
  EXPECT_EQ(metric(*b1, "kforge_compiler_runs_total"), 0.0);
  // Again: nothing new.
  ASSERT_EQ(kforge({"cache", "import", cli_archive.string(), "--cache-dir", (scratch_ / "b1").string()}, &out, &err), 0) << err;
  EXPECT_EQ(json::parse(out)["present"], kKernels) << out;
  b1.reset();

  // The HTTP archive with one byte flipped: nothing imported, the entry named (CLI and POST).
  std::string flipped = http_archive;
  flipped[flipped.size() / 2] ^= 0x20;
  ASSERT_TRUE(core::write_file(scratch_ / "flipped.tar.zst", flipped));
  EXPECT_EQ(kforge({"cache", "import", (scratch_ / "flipped.tar.zst").string(), "--cache-dir", (scratch_ / "c").string()}, &out,
                   &err),
            1);
  json refused = json::parse(out);
  ASSERT_FALSE(refused["failed"].empty()) << out;
  const std::string named = refused["failed"][0]["key"];
  EXPECT_NE(std::find(keys.begin(), keys.end(), named), keys.end()) << out;
  EXPECT_NE(err.find(named), std::string::npos) << err;
  EXPECT_EQ(refused["stats"]["entries"], 0) << out;

  // B2: an empty cache, filled over HTTP (the archive over --max-body, under --max-import-bytes).
  auto b2 = start("b2", {"--max-body", std::to_string(http_archive.size() / 2), "--max-import-bytes", "67108864"});
  auto c = b2->client();
  auto bad = c.Post("/cache/import", flipped, "application/zstd");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  json problem = json::parse(bad->body);
  ASSERT_FALSE(problem["failed"].empty()) << bad->body;
  EXPECT_EQ(problem["failed"][0]["key"], named) << bad->body;
  EXPECT_EQ(problem["imported"], 0);
  // Every other route still refuses a body over --max-body.
  Reply big = post_json(*b2, "/kernels", std::string(http_archive.size() / 2 + 10, ' '));
  EXPECT_EQ(big.status, 413) << big.raw;
  t0 = Clock::now();
  auto good = c.Post("/cache/import", http_archive, "application/zstd");
  const double import_http_s = seconds_since(t0);
  ASSERT_TRUE(good);
  ASSERT_EQ(good->status, 200) << good->body;
  json report = json::parse(good->body);
  EXPECT_EQ(report["imported"], kKernels) << good->body;  // the flipped one left nothing behind
  EXPECT_EQ(report["present"], 0) << good->body;
  EXPECT_EQ(post_all(*b2, "hit"), keys);
  EXPECT_EQ(metric(*b2, "kforge_compiler_runs_total"), 0.0);
  good = c.Post("/cache/import", http_archive, "application/zstd");
  ASSERT_TRUE(good);
  EXPECT_EQ(json::parse(good->body)["present"], kKernels) << good->body;

  std::cerr << "round trip: " << kKernels << " entries; archive " << fs::file_size(cli_archive) << " bytes (CLI), "
            << http_archive.size() << " bytes (HTTP); export " << export_cli_s << " s (CLI), " << export_http_s
            << " s (HTTP); import " << import_cli_s << " s (CLI), " << import_http_s << " s (HTTP)\n";
}

TEST_F(CacheTransfer, RoutesAreAdminOnlyAndCheckTheirInput) {
  const fs::path tokens = scratch_ / "tokens";
  ASSERT_TRUE(core::write_file_atomic(tokens, "submit:submit-token-0123456789\nadmin:admin-token-0123456789\n"));
  auto s = start("cache", {"--token-file", tokens.string(), "--max-import-bytes", "100000"});
  auto with = [](const std::string& t) { return httplib::Headers{{"Authorization", "Bearer " + t}}; };
  auto c = s->client();
  EXPECT_EQ(get(*s, "/cache/export").status, 401);
  Reply forbidden = get(*s, "/cache/export", with("submit-token-0123456789"));
  EXPECT_EQ(forbidden.status, 403) << forbidden.raw;
  EXPECT_NE(forbidden.raw.find("admin"), std::string::npos) << forbidden.raw;
  auto post = c.Post("/cache/import", with("submit-token-0123456789"), std::string(5000, 'x'), "application/zstd");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 403) << post->body;
  post = c.Post("/cache/import", std::string(5000, 'x'), "application/zstd");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 401);

  // The admin gets an (empty) archive, and bad filters are 400s naming the parameter.
  auto empty = c.Get("/cache/export", with("admin-token-0123456789"));
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 200);
  EXPECT_EQ(empty->get_header_value("X-Kforge-Entries"), "0");
  for (const auto& [query, field] : std::vector<std::pair<std::string, std::string>>{
           {"since=yesterday", "/since"}, {"match=colour%3Dred", "/match/0"}, {"colour=red", "/colour"}}) {
    Reply r = get(*s, "/cache/export?" + query, with("admin-token-0123456789"));
    EXPECT_EQ(r.status, 400) << query << ": " << r.raw;
    EXPECT_NE(r.raw.find("\"" + field + "\""), std::string::npos) << query << ": " << r.raw;
  }
  // An empty archive imports as nothing; one that is not an archive is a 400; too big a 413.
  post = c.Post("/cache/import", with("admin-token-0123456789"), empty->body, "application/zstd");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200) << post->body;
  EXPECT_EQ(json::parse(post->body)["imported"], 0);
  post = c.Post("/cache/import", with("admin-token-0123456789"), "not an archive", "application/zstd");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 400) << post->body;
  post = c.Post("/cache/import", with("admin-token-0123456789"), std::string(100001, 'x'), "application/zstd");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 413) << post->body;
  EXPECT_EQ(get(*s, "/healthz").status, 200);
}

// docs/API.md writes the filter unencoded, `?match=backend=cpu`: the value is what follows
// the first `=`. And `template=` reads the template's name where the manifest keeps it.
TEST_F(CacheTransfer, ExportFiltersAsDocumented) {
  auto s = start("filters", {"--compile-jobs", "2"});
  ASSERT_EQ(post_json(*s, "/kernels", kernel(7)).status, 200);
  auto tensor = [](const char* name) {
    return json{{"name", name}, {"dtype", "float32"}, {"sizes", {8, 8}}, {"strides", {8, 1}}};
  };
  const json gemm = {{"backend", "cpu"}, {"arch", "native"}, {"template", "gemm"},
                     {"inputs", {tensor("a"), tensor("b")}}, {"output", tensor("c")}};
  Reply built = post_json(*s, "/kernels", gemm.dump());
  ASSERT_EQ(built.status, 200) << built.raw;
  auto entries = [&](const std::string& query) {
    auto c = s->client();
    auto r = c.Get(("/cache/export?" + query).c_str());
    if (!r) return std::string("no answer");
    EXPECT_EQ(r->status, 200) << query << ": " << r->body.substr(0, 300);
    return r->get_header_value("X-Kforge-Entries");
  };
  EXPECT_EQ(entries("match=backend=cpu"), "2");
  EXPECT_EQ(entries("match=backend%3Dcpu"), "2");
  EXPECT_EQ(entries("match=backend=cuda"), "0");
  EXPECT_EQ(entries("match=template=gemm"), "1");
  EXPECT_EQ(entries("match=template=gem*&match=backend=cpu"), "1");
  EXPECT_EQ(entries("match=template=*"), "1");
  EXPECT_EQ(entries("match=template="), "1");  // the source-mode kernel
  EXPECT_EQ(entries("match=kernel_name=cpu_gemm_*"), "1");
  EXPECT_EQ(entries("match=arch=*&since=2024-06-01"), "2");
  Reply bad = get(*s, "/cache/export?match=colour=red");
  EXPECT_EQ(bad.status, 400) << bad.raw;
  EXPECT_NE(bad.raw.find("\"/match/0\""), std::string::npos) << bad.raw;
}

TEST_F(CacheTransfer, CliFiltersAndUsage) {
  auto a = start("a", {"--compile-jobs", "2"});
  for (int i = 0; i < 2; ++i) ASSERT_EQ(post_json(*a, "/kernels", kernel(100 + i)).status, 200);
  const std::string dir = (scratch_ / "a").string();
  std::string out, err;
  ASSERT_EQ(kforge({"cache", "export", "--cache-dir", dir, "--match", "backend=cpu", "--match", "arch=*", "-o",
                    (scratch_ / "x.tar.zst").string()},
                   &out, &err),
            0)
      << err;
  EXPECT_EQ(json::parse(out)["entries"], 2);
  // Nothing matched: an answer to read (exit 1, the filters named), and no archive left.
  const fs::path empty = scratch_ / "y.tar.zst";
  EXPECT_EQ(kforge({"cache", "export", "--cache-dir", dir, "--since", "2999-01-01", "-o", empty.string()}, &out, &err), 1);
  EXPECT_NE(err.find("--since 2999-01-01"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(empty));
  EXPECT_EQ(kforge({"cache", "export", "--cache-dir", dir, "--match", "template=gemm", "-o", "-"}, &out, &err), 1);
  EXPECT_TRUE(out.empty()) << "nothing on stdout";
  EXPECT_NE(err.find("--match template=gemm"), std::string::npos) << err;
  EXPECT_EQ(kforge({"cache", "export", "--cache-dir", (scratch_ / "none").string(), "-o", empty.string()}, &out, &err), 1);
  EXPECT_NE(err.find("holds no kernel"), std::string::npos) << err;
  // To stdout, the archive is the output and the report goes to stderr.
  ASSERT_EQ(kforge({"cache", "export", "--cache-dir", dir, "--match", "backend=cpu", "-o", "-"}, &out, &err), 0) << err;
  EXPECT_TRUE(out.starts_with("\x28\xb5\x2f\xfd")) << "not a zstd frame on stdout";
  EXPECT_EQ(json::parse(err)["entries"], 2);
  EXPECT_EQ(kforge({"cache", "export", "--cache-dir", dir, "--since", "soon", "-o", "z"}, &out, &err), 2);
  EXPECT_NE(err.find("--since"), std::string::npos) << err;
  EXPECT_EQ(kforge({"cache", "export", "--cache-dir", dir}, &out, &err), 2);
  EXPECT_NE(err.find("-o FILE"), std::string::npos) << err;
  EXPECT_EQ(kforge({"cache", "import", "--cache-dir", dir}, &out, &err), 2);
  EXPECT_EQ(kforge({"cache", "import", (scratch_ / "missing.tar.zst").string(), "--cache-dir", dir}, &out, &err), 1);
  EXPECT_NE(err.find("missing.tar.zst"), std::string::npos) << err;
}

}  // namespace
}  // namespace kforge::testing
