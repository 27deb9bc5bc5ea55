#include "unit/scratch.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

namespace kforge::testing {

Scratch::Scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "scratch";
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  path_ = std::filesystem::temp_directory_path() /
          ("kforge-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

Scratch::~Scratch() {
  if (std::getenv("KFORGE_KEEP_SCRATCH") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

}  // namespace kforge::testing
