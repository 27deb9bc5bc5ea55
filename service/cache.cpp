// `kforge cache stats|gc|verify|export|import`: looks after a cache directory, also while a
// server uses it. Prints a JSON report on stdout (on stderr when the archive goes to stdout).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "core/storage/archive.hpp"
#include "core/storage/disk_tier.hpp"
#include "service/commands.hpp"
#include "service/serve_config.hpp"

namespace kforge::cli {
namespace fs = std::filesystem;
namespace {

struct Options {
  std::string what;  // the subcommand
  std::string cache_dir;
  std::string max_bytes;  // gc
  std::string since;      // export
  std::vector<std::string> match;
  std::string archive;  // export -o FILE, import FILE
};

int cache(const Options& o) {
  if (o.what == "export" && o.archive.empty()) {
    std::cerr << "kforge cache export: -o FILE is required (- for stdout)\n";
    return kExitUsage;
  }
  core::storage::ExportOptions export_opts;
  export_opts.kforge_version = KFORGE_VERSION;
  if (!o.since.empty()) {
    auto since = core::storage::parse_since(o.since, "--since");
    if (!since) {
      std::cerr << "kforge cache export: --" << since.error().message << "\n";
      return kExitUsage;
    }
    export_opts.since = *since;
  }
  for (const auto& m : o.match) {
    auto match = core::storage::parse_match(m, "--match");
    if (!match) {
      std::cerr << "kforge cache export: --" << match.error().message << "\n";
      return kExitUsage;
    }
    export_opts.matches.push_back(*match);
  }
  std::optional<uint64_t> max_bytes;
  if (!o.max_bytes.empty()) {
    auto n = parse_count("max-bytes", o.max_bytes);
    if (!n) {
      std::cerr << "kforge: " << n.error() << "\n";
      return kExitUsage;
    }
    max_bytes = *n;
  }
  std::string dir = o.cache_dir;
  if (dir.empty()) {
    auto fallback = default_cache_dir();
    if (!fallback) {
      std::cerr << "kforge cache: " << fallback.error() << "\n";
      return kExitUsage;
    }
    dir = *fallback;
  }
  std::unique_ptr<core::storage::DiskTier> store;
  try {
    store = std::make_unique<core::storage::DiskTier>(fs::absolute(dir));
  } catch (const std::exception& e) {
    std::cerr << "kforge cache: " << e.what() << "\n";
    return kExitFailed;
  }
  const std::string& what = o.what;
  nlohmann::json out = {{"cache_dir", store->root().string()}};
  if (what == "gc") {
    const auto g = store->collect_garbage();
    out["removed"] = {{"expired_negative_entries", g.expired},
                      {"dangling_requests", g.dangling_requests},
                      {"dangling_family_links", g.dangling_family_links},
                      {"dead_staging_items", g.staging_items}};
    if (max_bytes) {
      const auto r = store->evict(*max_bytes);
      out["evicted"] = {{"entries", r.evicted}, {"bytes", r.freed_bytes}, {"kept_in_use", r.kept_pinned}};
    }
  } else if (what == "verify") {
    const auto r = store->verify_all();
    out["checked"] = r.checked;
    out["removed"] = r.removed;
  } else if (what == "export") {
    const auto t0 = std::chrono::steady_clock::now();
    auto snap = core::storage::ExportSnapshot::take(*store, export_opts);
    if (snap && (*snap)->entries() == 0) {
      // An archive of nothing is a mistake to say, not a file to leave: a filter that names
      // a field's value wrongly, or the wrong --cache-dir.
      std::string filters;
      if (!o.since.empty()) filters += " --since " + o.since;
      for (const auto& m : o.match) filters += " --match " + m;
      std::cerr << "kforge cache export: no entry to export: "
                << (filters.empty() ? "the cache " + store->root().string() + " holds no kernel"
                                    : "none of the cache's kernels matches" + filters)
                << "; nothing written\n";
      return kExitFailed;
    }
    auto bytes = !snap ? core::Result<uint64_t>(std::unexpected(snap.error()))
                 : o.archive == "-"
                     ? (*snap)->write([](const char* d, size_t n) { return std::fwrite(d, 1, n, stdout) == n; })
                     : (*snap)->write_file(o.archive);
    if (!bytes) {
      std::cerr << "kforge cache export: " << bytes.error().message << "\n";
      return kExitFailed;
    }
    std::fflush(stdout);
    out["archive"] = o.archive;
    out["entries"] = (*snap)->entries();
    out["requests"] = (*snap)->requests();
    out["bytes"] = *bytes;
    out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } else if (what == "import") {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = core::storage::import_archive(*store, o.archive);
    if (!r) {
      std::cerr << "kforge cache import: " << r.error().message << "\n";
      out.update(r.error().extra);
      out["stats"] = store->stats().to_json();
      std::cout << out.dump(2) << "\n";
      return kExitFailed;
    }
    out.update(r->to_json());
    out["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  out["stats"] = store->stats().to_json();
  (o.archive == "-" ? std::cerr : std::cout) << out.dump(2) << "\n";
  return what == "verify" && !out["removed"].empty() ? kExitFailed : kExitOk;
}

}  // namespace

Run declare_cache(CLI::App& command) {
  auto o = std::make_shared<Options>();
  command.require_subcommand(1);
  auto sub = [&](const char* name, const char* what) {
    CLI::App* s = command.add_subcommand(name, what);
    s->add_option("--cache-dir", o->cache_dir, "the cache root [$XDG_CACHE_HOME/kforge, or ~/.cache/kforge]")
        ->envname("KFORGE_CACHE_DIR")
        ->type_name("DIR");
    s->callback([o, name] { o->what = name; });
    return s;
  };
  sub("stats", "entries, bytes, negative entries");
  CLI::App* gc = sub("gc",
                     "drop expired compile errors, dangling request keys and family links, dead staging; with "
                     "--max-bytes, evict least recently used entries down to N");
  gc->add_option("--max-bytes", o->max_bytes, "evict least recently used entries down to this size")->type_name("N");
  sub("verify", "re-hash every file; drop corrupt entries (exit 1 when any was)");
  CLI::App* ex = sub("export", "write the cache's kernels to one archive (tar + zstd)");
  ex->add_option("-o,--out", o->archive, "the archive (required); - is stdout")->type_name("FILE");
  ex->add_option("--since", o->since, "kernels built since T: unix seconds or an ISO-8601 UTC date/time")
      ->type_name("T");
  ex->add_option("--match", o->match,
                 "FIELD=GLOB, FIELD one of key, backend, kernel_name, arch, template; repeat: every one must hold")
      ->type_name("FIELD=GLOB");
  CLI::App* im = sub("import",
                     "verify every file of the archive, then publish its kernels (nothing when anything fails; "
                     "entries already there are left as they are)");
  im->add_option("FILE", o->archive, "the archive")->required()->type_name("");
  return [o] { return cache(*o); };
}

}  // namespace kforge::cli
