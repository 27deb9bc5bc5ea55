"""The Inductor hook's contract, without torch (which this machine lacks; the GPU host runs
the real torch.compile: tests/gpu/inductor_hook.py).

``kforge.inductor.patch()`` is what ``install()`` applies to ``CUDACodeCache`` and
``ROCmCodeCache``. Here it is applied to classes that keep Inductor's contract — ``write(source,
ext) -> (key, input_path)`` with outputs on the input's stem, ``compile(source, ext,
extra_args) -> (output_path, key, input_path)``, the exception it raises — and the command
lines are built as torch 2.11's ``cuda_compile_command`` / ``rocm_compile_command`` build them.
The compiles run on a real ``kforge serve``: hipcc for gfx90a, nvcc for sm_90a.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import kforge
from kforge import inductor
from support import Server


class InductorCompileError(Exception):
    """Stands for torch._inductor.exc.CUDACompileError(cmd, output)."""

    def __init__(self, cmd: List[str], output: str) -> None:
        super().__init__(output)
        self.cmd, self.output = cmd, output


def codecache_class(root: Path, suffix: str):
    """A class with Inductor's codecache contract; its own compile() is the local compiler,
    which must not run unless the hook falls back (it records the call and fails)."""

    class CodeCache:
        _SOURCE_CODE_SUFFIX = suffix
        local_compiles: List[Tuple[str, str]] = []
        errors: Dict[str, str] = {}

        @classmethod
        def write(cls, source_code: str, dst_file_ext: str) -> Tuple[str, str]:
            # As torch's write(): the key hashes the source and the compile "extra", not the
            # extension; the file sits in <root>/<key[1:3]>/<key>.<suffix>.
            key = "c" + hashlib.sha256(source_code.encode()).hexdigest()[:51]
            path = root / key[1:3] / f"{key}.{suffix}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source_code)
            return key, str(path)

        @classmethod
        def compile(cls, source_code: str, dst_file_ext: str, extra_args: Optional[List[str]] = None):
            cls.local_compiles.append((source_code, dst_file_ext))
            raise InductorCompileError(["local-compiler"], "the local compiler ran")

        @classmethod
        def _record_compile_error(cls, error_str, key_with_ext, cmd_parts, input_path, output_path):
            cls.errors[key_with_ext] = error_str

    return CodeCache


def rocm_command(ck: Path, archs=("gfx90a",), rocm_home="/opt/rocm", opt="-O2", resource_usage=False):
    """torch 2.11's rocm_compile_command with config.rocm's defaults (compile_opt_level -O2,
    use_fast_math, flush_denormals), an arch list and a ROCm home: for Debian's ROCm (hipcc in
    /usr/bin) torch finds /usr, so the compiler is /usr/llvm/bin/clang and -I/usr/include comes."""
    def command(src_files: List[str], dst_file: str, dst_file_ext: str, extra_args=None) -> str:
        opts = [opt, "-x", "hip", "-std=c++17", *[f"--offload-arch={a}" for a in archs], "-fno-gpu-rdc", "-fPIC",
                "-fvisibility=hidden", "-mllvm", "-amdgpu-early-inline-all=true", "-mllvm",
                "-amdgpu-function-calls=false", "-mllvm", "-enable-post-misched=0"]
        if resource_usage:  # config.rocm.print_kernel_resource_usage
            opts += ["-Rpass-analysis=kernel-resource-usage"]
        opts += ["-fgpu-flush-denormals-to-zero", "-ffast-math"]
        opts += extra_args or []
        opts += [f"-I{ck / 'include'}", f"-I{ck / 'library' / 'include'}", f"-I{rocm_home}/include"]
        opts += ["-include __clang_hip_runtime_wrapper.h", f"-L{rocm_home}/lib", f"-L{rocm_home}/hip/lib", "-lamdhip64"]
        opts.append({"o": "-c", "so": "-shared"}[dst_file_ext])
        return f"{rocm_home}/llvm/bin/clang {' '.join(opts)} -o {dst_file} {' '.join(src_files)}"
    return command


def cuda_command(cutlass: Path):
    """torch 2.11's cuda_compile_command (its flags, cutlass include paths and lib options)."""
    def command(src_files: List[str], dst_file: str, dst_file_ext: str, extra_args=None) -> str:
        opts = ["-t=0", "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1", "-DCUTLASS_ENABLE_SM90_EXTENDED_MMA_SHAPES=1",
                "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED", "-w", "-gencode=arch=compute_90a,code=[sm_90a,compute_90a]",
                "-O1", "-std=c++17", "--expt-relaxed-constexpr", "-DNDEBUG"]
        opts += extra_args or []
        opts += ["-Xcompiler=-fPIC", "-Xcompiler=-fno-strict-aliasing", "-Xcompiler -fvisibility=hidden",
                 "-Xcompiler=-Wconversion"]
        opts += [f"-I{cutlass / d}" for d in ("include", "tools/library/include", "tools/library/src", "tools/util/include")]
        opts += ["-L/usr/local/cuda/lib64", "-Xlinker", "-rpath=/usr/local/cuda/lib64", "-lcuda", "-lcudart"]
        if dst_file_ext == "o":
            return f"/usr/local/cuda/bin/nvcc {' '.join(opts)} -c -o {dst_file} {' '.join(src_files)}"
        return f"/usr/local/cuda/bin/nvcc {' '.join(opts + ['-shared'])} -o {dst_file} {' '.join(src_files)}"
    return command


