// Kernel files: the kernel text of the templates, as files under core/templates/ (the gemm's in
// gemm/, the preludes in prelude/) that compile on their own, embedded into the binary at build
// time (core/CMakeLists.txt). A renderer takes named sections of a file and fills in their
// placeholders with Subst (render_util.hpp). The format, as a grammar over lines:
//
//   file        := { other | section }
//   section     := "// @section " NAME  { line | alternative }  "// @end " NAME
//   alternative := "#ifdef KFORGE_RENDERED"  { line }
//                  [ "#else  // KFORGE_RENDERED"  { line } ]  "#endif  // KFORGE_RENDERED"
//
// A section's text is its lines, each with its newline, keeping only the first branch of each
// alternative (the text as rendered; the #else branch is what a compile on its own sees
// instead). Lines outside sections are never rendered: includes, macros for the `$name$`
// placeholders, stand-ins for what the renderer writes in front of the file. Sections do not
// nest, names are unique, and any other line in a section that mentions KFORGE_RENDERED or
// starts with "// @" is an error, so a typo in a marker cannot go unnoticed.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kforge::embedded {
// Each kernel file's path under core/templates/ and its bytes: a table that core/CMakeLists.txt
// generates from KFORGE_KERNEL_FILES.
struct KernelFileBytes {
  std::string_view path, text;
};
std::span<const KernelFileBytes> kernel_files();
}  // namespace kforge::embedded

namespace kforge::core::templates {

class KernelFile {
 public:
  // Parses `text`; `path` names the file in errors. Throws std::logic_error on a malformed file.
  KernelFile(std::string path, std::string_view text);
  // The text of section `name`; throws std::logic_error when there is none.
  const std::string& section(const std::string& name) const;
  const std::map<std::string, std::string>& sections() const { return sections_; }

 private:
  std::string path_;
  std::map<std::string, std::string> sections_;
};

// The embedded kernel file at `path` (relative to core/templates/, e.g. "gemm/wgmma.cuh"),
// parsed on first use. Throws std::logic_error for a path that is not embedded or a file that
// does not parse (a kforge built that way fails its first rendering and the unit tests).
const KernelFile& kernel_file(std::string_view path);

// The paths of every embedded kernel file, sorted.
std::vector<std::string> kernel_file_paths();

}  // namespace kforge::core::templates
