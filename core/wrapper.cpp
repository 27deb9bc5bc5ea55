#include "core/wrapper.hpp"

#include <set>
#include <sstream>

namespace kforge::core {
namespace {

std::string py_ctype(std::string_view ctype) {
  std::string t(ctype);
  for (std::string_view w : {"const ", "__restrict__ ", "__restrict "}) {
    if (t.starts_with(w)) t.erase(0, w.size());
  }
  if (t == "int64_t" || t == "long" || t == "long long" || t == "ptrdiff_t" || t == "index_t")
    return "c_int64";
  if (t == "uint64_t") return "c_uint64";
  if (t == "size_t") return "c_size_t";
  if (t == "uint32_t" || t == "unsigned" || t == "unsigned int") return "c_uint32";
  if (t == "uint8_t") return "c_uint8";
  if (t == "int8_t") return "c_int8";
  if (t == "int16_t") return "c_int16";
  if (t == "uint16_t") return "c_uint16";
  if (t == "bool") return "c_bool";
  if (t == "float") return "c_float";
  if (t == "double") return "c_double";
  return "c_int32";
}

// Python identifiers for C parameter names that collide with keywords or builtins we use.
std::string py_name(const std::string& name) {
  static const std::set<std::string> kReserved = {
      "False",   "None",     "True",     "and",    "as",     "assert", "async",  "await",
      "break",   "class",    "continue", "def",    "del",    "elif",   "else",   "except",
      "finally", "for",      "from",     "global", "if",     "import", "in",     "is",
      "lambda",  "nonlocal", "not",      "or",     "pass",   "raise",  "return", "try",
      "while",   "with",     "yield",    "stream", "ctypes", "os",     "k",      "rc"};
  return kReserved.contains(name) ? name + "_" : name;
}

}  // namespace

std::string python_wrapper(const Abi& abi, Backend backend) {
  const std::string& sym = abi.symbol;
  std::ostringstream argtypes;
  std::ostringstream params;
  std::ostringstream call;
  std::ostringstream query_call;
  bool first_param = true;
  auto add_param = [&](const std::string& p) {
    if (!first_param) params << ", ";
    params << p;
    first_param = false;
  };
  for (size_t i = 0; i < abi.args.size(); ++i) {
    const AbiArg& a = abi.args[i];
    const char* sep = i ? ", " : "";
    switch (a.kind) {
      case ArgKind::kTensor:
        argtypes << sep << "c_void_p";
        call << sep << "c_void_p(" << py_name(a.binds) << ".data_ptr())";
        query_call << sep << "None";
        add_param(py_name(a.binds));
        break;
      case ArgKind::kScalar: {
        std::string ct = py_ctype(a.ctype);
        argtypes << sep << ct;
        call << sep << ct << "(" << py_name(a.name) << ")";
        query_call << sep << ct << "(" << py_name(a.name) << ")";
        add_param(a.value ? py_name(a.name) + "=" + std::to_string(*a.value) : py_name(a.name));
        break;
      }
      case ArgKind::kWorkspaceSize:
        argtypes << sep << "POINTER(c_size_t)";
        call << sep << "None";
        query_call << sep << "byref(size)";
        break;
      case ArgKind::kWorkspace:
        argtypes << sep << "c_void_p";
        call << sep << "c_void_p(workspace.data_ptr()) if workspace is not None else None";
        query_call << sep << "None";
        break;
      case ArgKind::kStream:
        argtypes << sep << "c_void_p";
        call << sep << "c_void_p(stream)";
        query_call << sep << "None";
        break;
    }
  }
  // Scalars without a fixed value precede defaulted ones in Python; ABI order already
  // puts fixed values last for templates, and source-mode scalars have no defaults.
  std::string ps = params.str();
  std::string sep = ps.empty() ? "" : ", ";

  std::ostringstream py;
  py << "# kforge call wrapper for " << sym << " (" << backend_name(backend) << ")\n"
     << "# " << abi.signature() << "\n"
     << "import ctypes\n"
     << "import os\n"
     << "from ctypes import (POINTER, byref, c_bool, c_double, c_float, c_int8, c_int16, c_int32,\n"
     << "                    c_int64, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64, "
        "c_void_p)\n\n"
     << "SYMBOL = \"" << sym << "\"\n"
     << "_DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(globals().get(\"__file__\", "
        "\"x\"))), SYMBOL + \".so\")\n"
     << "_fn = None\n\n\n"
     << "def load(path=None):\n"
     << "    \"\"\"Loads the artifact (default: <symbol>.so beside this file) and returns the "
        "function.\"\"\"\n"
     << "    global _fn\n"
     << "    if _fn is None or path is not None:\n"
     << "        fn = getattr(ctypes.CDLL(path or _DEFAULT_PATH), SYMBOL)\n"
     << "        fn.restype = c_int32\n"
     << "        fn.argtypes = [" << argtypes.str() << "]\n"
     << "        _fn = fn\n"
     << "    return _fn\n\n\n"
     << "def " << sym << "_workspace_size(" <<
      [&] {
        std::string s;
        for (const auto& a : abi.args) {
          if (a.kind != ArgKind::kScalar) continue;
          if (!s.empty()) s += ", ";
          s += a.value ? py_name(a.name) + "=" + std::to_string(*a.value) : py_name(a.name);
        }
        return s;
      }()
     << "):\n"
     << "    \"\"\"Asks the kernel how many workspace bytes it needs; touches no tensor.\"\"\"\n"
     << "    size = c_size_t(0)\n"
     << "    rc = load()(" << query_call.str() << ")\n"
     << "    if rc != 0:\n"
     << "        raise RuntimeError(f\"" << sym << " workspace query returned {rc}\")\n"
     << "    return size.value\n\n\n"
     << "def " << sym << "(" << ps << sep << "workspace=None, stream=None):\n"
     << "    rc = load()(" << call.str() << ")\n"
     << "    if rc != 0:\n"
     << "        raise RuntimeError(f\"" << sym << " returned {rc}\")\n\n\n"
     << "run = " << sym << "\n";
  return py.str();
}

std::string cpp_wrapper(const Abi& abi, Backend backend) {
  std::ostringstream decl;
  std::ostringstream call;
  decl << "extern \"C\" " << abi.signature() << ";\n";
  call << abi.symbol << "(";
  for (size_t i = 0; i < abi.args.size(); ++i) {
    const AbiArg& a = abi.args[i];
    if (i) call << ", ";
    switch (a.kind) {
      case ArgKind::kTensor:
        call << "(" << a.ctype << ")" << a.binds << ".data_ptr()";
        break;
      case ArgKind::kScalar:
        call << (a.value ? std::to_string(*a.value) : a.name);
        break;
      case ArgKind::kWorkspaceSize:
        call << "(size_t*)nullptr";
        break;
      case ArgKind::kWorkspace:
        call << "(uint8_t*)nullptr";
        break;
      case ArgKind::kStream:
        call << (backend == Backend::kCpu ? "nullptr" : "stream");
        break;
    }
  }
  call << ");\n";
  return decl.str() + call.str();
}

}  // namespace kforge::core
