// A line diff of two texts in the unified format (`diff -u`), for people to read: why a
// kernel's source missed the cache. Myers' O(ND) algorithm on the lines between the common
// head and tail; past `max_edits` changed lines it stops looking for the shortest script
// and shows the rest of the middle as one replaced block (still a correct diff, only not
// minimal). The output is cut at `max_bytes` with a last line saying so. Pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kforge::core {

struct DiffOptions {
  size_t context = 3;
  size_t max_edits = 2000;
  size_t max_bytes = 64 << 10;
};

// "" when the texts are equal; otherwise "--- <from>\n+++ <to>\n@@ -l,n +l,n @@\n..." with
// "\ No newline at end of file" where a text does not end in one, as GNU diff writes it.
std::string unified_diff(std::string_view was, std::string_view now, std::string_view from,
                         std::string_view to, const DiffOptions& options = {});

}  // namespace kforge::core
