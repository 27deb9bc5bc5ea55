#include "core/toolchain/codeobj.hpp"

#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include "core/base/fsutil.hpp"

namespace kforge::core {
namespace {

template <class T>
std::optional<T> load(std::string_view data, uint64_t off) {
  if (off > data.size() || data.size() - off < sizeof(T)) return std::nullopt;
  T v;
  std::memcpy(&v, data.data() + off, sizeof(T));
  return v;
}

Result<std::string_view> elf_check(std::string_view d) {
  if (d.size() < 64 ||
      d.substr(0, 4) !=
          "\x7f"
          "ELF" ||
      d[4] != 2 /* ELFCLASS64 */ || d[5] != 1 /* LE */) {
    return fail(ErrorKind::kInternal, "not a little-endian ELF64 file");
  }
  return d;
}

// The bytes of the named section, or an empty view when there is none.
Result<std::string_view> section(std::string_view d, std::string_view name) {
  auto shoff = load<uint64_t>(d, 0x28);
  auto shentsize = load<uint16_t>(d, 0x3A);
  auto shnum = load<uint16_t>(d, 0x3C);
  auto shstrndx = load<uint16_t>(d, 0x3E);
  if (!shoff || !shentsize || !shnum || !shstrndx || *shentsize < 64 || *shstrndx >= *shnum) {
    return fail(ErrorKind::kInternal, "malformed ELF section header table");
  }
  auto header = [&](uint16_t i) { return *shoff + uint64_t{i} * *shentsize; };
  auto str_off = load<uint64_t>(d, header(*shstrndx) + 24);
  if (!str_off) return fail(ErrorKind::kInternal, "malformed ELF string table");
  for (uint16_t i = 0; i < *shnum; ++i) {
    auto name_off = load<uint32_t>(d, header(i));
    auto off = load<uint64_t>(d, header(i) + 24);
    auto size = load<uint64_t>(d, header(i) + 32);
    if (!name_off || !off || !size)
      return fail(ErrorKind::kInternal, "truncated ELF section header");
    uint64_t at = *str_off + *name_off;
    if (at >= d.size()) continue;
    std::string_view sname(d.data() + at, strnlen(d.data() + at, d.size() - at));
    if (sname != name) continue;
    if (*off > d.size() || d.size() - *off < *size)
      return fail(ErrorKind::kInternal, "ELF section out of bounds");
    return d.substr(*off, *size);
  }
  return std::string_view{};
}

Result<void> parse_fatbin(std::string_view s, std::vector<CodeObject>& out) {
  uint64_t off = 0;
  while (off + 16 <= s.size()) {
    auto magic = load<uint32_t>(s, off);
    if (*magic != 0xBA55ED50u) break;  // padding after the last container
    uint64_t hsz = *load<uint16_t>(s, off + 6);
    uint64_t psz = *load<uint64_t>(s, off + 8);
    uint64_t p = off + hsz;
    uint64_t end = p + psz;
    if (end > s.size()) return fail(ErrorKind::kInternal, "fatbin container out of bounds");
    while (p + 32 <= end) {
      uint16_t kind = *load<uint16_t>(s, p);
      uint32_t ehs = *load<uint32_t>(s, p + 4);
      uint64_t size = *load<uint64_t>(s, p + 8);
      uint32_t arch = *load<uint32_t>(s, p + 28);
      if (ehs == 0) return fail(ErrorKind::kInternal, "fatbin entry with an empty header");
      out.push_back({kind == 1   ? "ptx"
                     : kind == 2 ? "cubin"
                                 : "unknown",
                     "sm_" + std::to_string(arch), size});
      p += ehs + size;
    }
    off = end;
  }
  return {};
}

Result<void> parse_bundle(std::string_view s, std::vector<CodeObject>& out) {
  static constexpr std::string_view kMagic = "__CLANG_OFFLOAD_BUNDLE__";
  for (size_t at = s.find(kMagic); at != std::string_view::npos; at = s.find(kMagic, at + 1)) {
    std::string_view b = s.substr(at);
    auto count = load<uint64_t>(b, kMagic.size());
    if (!count || *count > 4096) return fail(ErrorKind::kInternal, "malformed offload bundle");
    uint64_t p = kMagic.size() + 8;
    for (uint64_t i = 0; i < *count; ++i) {
      auto size = load<uint64_t>(b, p + 8);
      auto tlen = load<uint64_t>(b, p + 16);
      if (!size || !tlen || p + 24 + *tlen > b.size())
        return fail(ErrorKind::kInternal, "truncated offload bundle");
      std::string triple(b.substr(p + 24, *tlen));
      p += 24 + *tlen;
      auto dash = triple.find("--");
      if (triple.starts_with("host-") || dash == std::string::npos) continue;
      out.push_back({"hsaco", triple.substr(dash + 2), *size});
    }
  }
  return {};
}

}  // namespace

Result<std::vector<CodeObject>> list_code_objects(const std::filesystem::path& elf_file) {
  auto data = read_file(elf_file);
  if (!data) return std::unexpected(data.error());
  auto d = elf_check(*data);
  if (!d) return std::unexpected(d.error());
  std::vector<CodeObject> all;
  for (auto [name, parse] :
       {std::pair{".nv_fatbin", &parse_fatbin}, std::pair{".hip_fatbin", &parse_bundle}}) {
    auto s = section(*d, name);
    if (!s) return std::unexpected(s.error());
    if (auto r = parse(*s, all); !r) return std::unexpected(r.error());
  }
  // nvcc links the device runtime's own container too: list each (kind, arch) once.
  std::vector<CodeObject> out;
  std::set<std::pair<std::string, std::string>> seen;
  for (auto& o : all) {
    if (seen.insert({o.kind, o.arch}).second) out.push_back(std::move(o));
  }
  return out;
}

Result<int> elf_type(const std::filesystem::path& elf_file) {
  auto data = read_file(elf_file);
  if (!data) return std::unexpected(data.error());
  auto d = elf_check(*data);
  if (!d) return std::unexpected(d.error());
  return static_cast<int>(*load<uint16_t>(*d, 0x10));
}

nlohmann::json to_json(const std::vector<CodeObject>& objects) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& o : objects)
    j.push_back({{"kind", o.kind}, {"arch", o.arch}, {"bytes", o.bytes}});
  return j;
}

}  // namespace kforge::core
