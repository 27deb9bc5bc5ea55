#include "core/base/abi.hpp"

#include <cctype>
#include <regex>
#include <sstream>

namespace kforge::core {
namespace {

bool is_ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// Blanks out comments and string/char literals, keeping offsets, so that a
// `KERNEL_NAME(` inside a comment or a string is not taken for the signature.
std::string strip_comments(std::string_view src) {
  std::string out(src);
  enum { kCode, kLine, kBlock, kStr, kChr } st = kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    char c = out[i];
    char n = i + 1 < out.size() ? out[i + 1] : '\0';
    switch (st) {
      case kCode:
        if (c == '/' && n == '/') {
          st = kLine;
          out[i] = ' ';
        } else if (c == '/' && n == '*') {
          st = kBlock;
          out[i] = ' ';
          out[++i] = ' ';
        } else if (c == '"') {
          st = kStr;
        } else if (c == '\'') {
          st = kChr;
        }
        break;
      case kLine:
        if (c == '\n')
          st = kCode;
        else
          out[i] = ' ';
        break;
      case kBlock:
        if (c == '*' && n == '/') {
          st = kCode;
          out[i] = ' ';
          out[++i] = ' ';
        } else if (c != '\n')
          out[i] = ' ';
        break;
      case kStr:
      case kChr:
        if (c == '\\') {
          out[i] = ' ';
          if (i + 1 < out.size() && out[i + 1] != '\n') out[++i] = ' ';
        } else if ((st == kStr && c == '"') || (st == kChr && c == '\''))
          st = kCode;
        else if (c != '\n')
          out[i] = ' ';
        break;
    }
  }
  return out;
}

std::string collapse_spaces(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out.push_back(' ');
    space = false;
    out.push_back(c);
  }
  return out;
}

// "const half *" -> "const half*"; "half * __restrict__" -> "half* __restrict__".
std::string normalize_type(std::string_view t) {
  std::string s = collapse_spaces(t);
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ' ' && i + 1 < s.size() && (s[i + 1] == '*' || s[i + 1] == '&')) continue;
    out.push_back(s[i]);
  }
  return out;
}

std::vector<std::string> split_top_level(std::string_view params) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : params) {
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!collapse_spaces(cur).empty() || !out.empty()) out.push_back(cur);
  return out;
}

std::string remove_words(std::string s, std::initializer_list<std::string_view> words) {
  for (std::string_view w : words) {
    for (size_t pos = s.find(w); pos != std::string::npos; pos = s.find(w, pos)) {
      bool left = pos == 0 || !is_ident_char(s[pos - 1]);
      bool right = pos + w.size() >= s.size() || !is_ident_char(s[pos + w.size()]);
      if (left && right)
        s.erase(pos, w.size());
      else
        pos += w.size();
    }
  }
  return collapse_spaces(s);
}

bool is_integer_ctype(std::string_view t) {
  static const char* kInts[] = {"int",       "int32_t",  "int64_t",  "long",         "long long",
                                "size_t",    "uint32_t", "uint64_t", "uint8_t",      "int8_t",
                                "int16_t",   "uint16_t", "unsigned", "unsigned int", "bool",
                                "ptrdiff_t", "index_t",  "float",    "double"};
  for (const char* k : kInts) {
    if (t == k) return true;
  }
  return false;
}

Error sig_error(std::string message) {
  return Error::bad_field("/source", std::move(message));
}

}  // namespace

std::string_view arg_kind_name(ArgKind k) {
  switch (k) {
    case ArgKind::kTensor:
      return "tensor";
    case ArgKind::kScalar:
      return "scalar";
    case ArgKind::kWorkspaceSize:
      return "workspace_size";
    case ArgKind::kWorkspace:
      return "workspace";
    case ArgKind::kStream:
      return "stream";
  }
  return "?";
}

std::string Abi::signature() const {
  std::ostringstream ss;
  ss << "int " << symbol << "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) ss << ", ";
    ss << args[i].ctype << ' ' << args[i].name;
  }
  ss << ")";
  return ss.str();
}

std::vector<const AbiArg*> Abi::tensors() const {
  std::vector<const AbiArg*> out;
  for (const auto& a : args) {
    if (a.kind == ArgKind::kTensor) out.push_back(&a);
  }
  return out;
}

