// What a cpu `arch` means (DESIGN §6): a -march name plus the ISA features and cache
// tunings that differ from that name's defaults, in one canonical spelling that enters the
// kernel key and expands to the compiler flags. Written as a grammar:
//
//   cpu-target := march { "+" item }           items sorted, no repeats
//   item       := feature | "no-" feature | param "=" digits
//   feature    := an ISA extension the compiler knows as -m<feature> (avx512f, sse4.1, amx-tile)
//   param      := l1-cache-size | l1-cache-line-size | l2-cache-size
//
// `native` resolves to the host's whole target: `g++ -march=native` picks a -march name
// (znver3 on a Zen 4 with g++ 12) and then switches features on and off and sets cache
// sizes; all of that is kept, so a Zen 4 resolves to `znver3+avx512bf16+...+avx512f+...`,
// and two hosts that differ in any feature never share a key. An explicit name
// (`x86-64-v3`, `sapphirerapids`) is a target without items.
//
// The functions here are pure: they parse compiler output handed to them, so tests can
// feed fixed feature lists. core/toolchain/toolchain runs the compiler.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/base/error.hpp"

namespace kforge::core {

struct CpuTarget {
  std::string march;
  std::vector<std::string> items;  // sorted

  // Parses and normalises (sorts) a target; every feature must be in `known`. Errors name
  // `field` and the offending item.
  static Result<CpuTarget> parse(std::string_view text, const std::set<std::string>& known,
                                 const std::string& field);
  std::string str() const;
  // -march=<march> -m<feature> -mno-<feature> --param=<param>=<n>, in item order.
  std::vector<std::string> flags() const;
};

// The host's target from `g++ -march=native -### -E -`'s stderr (the cc1 line) and the
// features the bare -march name it names enables (`march_features`). Also fills `known`
// with every feature the expansion mentions (switched on or off): the compiler's ISA list.
Result<CpuTarget> cpu_native_target(const std::string& expansion,
                                    const std::set<std::string>& march_features,
                                    std::set<std::string>* known);
// The -march name in an expansion, for asking about its defaults before resolving.
std::string cpu_expansion_march(const std::string& expansion);

// The enabled features in `g++ <flags> -Q --help=target` output, limited to `known`.
std::set<std::string> cpu_enabled_features(const std::string& help_target,
                                           const std::set<std::string>& known);

// The machine model the cpu templates size their register blocking by.
struct CpuIsa {
  std::vector<std::string> features;  // enabled ISA extensions, sorted
  int vector_floats = 4;              // 16 with AVX-512F, 8 with AVX, else 4 (SSE)
  int vector_registers = 16;          // 32 zmm with AVX-512F, else 16
  bool fma = false;                   // fused multiply-add (FMA3)

  static CpuIsa from_features(const std::set<std::string>& features);
  bool has(std::string_view feature) const;
  // The features of this ISA that `host` lacks: non-empty means code for this ISA may die
  // of SIGILL there.
  std::vector<std::string> missing_on(const CpuIsa& host) const;
  nlohmann::json to_json() const;
};

}  // namespace kforge::core
