// Call wrappers returned with every kernel (DESIGN §4), generated from the ABI alone.
// python_wrapper(): a self-contained module that loads `<symbol>.so` next to itself (or a
// path given to load()) with ctypes, and defines `<symbol>(tensors..., scalars...,
// workspace=None, stream=None)` taking torch tensors or numpy arrays; before the call it
// checks each tensor's dtype, device and (where the ABI has its layout: template kernels)
// sizes and element strides, raising ValueError naming the argument; it raises RuntimeError
// on a non-zero return, and `<symbol>_workspace_size(...)` answers the workspace query.
// cpp_wrapper(): the extern "C" declaration and a call line in Inductor's style.
#pragma once

#include <string>

#include "core/base/abi.hpp"

namespace kforge::core {

std::string python_wrapper(const Abi& abi, Backend backend);
std::string cpp_wrapper(const Abi& abi, Backend backend);

}  // namespace kforge::core