nlohmann::json Abi::to_json() const {
  nlohmann::json jargs = nlohmann::json::array();
  for (const auto& a : args) {
    nlohmann::json j = {{"name", a.name}, {"kind", arg_kind_name(a.kind)}, {"ctype", a.ctype}};
    if (a.kind == ArgKind::kTensor) {
      j["binds"] = a.binds;
      j["dtype"] = a.dtype ? nlohmann::json(dtype_name(*a.dtype)) : nlohmann::json(nullptr);
      j["const"] = a.is_const;
      if (a.layout) {
        nlohmann::json sizes = nlohmann::json::array();
        for (size_t d = 0; d < a.layout->sizes.size(); ++d) {
          const bool named = d < a.layout->size_args.size() && !a.layout->size_args[d].empty();
          sizes.push_back(named ? nlohmann::json(a.layout->size_args[d]) : nlohmann::json(a.layout->sizes[d]));
        }
        j["sizes"] = std::move(sizes);
        j["strides"] = a.layout->strides;
        j["offset"] = a.layout->offset;
      }
    }
    if (a.kind == ArgKind::kScalar && a.value) j["value"] = *a.value;
    jargs.push_back(std::move(j));
  }
  return {{"symbol", symbol},
          {"signature", signature()},
          {"workspace_bytes",
           workspace_bytes ? nlohmann::json(*workspace_bytes) : nlohmann::json(nullptr)},
          {"args", std::move(jargs)}};
}

Result<Abi> Abi::from_json(const nlohmann::json& j) {
  try {
    Abi abi;
    abi.symbol = j.at("symbol").get<std::string>();
    if (!j.at("workspace_bytes").is_null())
      abi.workspace_bytes = j.at("workspace_bytes").get<uint64_t>();
    for (const auto& ja : j.at("args")) {
      AbiArg a;
      a.name = ja.at("name").get<std::string>();
      a.ctype = ja.at("ctype").get<std::string>();
      std::string kind = ja.at("kind").get<std::string>();
      for (ArgKind k : {ArgKind::kTensor, ArgKind::kScalar, ArgKind::kWorkspaceSize,
                        ArgKind::kWorkspace, ArgKind::kStream}) {
        if (arg_kind_name(k) == kind) a.kind = k;
      }
      if (a.kind == ArgKind::kTensor) {
        a.binds = ja.at("binds").get<std::string>();
        if (!ja.at("dtype").is_null()) a.dtype = parse_dtype(ja.at("dtype").get<std::string>());
        a.is_const = ja.value("const", false);
        if (ja.contains("sizes") && ja.contains("strides")) {
          AbiArg::Layout l;
          for (const auto& d : ja.at("sizes")) {
            l.sizes.push_back(d.is_string() ? 0 : d.get<int64_t>());
            l.size_args.push_back(d.is_string() ? d.get<std::string>() : "");
          }
          l.strides = ja.at("strides").get<std::vector<int64_t>>();
          l.offset = ja.value("offset", int64_t{0});
          a.layout = std::move(l);
        }
      }
      if (ja.contains("value")) a.value = ja.at("value").get<int64_t>();
      abi.args.push_back(std::move(a));
    }
    return abi;
  } catch (const nlohmann::json::exception& e) {
    return fail(ErrorKind::kInternal, std::string("malformed abi: ") + e.what());
  }
}

