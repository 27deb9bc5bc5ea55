// Why did this miss (issue 16): every kernel key is a hash of named inputs, and each entry
// keeps those inputs in its manifest ("inputs", small) with its kernel family ("family").
// On a miss, the nearest entry of the same family says which inputs changed and how.
//
// The inputs, flat and by name (the names a reason uses):
//   arch        the resolved target(s), joined with ","
//   compiler    {"version" (first line of its --version), "path", "identity"}
//   flags       every compiler argument but the program and what `arch` decides, steps
//               joined by "&&"; a header library as its identity, not its host path
//   libraries   the header libraries the request includes, by identity
//   source      sha256 of the source with KERNEL_NAME (what the compiler gets, renamed)
//   template mode also: template, reference, params.<name> (each parameter), inputs[<i>]
//   (each tensor), output, epilogue, input_reorder
// A family is "the same kernel": one template (and its reference) on one backend, or a
// source kernel by its backend and its signature's argument list (so an edit to its body
// stays in the family).
//
// The reason lists the inputs that differ, each {"input", "was", "now"}; "flags" as the
// arguments only one side has; "source" with "diff" (unified, KERNEL_NAME in place of the
// kernel's name). In template mode the source is a product of the other inputs and is
// named only when none of them differs (the template itself rendered differently: kforge
// changed). No entry of the family: one item {"input": "kernel", "detail": ...}.
//
// The family index lives in the store (storage::DiskTier::family_members); these functions only
// read manifests and sources through it (the store's own checks may still drop a malformed
// or expired entry they meet, as any lookup would). Thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/build/key.hpp"
#include "core/storage/disk_tier.hpp"

namespace kforge::core {

nlohmann::json key_inputs(const PreparedRequest& prepared, const RenderedKernel& kernel);
std::string kernel_family(const PreparedRequest& prepared, const RenderedKernel& kernel);

// The named inputs in which `now` differs from `was` (both as key_inputs() makes them), in
// a fixed order; "source" without its diff.
nlohmann::json input_differences(const nlohmann::json& was, const nlohmann::json& now);

// What one explanation is about: a kernel that is not (or was not) in the cache.
struct MissQuery {
  std::string key;     // never its own neighbour
  std::string family;
  nlohmann::json inputs;
  std::string source;  // with KERNEL_NAME
  std::string source_name = "source";  // the diff's file name
  // Only entries published before this time (ns, storage::DiskTier::published_ns) are neighbours:
  // "why did this entry miss when it was built" looks at what was there then.
  int64_t published_before_ns = std::numeric_limits<int64_t>::max();
};

// {"nearest": {"key", "kernel_name", "status", "created_at"} | null, "miss_reason": [...]}.
// Looks at the family's most recent `candidates` entries; the nearest is the one with the
// fewest differing inputs, then the fewest differing source lines, then the newest.
nlohmann::json explain_miss(storage::DiskTier& store, const MissQuery& query, size_t candidates = 64);

// The same for a published entry: why it missed when it was built, from its manifest and
// source. {"key", "kernel_name", "created_at", "inputs", "nearest", "miss_reason"}. An
// entry built before kforge recorded inputs gets a reason that says so.
nlohmann::json explain_entry(storage::DiskTier& store, const nlohmann::json& manifest);

}  // namespace kforge::core
