#include "core/templates/kernel_file.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

namespace kforge::core::templates {

KernelFile::KernelFile(std::string path, std::string_view text) : path_(std::move(path)) {
  constexpr std::string_view kOpen = "// @section ", kClose = "// @end ";
  constexpr std::string_view kIf = "#ifdef KFORGE_RENDERED", kElse = "#else  // KFORGE_RENDERED",
                             kEndif = "#endif  // KFORGE_RENDERED";
  enum class Branch { kNone, kRendered, kStandalone };
  std::string* current = nullptr;
  std::string name;
  Branch branch = Branch::kNone;
  size_t number = 0;
  auto fail = [&](const std::string& what) {
    throw std::logic_error("kernel file " + path_ + ", line " + std::to_string(number) + ": " + what);
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = text.find('\n', pos);
    const std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++number;
    if (!current) {
      if (line.starts_with(kOpen)) {
        name = std::string(line.substr(kOpen.size()));
        if (name.empty() || name.find_first_of(" \t") != std::string::npos) fail("a section needs a name without spaces");
        auto [it, fresh] = sections_.try_emplace(name);
        if (!fresh) fail("a second section `" + name + "`");
        current = &it->second;
      } else if (line.starts_with(kClose)) {
        fail("`" + std::string(line) + "` outside a section");
      }
      continue;
    }
    if (line.starts_with(kClose)) {
      if (line.substr(kClose.size()) != name) fail("`" + std::string(line) + "` closes section `" + name + "`");
      if (branch != Branch::kNone) fail("section `" + name + "` ends inside a KFORGE_RENDERED alternative");
      current = nullptr;
    } else if (line == kIf) {
      if (branch != Branch::kNone) fail("KFORGE_RENDERED alternatives do not nest");
      branch = Branch::kRendered;
    } else if (line == kElse) {
      if (branch != Branch::kRendered) fail("`" + std::string(kElse) + "` without `" + std::string(kIf) + "`");
      branch = Branch::kStandalone;
    } else if (line == kEndif) {
      if (branch == Branch::kNone) fail("`" + std::string(kEndif) + "` without `" + std::string(kIf) + "`");
      branch = Branch::kNone;
    } else if (line.find("KFORGE_RENDERED") != std::string_view::npos || line.starts_with("// @")) {
      fail("`" + std::string(line) + "` is not a marker of the kernel file format");
    } else if (branch != Branch::kStandalone) {
      current->append(line);
      current->push_back('\n');
    }
  }
  if (current) fail("section `" + name + "` has no `// @end " + name + "`");
}

const std::string& KernelFile::section(const std::string& name) const {
  const auto it = sections_.find(name);
  if (it == sections_.end()) throw std::logic_error("kernel file " + path_ + " has no section `" + name + "`");
  return it->second;
}

const KernelFile& kernel_file(std::string_view path) {
  // Parsed once each, on first use; the map is built under the lock, entries never move.
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<KernelFile>, std::less<>> parsed;
  std::lock_guard lock(mu);
  if (const auto it = parsed.find(path); it != parsed.end()) return *it->second;
  for (const auto& f : embedded::kernel_files()) {
    if (f.path == path) {
      auto file = std::make_unique<KernelFile>(std::string(path), f.text);
      return *parsed.emplace(std::string(path), std::move(file)).first->second;
    }
  }
  throw std::logic_error("no kernel file " + std::string(path) + " is embedded (core/CMakeLists.txt, KFORGE_KERNEL_FILES)");
}

std::vector<std::string> kernel_file_paths() {
  std::vector<std::string> out;
  for (const auto& f : embedded::kernel_files()) out.emplace_back(f.path);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kforge::core::templates
