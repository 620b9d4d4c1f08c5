// cuBLAS and NCCL load at run time by the names the build expects (no GPU
// needed: loading touches no device).
#include "worker/cuda/cuda_libs.h"

#include <gtest/gtest.h>

namespace fulcrum::cuda {
namespace {

TEST(CudaLibsTest, CublasLoadsWithEverySymbol) {
  auto blas = Cublas();
  ASSERT_TRUE(blas.ok()) << blas.status();
  EXPECT_NE((*blas)->create, nullptr);
  EXPECT_NE((*blas)->destroy, nullptr);
  EXPECT_NE((*blas)->set_stream, nullptr);
  EXPECT_NE((*blas)->sgemm, nullptr);
  EXPECT_EQ(*Cublas(), *blas);  // loaded once
}

TEST(CudaLibsTest, NcclLoadsWithEverySymbol) {
  auto nccl = Nccl();
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_NE((*nccl)->all_reduce, nullptr);
  EXPECT_NE((*nccl)->comm_init_all, nullptr);
  EXPECT_STREQ((*nccl)->error_string(ncclSuccess), "no error");
}

}  // namespace
}  // namespace fulcrum::cuda
