#include "core/base/abi.hpp"

#include <gtest/gtest.h>

#include "core/build/wrapper.hpp"

namespace kforge::core {
namespace {

constexpr const char* kCpu = R"(
#include <cstdint>
// PT_EXPORT int KERNEL_NAME(int nope) in a comment is ignored
extern "C" PT_EXPORT int KERNEL_NAME(const float* X, float* __restrict__ Y, int64_t n,
                                     size_t* workspace_size, uint8_t* workspace, void* stream) {
  return 0;
})";

TEST(Abi, ParsesCpuSignature) {
  auto abi = parse_signature(kCpu, Backend::kCpu);
  ASSERT_TRUE(abi) << abi.error().message;
  ASSERT_EQ(abi->args.size(), 6u);
  EXPECT_EQ(abi->args[0].kind, ArgKind::kTensor);
  EXPECT_EQ(abi->args[0].ctype, "const float*");
  EXPECT_TRUE(abi->args[0].is_const);
  EXPECT_EQ(abi->args[0].dtype, Dtype::kFloat32);
  EXPECT_EQ(abi->args[1].ctype, "float* __restrict__");
  EXPECT_FALSE(abi->args[1].is_const);
  EXPECT_EQ(abi->args[2].kind, ArgKind::kScalar);
  EXPECT_EQ(abi->args[2].ctype, "int64_t");
  EXPECT_EQ(abi->args[3].kind, ArgKind::kWorkspaceSize);
  EXPECT_EQ(abi->args[4].kind, ArgKind::kWorkspace);
  EXPECT_EQ(abi->args[5].kind, ArgKind::kStream);
}

TEST(Abi, ParsesInductorCudaStyleSignature) {
  const char* src = R"(extern "C" {
PT_EXPORT int KERNEL_NAME(const half* X, const half* W, half* Y, const int M, const int N,
    const int K, const int lda, size_t* workspace_size, uint8_t* workspace, cudaStream_t stream) {
  return 0;
}})";
  auto abi = parse_signature(src, Backend::kCuda);
  ASSERT_TRUE(abi) << abi.error().message;
  EXPECT_EQ(abi->tensors().size(), 3u);
  EXPECT_EQ(abi->args[0].dtype, Dtype::kFloat16);
  EXPECT_EQ(abi->args[3].ctype, "const int");
  EXPECT_EQ(abi->args[3].kind, ArgKind::kScalar);
}

TEST(Abi, StreamTypeMustMatchBackend) {
  auto abi = parse_signature(kCpu, Backend::kRocm);
  ASSERT_FALSE(abi);
  EXPECT_EQ(abi.error().fields.at(0).field, "/source");
  EXPECT_NE(abi.error().message.find("hipStream_t"), std::string::npos);
}

TEST(Abi, RejectsSourcesWithoutPlaceholderOrSignature) {
  auto none = parse_signature("int main() { return 0; }", Backend::kCpu);
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("KERNEL_NAME"), std::string::npos);
  auto commented = parse_signature("// PT_EXPORT int KERNEL_NAME(size_t* a, uint8_t* b, void* s)\n",
                                   Backend::kCpu);
  ASSERT_FALSE(commented);
  EXPECT_NE(commented.error().message.find("no exported signature"), std::string::npos);
  auto in_string =
      parse_signature(R"(const char* s = "PT_EXPORT int KERNEL_NAME(";)", Backend::kCpu);
  EXPECT_FALSE(in_string);
}

TEST(Abi, RejectsUnpassableArguments) {
  auto pp = parse_signature(
      "PT_EXPORT int KERNEL_NAME(float** x, size_t* workspace_size, uint8_t* workspace, void* "
      "stream)",
      Backend::kCpu);
  ASSERT_FALSE(pp);
  EXPECT_NE(pp.error().message.find("pointer to a pointer"), std::string::npos);
  auto st = parse_signature(
      "PT_EXPORT int KERNEL_NAME(std::vector<int> v, size_t* workspace_size, uint8_t* workspace, "
      "void* stream)",
      Backend::kCpu);
  ASSERT_FALSE(st);
  auto short_sig = parse_signature("PT_EXPORT int KERNEL_NAME(float* x)", Backend::kCpu);
  ASSERT_FALSE(short_sig);
}

TEST(Abi, SubstituteOnlyWholeTokens) {
  EXPECT_EQ(substitute_kernel_name("KERNEL_NAME(KERNEL_NAME_X, xKERNEL_NAME) KERNEL_NAME", "k1"),
            "k1(KERNEL_NAME_X, xKERNEL_NAME) k1");
}

TEST(Abi, JsonRoundTrip) {
  auto abi = parse_signature(kCpu, Backend::kCpu);
  ASSERT_TRUE(abi);
  abi->symbol = "cpu_kernel_abc";
  abi->args[2].value = 42;
  auto back = Abi::from_json(abi->to_json());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->to_json(), abi->to_json());
  EXPECT_EQ(abi->to_json()["signature"],
            "int cpu_kernel_abc(const float* X, float* __restrict__ Y, int64_t n, size_t* "
            "workspace_size, uint8_t* workspace, void* stream)");
}

TEST(Wrapper, NamesTheSymbolAndMakesInductorStyleCalls) {
  auto abi = parse_signature(kCpu, Backend::kCpu);
  ASSERT_TRUE(abi);
  abi->symbol = "cpu_kernel_abc";
  std::string py = python_wrapper(*abi, Backend::kCpu);
  EXPECT_NE(py.find("SYMBOL = \"cpu_kernel_abc\""), std::string::npos);
  EXPECT_NE(py.find("def cpu_kernel_abc(X, Y, n, workspace=None, stream=None):"),
            std::string::npos);
  EXPECT_NE(py.find("c_void_p(_pointer(\"X\", X, \"float32\", None, None, 0, False)), \n"
                    "        c_void_p(_pointer(\"Y\", Y, \"float32\", None, None, 0, True)), c_int64(n), None"),
            std::string::npos)
      << py;
  std::string cpp = cpp_wrapper(*abi, Backend::kCpu);
  EXPECT_NE(cpp.find("extern \"C\" int cpu_kernel_abc(const float* X"), std::string::npos);
  EXPECT_NE(
      cpp.find("cpu_kernel_abc((const float*)X.data_ptr(), (float* __restrict__)Y.data_ptr(), n, "
               "(size_t*)nullptr, (uint8_t*)nullptr, nullptr);"),
      std::string::npos);
}

}  // namespace
}  // namespace kforge::core
