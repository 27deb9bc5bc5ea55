// libFuzzer target: `kforge cache import` (core/storage/archive.cpp) of an archive from
// another machine, on arbitrary bytes (a tar: the importer takes it compressed or not).
// Whatever the archive holds — names that climb out (`../`), absolute names, links,
// devices, huge or truncated members, duplicates, a lying index — the import either
// publishes every entry it names, verified, or nothing; it writes nothing outside the
// store; it leaves no link in the store and nothing in its staging area.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <unistd.h>

#include "core/storage/archive.hpp"
#include "core/storage/disk_tier.hpp"

namespace fs = std::filesystem;

namespace {

[[noreturn]] void broken(const std::string& what) {
  std::fprintf(stderr, "archive_fuzz: %s\n", what.c_str());
  std::abort();
}

size_t entries_under(const fs::path& dir) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
    if (it->is_directory() && it.depth() == 1) ++n;  // objects/<xx>/<key>
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const fs::path base = fs::temp_directory_path() / ("kforge-archive-fuzz." + std::to_string(::getpid()));
  const fs::path work = base / "work", store_root = work / "store", input = base / "archive.tar";
  fs::remove_all(work);
  fs::create_directories(work);
  {
    std::ofstream out(input, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  {
    kforge::core::storage::DiskTier store(store_root);
    auto report = kforge::core::storage::import_archive(store, input);
    const size_t published = entries_under(store_root / "v1" / "objects");
    if (!report && published != 0) broken("a failed import published " + std::to_string(published) + " entries");
    if (report && published != report->imported) broken("the report and the store disagree");
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(store_root, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
      if (it->is_symlink()) broken("a link in the store: " + it->path().string());
    for (const auto& e : fs::directory_iterator(store.staging_root()))  // its lock file only
      if (e.path().filename() != ".lock") broken("staging left behind: " + e.path().string());
  }
  // Nothing beside the store in the work directory, and nothing beside the two in base.
  for (const auto& e : fs::directory_iterator(work))
    if (e.path() != store_root) broken("written outside the store: " + e.path().string());
  for (const auto& e : fs::directory_iterator(base))
    if (e.path() != work && e.path() != input) broken("written outside the work directory: " + e.path().string());
  return 0;
}
