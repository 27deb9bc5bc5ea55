// A scratch directory per test, removed afterwards unless KFORGE_KEEP_SCRATCH is set.
#pragma once

#include <filesystem>
#include <string>

namespace kforge::testing {

class Scratch {
 public:
  Scratch();
  ~Scratch();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kforge::testing
