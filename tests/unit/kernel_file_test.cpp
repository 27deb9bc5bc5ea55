// The kernel file format (core/templates/kernel_file.hpp): what a renderer takes from a file,
// the markers it refuses, the embedded files, and Subst's two placeholder forms.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/templates/kernel_file.hpp"
#include "core/templates/render_util.hpp"

namespace kforge::core::templates {
namespace {

TEST(KernelFile, SectionsKeepTheirLinesAndTheRenderedBranchOnly) {
  const KernelFile f("t.cuh",
                     "// outside: never rendered\n"
                     "#define $n$ 4\n"
                     "// @section a\n"
                     "int x = $n$;\n"
                     "#ifdef KFORGE_RENDERED\n"
                     "asm(\"$t$\");\n"
                     "#else  // KFORGE_RENDERED\n"
                     "asm(\"f16\");\n"
                     "#endif  // KFORGE_RENDERED\n"
                     "\n"
                     "// @end a\n"
                     "int between;\n"
                     "// @section b\n"
                     "#ifdef KFORGE_RENDERED\n"
                     "only();\n"
                     "#endif  // KFORGE_RENDERED\n"
                     "// @end b\n"
                     "// @section empty\n"
                     "// @end empty");  // no newline at the end
  EXPECT_EQ(f.section("a"), "int x = $n$;\nasm(\"$t$\");\n\n");
  EXPECT_EQ(f.section("b"), "only();\n");
  EXPECT_EQ(f.section("empty"), "");
  EXPECT_EQ(f.sections().size(), 3u);
  EXPECT_THROW(f.section("between"), std::logic_error);
}

TEST(KernelFile, MalformedMarkersAreRefusedWithTheLine) {
  auto error = [](const std::string& text) -> std::string {
    try {
      KernelFile("bad.cuh", text);
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "(parsed)";
  };
  EXPECT_EQ(error("// @section a\nx\n"), "kernel file bad.cuh, line 2: section `a` has no `// @end a`");
  EXPECT_EQ(error("// @section a\n// @section b\n// @end b\n// @end a\n"),
            "kernel file bad.cuh, line 2: `// @section b` is not a marker of the kernel file format");
  EXPECT_EQ(error("// @section a\n// @end a\n// @section a\n// @end a\n"), "kernel file bad.cuh, line 3: a second section `a`");
  EXPECT_EQ(error("// @section a\n// @end b\n"), "kernel file bad.cuh, line 2: `// @end b` closes section `a`");
  EXPECT_EQ(error("// @end a\n"), "kernel file bad.cuh, line 1: `// @end a` outside a section");
  EXPECT_EQ(error("// @section \n// @end \n"), "kernel file bad.cuh, line 1: a section needs a name without spaces");
  EXPECT_EQ(error("// @section a\n#else  // KFORGE_RENDERED\n// @end a\n"),
            "kernel file bad.cuh, line 2: `#else  // KFORGE_RENDERED` without `#ifdef KFORGE_RENDERED`");
  EXPECT_EQ(error("// @section a\n#endif  // KFORGE_RENDERED\n// @end a\n"),
            "kernel file bad.cuh, line 2: `#endif  // KFORGE_RENDERED` without `#ifdef KFORGE_RENDERED`");
  EXPECT_EQ(error("// @section a\n#ifdef KFORGE_RENDERED\n#ifdef KFORGE_RENDERED\n"),
            "kernel file bad.cuh, line 3: KFORGE_RENDERED alternatives do not nest");
  EXPECT_EQ(error("// @section a\n#ifdef KFORGE_RENDERED\n// @end a\n"),
            "kernel file bad.cuh, line 3: section `a` ends inside a KFORGE_RENDERED alternative");
  // A marker spelled almost right would otherwise be rendered as code.
  EXPECT_EQ(error("// @section a\n#ifdef KFORGE_RENDERED\nx\n#else // KFORGE_RENDERED\ny\n#endif  // KFORGE_RENDERED\n// @end a\n"),
            "kernel file bad.cuh, line 4: `#else // KFORGE_RENDERED` is not a marker of the kernel file format");
  EXPECT_EQ(error("// @section a\n#ifndef KFORGE_RENDERED\n// @end a\n"),
            "kernel file bad.cuh, line 2: `#ifndef KFORGE_RENDERED` is not a marker of the kernel file format");
  EXPECT_EQ(error("// @section a\n// @ends a\n// @end a\n"),
            "kernel file bad.cuh, line 2: `// @ends a` is not a marker of the kernel file format");
}

TEST(KernelFile, EveryEmbeddedFileParsesAndItsSectionsAreKernelText) {
  const auto paths = kernel_file_paths();
  EXPECT_GE(paths.size(), 11u);
  for (const auto& path : paths) {
    SCOPED_TRACE(path);
    const KernelFile& f = kernel_file(path);
    EXPECT_FALSE(f.sections().empty());
    for (const auto& [name, text] : f.sections()) {
      EXPECT_EQ(text.find("KFORGE_RENDERED"), std::string::npos) << name;
      EXPECT_EQ(text.find("standalone.h"), std::string::npos) << name;
      EXPECT_TRUE(text.empty() || text.back() == '\n') << name;
    }
  }
  EXPECT_EQ(&kernel_file("gemm/wgmma.cuh"), &kernel_file("gemm/wgmma.cuh"));  // parsed once
  EXPECT_THROW(kernel_file("gemm/missing.cuh"), std::logic_error);
}

TEST(Subst, ValuesAndInsertionPoints) {
  Subst s;
  s.set("n", 4).set("ARGS", ", e2").set("CHECK", "  check();\n").set("EMPTY", "");
  // A value replaces $name$; an insertion point /*$name$*/ goes with its comment marks, so
  // that `M/*$ARGS$*/` renders as `M, e2` and compiles as `M` on its own.
  EXPECT_EQ(s.apply("int k = $n$; f(M/*$ARGS$*/);"), "int k = 4; f(M, e2);");
  EXPECT_EQ(s.apply("/*$CHECK$*//*$EMPTY$*/  go();"), "  check();\n  go();");
  EXPECT_EQ(s.apply("/* $n$ */ /*$n$ */"), "/* 4 */ /*4 */");  // only the exact form is an insertion point
  EXPECT_EQ(s.apply("$ARGS$$n$"), ", e24");
  EXPECT_THROW(s.apply("/*$unset$*/"), std::logic_error);
  EXPECT_THROW(s.apply("a $n"), std::logic_error);
}

}  // namespace
}  // namespace kforge::core::templates
