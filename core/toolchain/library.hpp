// Header libraries (`kforge serve --library NAME=PATH`): trees of headers such as CUTLASS
// that kernel sources include. A request never passes a host path: it names include
// directories inside a registered library (`options.includes`: "cutlass/include"), and the
// library's identity — a digest of every file's relative path and contents, computed once
// at start — enters the key of every kernel that uses it, so two hosts with the same
// CUTLASS share kernels wherever it is installed, and a different CUTLASS never serves a
// stale one.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"

namespace kforge::core {

struct HeaderLibrary {
  std::string name;             // [A-Za-z0-9_.-]+
  std::filesystem::path root;   // realpath of the tree
  std::string identity;         // sha256 over (relative path, file sha256) of every file
  uint64_t files = 0;
  uint64_t bytes = 0;

  // How the library appears in a kernel key in place of its host path.
  std::string key_spelling() const { return "{library " + name + " " + identity + "}"; }
  nlohmann::json to_json() const;
};

// Reads `NAME=PATH` (as given to --library) and hashes the tree. An unknown or unreadable
// path, a name outside [A-Za-z0-9_.-], or a tree of no files is an Error naming the flag.
Result<HeaderLibrary> load_library(std::string_view spec);

// An include directory a request may name: `<library>` or `<library>/<relative dir>`.
// Resolves it to a directory inside the library's root (never outside it: no `..`, no
// absolute part, symlinks resolved and checked), or a kBadRequest naming `field`.
struct IncludeDir {
  const HeaderLibrary* library = nullptr;
  std::filesystem::path dir;  // absolute, inside library->root
  std::string spelling;       // as the key sees it: key_spelling() + "/" + relative dir
};
Result<IncludeDir> resolve_include(const std::vector<HeaderLibrary>& libraries,
                                   std::string_view include, const std::string& field);

}  // namespace kforge::core