Result<Abi> parse_signature(std::string_view source, Backend backend) {
  if (source.find(kKernelNamePlaceholder) == std::string_view::npos) {
    return std::unexpected(sig_error("the source does not contain the literal KERNEL_NAME"));
  }
  const std::string code = strip_comments(source);
  static const std::regex kDecl(R"(\bPT_EXPORT\s+int\s+KERNEL_NAME\s*\()");
  std::smatch m;
  if (!std::regex_search(code, m, kDecl)) {
    return std::unexpected(sig_error(
        "no exported signature: expected `PT_EXPORT int KERNEL_NAME(...)` outside comments"));
  }
  size_t open = static_cast<size_t>(m.position(0) + m.length(0));
  int depth = 1;
  size_t close = open;
  for (; close < code.size() && depth > 0; ++close) {
    if (code[close] == '(') ++depth;
    if (code[close] == ')') --depth;
  }
  if (depth != 0)
    return std::unexpected(sig_error("unbalanced parentheses in the KERNEL_NAME signature"));
  std::string_view params(code.data() + open, close - 1 - open);

  Abi abi;
  abi.symbol = std::string(kKernelNamePlaceholder);
  std::vector<std::string> parts = split_top_level(params);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string p = collapse_spaces(parts[i]);
    if (p.find('=') != std::string::npos) p = collapse_spaces(p.substr(0, p.find('=')));
    size_t end = p.size();
    size_t start = end;
    while (start > 0 && is_ident_char(p[start - 1])) --start;
    std::string name = p.substr(start, end - start);
    std::string type = normalize_type(p.substr(0, start));
    if (name.empty() || type.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) {
      return std::unexpected(
          sig_error("parameter " + std::to_string(i) + " (`" + p + "`) needs a type and a name"));
    }
    AbiArg arg;
    arg.name = name;
    arg.ctype = type;
    abi.args.push_back(std::move(arg));
  }
  if (abi.args.size() < 3) {
    return std::unexpected(
        sig_error("the signature must end with `size_t* workspace_size, uint8_t* workspace, " +
                  std::string(stream_ctype(backend)) + " stream`"));
  }
  const size_t n = abi.args.size();
  auto expect = [&](size_t idx, std::string_view ctype, ArgKind kind) -> Result<void> {
    AbiArg& a = abi.args[idx];
    if (remove_words(a.ctype, {"__restrict__", "__restrict"}) != ctype) {
      return std::unexpected(sig_error("argument " + std::to_string(idx) + " `" + a.name +
                                       "` must have type `" + std::string(ctype) + "` (got `" +
                                       a.ctype + "`) for the " +
                                       std::string(backend_name(backend)) + " ABI"));
    }
    a.kind = kind;
    return {};
  };
  if (auto r = expect(n - 3, "size_t*", ArgKind::kWorkspaceSize); !r)
    return std::unexpected(r.error());
  if (auto r = expect(n - 2, "uint8_t*", ArgKind::kWorkspace); !r)
    return std::unexpected(r.error());
  if (auto r = expect(n - 1, stream_ctype(backend), ArgKind::kStream); !r)
    return std::unexpected(r.error());

  for (size_t i = 0; i + 3 < n; ++i) {
    AbiArg& a = abi.args[i];
    std::string bare = remove_words(a.ctype, {"__restrict__", "__restrict", "restrict"});
    if (!bare.empty() && bare.back() == '*') {
      a.kind = ArgKind::kTensor;
      a.is_const = bare.starts_with("const ") || bare.find(" const") != std::string::npos;
      std::string elem = remove_words(bare.substr(0, bare.size() - 1), {"const", "volatile"});
      if (elem.find('*') != std::string::npos) {
        return std::unexpected(sig_error("argument " + std::to_string(i) + " `" + a.name +
                                         "` is a pointer to a pointer, which the ABI cannot pass"));
      }
      a.dtype = dtype_from_ctype(elem);
      a.binds = a.name;
    } else {
      std::string scalar = remove_words(bare, {"const"});
      if (!is_integer_ctype(scalar)) {
        return std::unexpected(sig_error("argument " + std::to_string(i) + " `" + a.name +
                                         "` has type `" + a.ctype +
                                         "`: the ABI passes tensors as pointers and sizes as "
                                         "integer or floating-point scalars"));
      }
      a.kind = ArgKind::kScalar;
    }
  }
  return abi;
}

std::string replace_identifier(std::string_view source, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(source.size() + 64);
  size_t pos = 0;
  while (true) {
    size_t hit = source.find(from, pos);
    if (hit == std::string_view::npos) break;
    size_t after = hit + from.size();
    bool left = hit == 0 || !is_ident_char(source[hit - 1]);
    bool right = after >= source.size() || !is_ident_char(source[after]);
    out.append(source.substr(pos, hit - pos));
    out.append(left && right ? to : from);
    pos = after;
  }
  out.append(source.substr(pos));
  return out;
}

bool contains_identifier(std::string_view source, std::string_view name) {
  for (size_t hit = source.find(name); hit != std::string_view::npos; hit = source.find(name, hit + 1)) {
    size_t after = hit + name.size();
    if ((hit == 0 || !is_ident_char(source[hit - 1])) && (after >= source.size() || !is_ident_char(source[after])))
      return true;
  }
  return false;
}

std::string substitute_kernel_name(std::string_view source, std::string_view symbol) {
  return replace_identifier(source, kKernelNamePlaceholder, symbol);
}

}  // namespace kforge::core
