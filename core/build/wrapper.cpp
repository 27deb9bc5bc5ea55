#include "core/build/wrapper.hpp"

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
      "while",   "with",     "yield",    "stream", "ctypes", "os",     "k",      "rc",
      "workspace", "size", "load", "SYMBOL", "BACKEND", "DEVICE"};
  return kReserved.contains(name) ? name + "_" : name;
}

// The checks every generated wrapper makes before a call (the client's kforge/abi.py makes
// the same ones): a tensor argument is a torch tensor or a numpy array of the kernel's dtype,
// on its device, with the sizes and element strides it was built for, so that a wrong array
// is a ValueError naming the argument rather than reads and writes out of bounds.
constexpr const char* kPointerCheck = R"PY(_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
             "int8": 1, "int32": 4, "int64": 8, "uint8": 1}


def _pointer(name, v, dtype, sizes, strides, offset, writes):
    """The address of tensor argument `name` once `v` (a torch tensor or a numpy array) is what
    the kernel was built for: dtype, device, sizes and element strides; where the kernel adds a
    storage offset, a contiguous storage that holds every element it touches. `sizes` None (a
    source-mode kernel, which takes its sizes at run time): dtype, device and a dense layout."""
    what = f"{SYMBOL} argument {name}"
    if hasattr(v, "data_ptr") and callable(getattr(v, "stride", None)):  # torch
        got = str(v.dtype).replace("torch.", "")
        device = getattr(v.device, "type", str(v.device))
        shape, elem = tuple(v.shape), tuple(v.stride())
        contiguous, readonly, address = v.is_contiguous(), False, v.data_ptr()
    elif hasattr(v, "__array_interface__"):  # numpy
        face = v.__array_interface__
        got, device, shape = str(v.dtype), "cpu", tuple(face["shape"])
        item = v.dtype.itemsize
        dense, step = [], 1
        for n in reversed(shape):
            dense.insert(0, step)
            step *= n
        if face.get("strides") is None:
            elem, contiguous = tuple(dense), True
        else:
            if any(s % item for s in face["strides"]):
                raise ValueError(f"{what}: its byte strides {face['strides']} are not whole elements")
            elem = tuple(s // item for s in face["strides"])
            contiguous = all(e == d for n, e, d in zip(shape, elem, dense) if n > 1)
        address, readonly = face["data"]
    else:
        raise TypeError(f"{what}: expected a torch tensor or a numpy array, not {type(v).__name__}")
    if device != DEVICE:
        raise ValueError(f"{what} is on {device}; a {BACKEND} kernel takes tensors on {DEVICE}")
    if got != dtype:
        raise ValueError(f"{what} is {got}; the kernel takes {dtype}")
    if writes and readonly:
        raise ValueError(f"{what}: the kernel writes it, but the array is read-only")
    if sizes is None:
        if not contiguous:
            raise ValueError(f"{what} is not contiguous (strides {list(elem)}): the kernel takes a dense array")
    elif offset:
        need = offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))
        numel = 1
        for n in shape:
            numel *= n
        if not contiguous or numel < need:
            raise ValueError(f"{what}: the kernel reads it from element {offset} on, as a {list(sizes)} "
                             f"tensor with strides {list(strides)}; pass its whole storage (a contiguous "
                             f"array of at least {need} elements), not shape {list(shape)}")
    elif shape != tuple(sizes):
        raise ValueError(f"{what} has shape {list(shape)}; the kernel was built for {list(sizes)}")
    elif any(n > 1 and e != s for n, e, s in zip(sizes, elem, strides)):
        raise ValueError(f"{what} has strides {list(elem)}; the kernel was built for {list(strides)}")
    return address


def _buffer(v):
    """The address of a workspace: a torch tensor, a numpy array or a ctypes array."""
    if hasattr(v, "data_ptr"):
        return v.data_ptr()
    if hasattr(v, "__array_interface__"):
        return v.__array_interface__["data"][0]
    return ctypes.addressof(v)
)PY";

// A Python tuple literal: the layout's sizes, a size given at run time by its scalar's name.
std::string py_sizes(const AbiArg::Layout& l) {
  std::string out = "(";
  for (size_t d = 0; d < l.sizes.size(); ++d) {
    if (d) out += ", ";
    const bool named = d < l.size_args.size() && !l.size_args[d].empty();
    out += named ? py_name(l.size_args[d]) : std::to_string(l.sizes[d]);
  }
  return out + (l.sizes.size() == 1 ? ",)" : ")");
}

std::string py_ints(const std::vector<int64_t>& v) {
  std::string out = "(";
  for (size_t d = 0; d < v.size(); ++d) out += (d ? ", " : "") + std::to_string(v[d]);
  return out + (v.size() == 1 ? ",)" : ")");
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
      case ArgKind::kTensor: {
        argtypes << sep << "c_void_p";
        const std::string dtype = a.dtype ? std::string(dtype_name(*a.dtype)) : "";
        call << sep << "\n        c_void_p(_pointer(\"" << a.binds << "\", " << py_name(a.binds) << ", "
             << (dtype.empty() ? "None" : "\"" + dtype + "\"") << ", "
             << (a.layout ? py_sizes(*a.layout) + ", " + py_ints(a.layout->strides) + ", " +
                                std::to_string(a.layout->offset)
                          : std::string("None, None, 0"))
             << ", " << (a.is_const ? "False" : "True") << "))";
        query_call << sep << "None";
        add_param(py_name(a.binds));
        break;
      }
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
        call << sep << "c_void_p(_buffer(workspace)) if workspace is not None else None";
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
     << "# Takes torch tensors or numpy arrays, checked against the kernel's ABI before the call.\n"
     << "import ctypes\n"
     << "import os\n"
     << "from ctypes import (POINTER, byref, c_bool, c_double, c_float, c_int8, c_int16, c_int32,\n"
     << "                    c_int64, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64, "
        "c_void_p)\n\n"
     << "SYMBOL = \"" << sym << "\"\n"
     << "BACKEND = \"" << backend_name(backend) << "\"\n"
     << "DEVICE = \"" << (backend == Backend::kCpu ? "cpu" : "cuda")
     << "\"  # torch's name for the device its tensors live on (ROCm's too)\n"
     << "_DEFAULT_PATH = os.path.join(os.path.dirname(os.path.abspath(globals().get(\"__file__\", "
        "\"x\"))), SYMBOL + \".so\")\n"
     << "_fn = None\n"
     << kPointerCheck << "\n\n"
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
