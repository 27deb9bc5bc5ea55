#include "core/toolchain/library.hpp"

#include <algorithm>
#include <regex>

#include "core/base/hash.hpp"

namespace kforge::core {
namespace fs = std::filesystem;

namespace {

bool valid_name(std::string_view n) {
  static const std::regex kName("[A-Za-z0-9_.-]{1,64}");
  return std::regex_match(n.begin(), n.end(), kName) && n != "." && n != "..";
}

}  // namespace

nlohmann::json HeaderLibrary::to_json() const {
  return {{"name", name}, {"identity", identity}, {"files", files}, {"bytes", bytes}};
}

Result<HeaderLibrary> load_library(std::string_view spec) {
  const auto eq = spec.find('=');
  if (eq == std::string_view::npos)
    return fail(ErrorKind::kBadRequest, "--library wants NAME=PATH, got `" + std::string(spec) + "`");
  HeaderLibrary lib;
  lib.name = std::string(spec.substr(0, eq));
  if (!valid_name(lib.name))
    return fail(ErrorKind::kBadRequest, "--library: the name `" + lib.name + "` is not [A-Za-z0-9_.-]{1,64}");
  std::error_code ec;
  lib.root = fs::canonical(fs::path(spec.substr(eq + 1)), ec);
  if (ec || !fs::is_directory(lib.root))
    return fail(ErrorKind::kBadRequest,
                "--library " + lib.name + ": `" + std::string(spec.substr(eq + 1)) + "` is not a directory");
  // (relative path, digest) of every regular file, sorted: the identity does not depend
  // on where the tree is or in which order the filesystem lists it.
  std::vector<std::pair<std::string, std::string>> entries;
  for (auto it = fs::recursive_directory_iterator(lib.root, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    auto digest = sha256_file(it->path());
    if (!digest) return fail(ErrorKind::kBadRequest, "--library " + lib.name + ": " + digest.error().message);
    entries.emplace_back(fs::relative(it->path(), lib.root).generic_string(), *digest);
    lib.bytes += it->file_size();
  }
  if (ec) return fail(ErrorKind::kBadRequest, "--library " + lib.name + ": " + ec.message());
  if (entries.empty()) return fail(ErrorKind::kBadRequest, "--library " + lib.name + ": no files under " + lib.root.string());
  std::sort(entries.begin(), entries.end());
  std::string text;
  for (const auto& [path, digest] : entries) text += path + '\0' + digest + '\n';
  lib.identity = sha256_hex(text);
  lib.files = entries.size();
  return lib;
}

Result<IncludeDir> resolve_include(const std::vector<HeaderLibrary>& libraries,
                                   std::string_view include, const std::string& field) {
  const auto slash = include.find('/');
  const std::string name(include.substr(0, slash));
  std::string rel = slash == std::string_view::npos ? "" : std::string(include.substr(slash + 1));
  while (!rel.empty() && rel.back() == '/') rel.pop_back();
  auto lib = std::find_if(libraries.begin(), libraries.end(), [&](const HeaderLibrary& l) { return l.name == name; });
  if (lib == libraries.end()) {
    std::string known;
    for (const auto& l : libraries) known += (known.empty() ? "" : ", ") + l.name;
    return fail_field(field, "no header library `" + name + "` on this server (registered: " +
                                 (known.empty() ? "none" : known) + "; see GET /toolchains)");
  }
  for (const auto& part : fs::path(rel)) {
    const std::string p = part.string();
    if (p == ".." || p == "." || p.empty() || part.is_absolute() || p == "/")
      return fail_field(field, "`" + std::string(include) + "`: a directory inside the library, without `.`, `..` or a leading /");
  }
  std::error_code ec;
  fs::path dir = fs::canonical(lib->root / rel, ec);
  const std::string root = lib->root.string();
  if (ec || !fs::is_directory(dir) ||
      !(dir == lib->root || dir.string().starts_with(root + "/")))
    return fail_field(field, "`" + std::string(include) + "` is not a directory of library `" + name + "`");
  IncludeDir out;
  out.library = &*lib;
  out.dir = dir;
  out.spelling = lib->key_spelling() + (rel.empty() ? "" : "/" + fs::relative(dir, lib->root).generic_string());
  return out;
}

}  // namespace kforge::core
