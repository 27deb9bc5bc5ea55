#include "core/build/key.hpp"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/base/hash.hpp"
#include "core/storage/disk_tier.hpp"

namespace kforge::core {
namespace fs = std::filesystem;

std::string_view key_source_text(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string kernel_key(const KeyInputs& in) {
  nlohmann::json argv = nlohmann::json::array();
  for (const auto& step : in.steps) {
    std::vector<std::string> a = step.argv;
    a[0] = fs::path(a[0]).filename().string();  // the identity covers the real path
    for (auto& arg : a) {  // a library is its identity, wherever this host keeps it
      for (const auto& inc : in.includes) {
        if (arg == "-I" + inc.dir.string()) arg = "-I" + inc.spelling;
      }
    }
    argv.push_back(a);
  }
  nlohmann::json canon = {
      {"format", storage::DiskTier::kFormat},
      {"backend", backend_name(in.backend)},
      {"archs", in.archs},
      {"compiler",
       {{"realpath", in.toolchain->compiler.string()},
        {"version_sha256", sha256_hex(in.toolchain->version_text)}}},
      {"argv", argv},
      {"source", key_source_text(in.source)},
  };
  return sha256_hex(canon.dump());
}

std::string export_key(const std::string& key, const std::string& name) {
  return sha256_hex(nlohmann::json{{"format", storage::DiskTier::kFormat}, {"export_of", key}, {"name", name}}.dump());
}

std::string kernel_symbol(Backend backend, std::string_view family, const std::string& key) {
  return std::string(backend_name(backend)) + "_" + std::string(family) + "_" + key.substr(0, 12);
}

Result<void> PreparedRequest::check_runnable() const {
  if (req.backend != Backend::kCpu || !toolchain) return {};
  if (auto why = toolchain->cpu_cannot_run(archs.front()); !why.empty())
    return fail_field("/arch", why + "; compile it without `benchmark`, or benchmark it on a host that has them");
  return {};
}

}  // namespace kforge::core