# An Inductor-style CK source: the ROCm template's header, `extern "C" { PT_EXPORT int <name>(...
# hipStream_t stream) }`, and a header from the CK library (a stand-in tree: Debian has no CK).
CK_SOURCE = r'''
#include <exception>
#include <iostream>
#include <hip/hip_runtime.h>
#include "ck/ck.hpp"
#if defined(__GNUC__)
#define PT_EXPORT __attribute__((__visibility__("default")))
#else
#define PT_EXPORT
#endif
__global__ void scale_kernel(const float* X, float* Y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) Y[i] = CK_SCALE * X[i];
}
extern "C" {
PT_EXPORT int NAME(const float* X, float* Y, int32_t n, size_t* workspace_size, uint8_t* workspace, hipStream_t stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  hipLaunchKernelGGL(scale_kernel, dim3((n + 255) / 256), dim3(256), 0, stream, X, Y, n);
  return 0;
}
} // extern C
'''

CUDA_SOURCE = r'''
#include <cuda_runtime.h>
#include <cstdint>
#include "cutlass/scale.h"
#define PT_EXPORT __attribute__((__visibility__("default")))
__global__ void scale_kernel(const float* X, float* Y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) Y[i] = CUTLASS_SCALE * X[i];
}
extern "C" {
PT_EXPORT int NAME(const float* X, float* Y, const int n, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream) {
  if (workspace_size) { *workspace_size = 0; return 0; }
  scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(X, Y, n);
  return 0;
}
}
'''


