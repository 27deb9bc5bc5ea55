// Lists the device code an artifact carries, read straight from the ELF file:
//   cuda: the .nv_fatbin section, a sequence of fatbin containers
//         container := magic 0xBA55ED50 (u32) version (u16) header_size (u16) payload_size (u64)
//                      entry*
//         entry     := kind (u16: 1 ptx, 2 cubin) (u16) header_size (u32) payload_size (u64)
//                      ... arch (u32 at offset 28, e.g. 90) ... payload
//   rocm: the .hip_fatbin section, a clang offload bundle
//         bundle    := "__CLANG_OFFLOAD_BUNDLE__" count (u64)
//                      (offset (u64) size (u64) triple_size (u64) triple)*count
//         triple    := "hipv4-amdgcn-amd-amdhsa--gfx90a" (host entries are skipped)
// A file without such a section yields an empty list; a file that is not ELF64, or a
// section that does not parse, is an Error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"

namespace kforge::core {

struct CodeObject {
  std::string kind;  // "cubin", "ptx", "hsaco"
  std::string arch;  // "sm_90", "gfx90a"
  uint64_t bytes = 0;
};

Result<std::vector<CodeObject>> list_code_objects(const std::filesystem::path& elf_file);
// The ELF e_type of a file: 1 relocatable (.o), 3 shared object; Error if not ELF64.
Result<int> elf_type(const std::filesystem::path& elf_file);
nlohmann::json to_json(const std::vector<CodeObject>& objects);

}  // namespace kforge::core