def symbols(path: str, dynamic: bool = True) -> str:
    return subprocess.run(["nm", "-D" if dynamic else "-g", "--defined-only", path], check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    root = tmp_path_factory.mktemp("libs")
    ck = root / "composable_kernel"
    (ck / "include" / "ck").mkdir(parents=True)
    (ck / "library" / "include").mkdir(parents=True)
    (ck / "include" / "ck" / "ck.hpp").write_text("#pragma once\n#define CK_SCALE 3.0f\n")
    cutlass = root / "cutlass"
    for d in ("include/cutlass", "tools/library/include", "tools/library/src", "tools/util/include"):
        (cutlass / d).mkdir(parents=True)
    (cutlass / "include" / "cutlass" / "scale.h").write_text("#pragma once\n#define CUTLASS_SCALE 2.0f\n")
    return {"ck": ck, "cutlass": cutlass}


@pytest.fixture(scope="module")
def lib_server(tmp_path_factory: pytest.TempPathFactory, libs: Dict[str, Path]):
    s = Server(tmp_path_factory.mktemp("hook-server"),
               ["--library", f"ck={libs['ck']}", "--library", f"cutlass={libs['cutlass']}"])
    yield s
    s.stop()


def backend_available(client: kforge.Client, backend: str) -> bool:
    t = client.toolchains()[backend]
    if t.get("available"):
        return True
    required = os.environ.get("KFORGE_REQUIRE_BACKENDS", "").split(",")
    if backend in required:
        pytest.fail(f"{backend} is required but unavailable: {t.get('reason')}")
    pytest.skip(f"{backend} unavailable: {t.get('reason')}")


def make_hook(server: Server, tmp_path: Path, libs: Dict[str, Path], **kw) -> inductor.Hook:
    client = kforge.Client(server.url, cache_dir=tmp_path / "client-cache", timeout=600, retries=1)
    return inductor.Hook(client, {"ck": str(libs["ck"]), "cutlass": str(libs["cutlass"])},
                         toolkit_dirs=["/opt/rocm/include", "/usr/local/cuda/include"], **kw)


@pytest.fixture
def restore():
    yield
    inductor.uninstall()


def test_rocm_compile_through_the_hook_places_the_so_where_inductor_looks(lib_server, libs, tmp_path, restore):
    hook = make_hook(lib_server, tmp_path, libs)
    backend_available(hook.client, "rocm")
    cache = codecache_class(tmp_path / "inductor", "cpp")
    original = cache.__dict__["compile"]
    inductor.patch(cache, hook, "rocm", "cpp", rocm_command(libs["ck"]), InductorCompileError, two_step=False)

    src = CK_SOURCE.replace("NAME", "rocm_ck_gemm_1a2b3c4d")
    out, key, input_path = cache.compile(src, "so")
    assert out == input_path[: -len("cpp")] + "so" and os.path.exists(out)
    assert "rocm_ck_gemm_1a2b3c4d" in symbols(out)
    assert cache.local_compiles == []
    assert hook.stats.remote == 1 and hook.stats.remote_miss == 1

    # Inductor asks again (another thread, a benchmark): the file is there, kforge is not asked.
    assert cache.compile(src, "so")[0] == out
    assert hook.stats.remote == 1 and hook.stats.local_hits == 1

    # The same body under another name, in a fresh Inductor cache: relinked, not compiled.
    cache2 = codecache_class(tmp_path / "inductor2", "cpp")
    inductor.patch(cache2, hook, "rocm", "cpp", rocm_command(libs["ck"]), InductorCompileError, two_step=False)
    out2, _, _ = cache2.compile(CK_SOURCE.replace("NAME", "rocm_ck_gemm_fused_1a2b3c4d"), "so")
    assert "rocm_ck_gemm_fused_1a2b3c4d" in symbols(out2)
    assert hook.stats.by_cache.get("renamed") == 1

    inductor.uninstall()
    assert cache.__dict__["compile"] is original


def test_torchs_rocm_defaults_on_debians_rocm_become_kforge_options(libs):
    """What Inductor runs with Debian's ROCm (Debian 12's hipcc 5.2 or 13's 5.7, ROCm home /usr)
    and its defaults for MI300 and MI200: every flag has its kforge option or is one kforge
    passes itself; -I/usr/include is the toolkit's, found as torch finds it."""
    src = CK_SOURCE.replace("NAME", "rocm_ck_gemm_1a2b3c4d")
    command = rocm_command(libs["ck"], archs=("gfx942", "gfx90a"), rocm_home="/usr", resource_usage=True)
    line = command(["/tmp/x.cpp"], "/tmp/x.o", "o")
    hook = inductor.Hook(kforge.Client("http://127.0.0.1:9", retries=0), {"ck": str(libs["ck"])},
                         toolkit_dirs=inductor.toolkit_dirs(None, "/usr", None))
    r = hook.request_for("rocm", src, line)
    assert r.arch == ["gfx942", "gfx90a"] and r.export_name == "rocm_ck_gemm_1a2b3c4d"
    assert r.options == {"aot": True, "opt_level": "O2", "fast_math": True, "flush_denormals": True,
                         "includes": ["ck/include", "ck/library/include"]}
    assert hook.request_for("rocm", src, line.replace(" -O2 ", " -Ofast ")).options["opt_level"] == "O3"
    # The toolkit as install() found it before: /opt/rocm only, so Debian's -I/usr/include could not travel.
    old = inductor.Hook(hook.client, {"ck": str(libs["ck"])}, toolkit_dirs=["/opt/rocm/include"])
    with pytest.raises(inductor.UnsupportedCommand, match="-I/usr/include"):
        old.request_for("rocm", src, line)
    assert inductor.toolkit_dirs("/opt/rocm-6.2", "/usr", "/usr/local/cuda-13.0")[:2] == ["/opt/rocm-6.2/include", "/opt/rocm/include"]
    assert "/usr/include" in inductor.toolkit_dirs(None, "/usr", None)


def test_rocm_defaults_compile_on_kforge_with_their_flags(lib_server, libs, tmp_path, restore):
    hook = inductor.Hook(kforge.Client(lib_server.url, cache_dir=tmp_path / "client-cache", timeout=600, retries=1),
                         {"ck": str(libs["ck"])}, toolkit_dirs=inductor.toolkit_dirs(None, "/usr", None))
    backend_available(hook.client, "rocm")
    command = rocm_command(libs["ck"], rocm_home="/usr")
    cache = codecache_class(tmp_path / "inductor", "cpp")
    inductor.patch(cache, hook, "rocm", "cpp", command, InductorCompileError, two_step=False)
    src = CK_SOURCE.replace("NAME", "rocm_ck_gemm_5e6f7a8b")
    out, _, _ = cache.compile(src, "so")
    assert "rocm_ck_gemm_5e6f7a8b" in symbols(out) and cache.local_compiles == []
    r = hook.request_for("rocm", src, command(["x.cpp"], "x.so", "so"))
    kernel = hook.client.compile(src, backend="rocm", arch=r.arch, options=r.options, export_name=r.export_name)
    assert kernel.cache == "hit"
    log = kernel.log()
    assert " -O2 " in log and "-ffast-math" in log and "-fgpu-flush-denormals-to-zero" in log, log


def test_an_arch_this_hipcc_cannot_build_is_refused_with_the_reason(lib_server, libs, tmp_path, restore):
    """gfx1100 with Debian 12's hipcc 5.2 (its LLVM knows it, its device libraries lack it): a 400
    naming the missing library, so the hook falls back at once, or raises saying why."""
    hook = make_hook(lib_server, tmp_path, libs)
    backend_available(hook.client, "rocm")
    if "gfx1100" not in hook.client.toolchains()["rocm"].get("unbuildable", {}):
        pytest.skip("this server's hipcc builds gfx1100")
    cache = codecache_class(tmp_path / "inductor", "cpp")
    inductor.patch(cache, hook, "rocm", "cpp", rocm_command(libs["ck"], archs=("gfx1100",)), InductorCompileError,
                   two_step=False)
    with pytest.raises(InductorCompileError, match="local compiler ran"):
        cache.compile(CK_SOURCE.replace("NAME", "rocm_ck_gemm_9c0d1e2f"), "so")
    st = hook.stats
    assert st.rejected == 1 and st.fallbacks == 1 and st.remote == 0
    assert "HTTP 400" in st.last_error and "oclc_isa_version_1100.bc" in st.last_error, st.last_error


def test_cuda_compile_places_both_the_o_and_the_so_and_is_thread_safe(lib_server, libs, tmp_path, restore):
    hook = make_hook(lib_server, tmp_path, libs)
    backend_available(hook.client, "cuda")
    # As CUDACodeCache: compile() is inherited (from CUTLASSCodeCache), not its own.
    cache = type("CUDACodeCache", (codecache_class(tmp_path / "inductor", "cu"),), {})
    inductor.patch(cache, hook, "cuda", "cu", cuda_command(libs["cutlass"]), InductorCompileError, two_step=True)

    # Inductor's precompile pool: several choices (and the same one twice) at once.
    names = ["cutlass_0a1b2c3d", "cutlass_4e5f6a7b", "cutlass_0a1b2c3d"]
    results: Dict[int, object] = {}

    def one(i: int) -> None:
        try:
            results[i] = cache.compile(CUDA_SOURCE.replace("NAME", names[i]), "so")
        except Exception as e:  # noqa: BLE001 - reported below
            results[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, name in enumerate(names):
        out, key, input_path = results[i]
        stem = input_path[: -len("cu")]
        assert out == stem + "so"
        assert name in symbols(stem + "so")
        assert name in symbols(stem + "o", dynamic=False)  # benchmark subprocesses want the .o
    assert cache.local_compiles == []
    # The compile command's -D switches, -O1 and the library's include dirs reached nvcc.
    again = CUDA_SOURCE.replace("NAME", names[0])
    kernel = hook.client.compile(again, backend="cuda", **_request_of(hook, again, libs))
    assert kernel.cache == "hit"
    log = kernel.log()
    assert "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1" in log and " -O1 " in log
    assert f"-I{libs['cutlass'] / 'tools' / 'util' / 'include'}" in log
    inductor.uninstall()
    assert "compile" not in cache.__dict__  # inherited again


def _request_of(hook: inductor.Hook, source: str, libs) -> Dict:
    r = hook.request_for("cuda", source, cuda_command(libs["cutlass"])(["in.cu"], "out.so", "so"))
    assert r.arch == ["sm_90a"]
    assert r.options["includes"] == ["cutlass/include", "cutlass/tools/library/include",
                                     "cutlass/tools/library/src", "cutlass/tools/util/include"]
    assert r.options["defines"]["CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED"] is None
    assert r.options["opt_level"] == "O1"
    return {"arch": r.arch, "options": r.options, "export_name": r.export_name}


def test_a_compile_error_is_inductors_exception_and_recorded_for_subprocesses(lib_server, libs, tmp_path, restore):
    hook = make_hook(lib_server, tmp_path, libs)
    backend_available(hook.client, "rocm")
    cache = codecache_class(tmp_path / "inductor", "cpp")
    inductor.patch(cache, hook, "rocm", "cpp", rocm_command(libs["ck"]), InductorCompileError, two_step=False)
    bad = CK_SOURCE.replace("NAME", "rocm_bad_00000000").replace("CK_SCALE *", "CK_SCALE * undeclared *")
    with pytest.raises(InductorCompileError) as e:
        cache.compile(bad, "so")
    assert "undeclared" in e.value.output
    assert len(cache.errors) == 1 and cache.local_compiles == []
    assert hook.stats.errors == 1


def test_unreachable_service_falls_back_or_fails_as_asked(libs, tmp_path, restore):
    dead = kforge.Client("http://127.0.0.1:9", cache_dir=tmp_path / "c", timeout=2, retries=0)
    src = CK_SOURCE.replace("NAME", "rocm_ck_gemm_1a2b3c4d")
    cache = codecache_class(tmp_path / "inductor", "cpp")
    hook = inductor.Hook(dead, {"ck": str(libs["ck"])}, fallback=True, toolkit_dirs=["/opt/rocm/include"])
    inductor.patch(cache, hook, "rocm", "cpp", rocm_command(libs["ck"]), InductorCompileError, two_step=False)
    with pytest.raises(InductorCompileError, match="local compiler ran"):
        cache.compile(src, "so")
    assert len(cache.local_compiles) == 1 and hook.stats.fallbacks == 1
    inductor.uninstall()

    strict = inductor.Hook(dead, {"ck": str(libs["ck"])}, fallback=False, toolkit_dirs=["/opt/rocm/include"])
    inductor.patch(cache, strict, "rocm", "cpp", rocm_command(libs["ck"]), InductorCompileError, two_step=False)
    with pytest.raises(InductorCompileError, match="kforge"):
        cache.compile(src, "so")
    assert len(cache.local_compiles) == 1


def test_commands_the_service_cannot_reproduce_are_refused(libs):
    hook = inductor.Hook(kforge.Client("http://127.0.0.1:9", retries=0), {"cutlass": str(libs["cutlass"])})
    src = CUDA_SOURCE.replace("NAME", "cutlass_0a1b2c3d")
    with pytest.raises(inductor.UnsupportedCommand, match="-I/elsewhere"):
        hook.request_for("cuda", src, "nvcc -gencode=arch=compute_90a,code=[sm_90a] -I/elsewhere -c -o x.o x.cu")
    with pytest.raises(inductor.UnsupportedCommand, match="--keep"):
        hook.request_for("cuda", src, "nvcc -gencode=arch=compute_90a,code=[sm_90a] --keep -c -o x.o x.cu")
    with pytest.raises(inductor.UnsupportedCommand, match="exports"):
        hook.request_for("cuda", src.replace("PT_EXPORT int", "int"), "nvcc -gencode=arch=compute_90a,code=[sm_90a] -c x.cu")
