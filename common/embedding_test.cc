#include "common/embedding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

EmbeddingTableSpec Table(const std::string& name) {
  EmbeddingTableSpec spec;
  spec.set_name(name);
  spec.set_width(8);
  spec.mutable_initializer()->set_kind(InitializerSpec::RANDOM_UNIFORM);
  spec.mutable_initializer()->set_minval(-0.05f);
  spec.mutable_initializer()->set_maxval(0.05f);
  spec.mutable_initializer()->set_seed(11);
  spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  spec.mutable_optimizer()->set_learning_rate(0.05f);
  return spec;
}

// Every server gets its share of consecutive and of strided ids alike,
// and an id's owner depends on nothing else.
TEST(EmbeddingTest, OwnersSpreadIdsEvenly) {
  for (int servers : {1, 2, 3, 7}) {
    for (int64_t stride : {1, 1024}) {
      std::vector<int> count(servers);
      for (int64_t i = 0; i < 70000; ++i) {
        const int owner = EmbeddingOwner(i * stride - 35000, servers);
        ASSERT_GE(owner, 0);
        ASSERT_LT(owner, servers);
        ++count[owner];
      }
      for (int c : count) EXPECT_NEAR(c, 70000.0 / servers, 70000.0 / servers * 0.03) << servers;
    }
  }
  EXPECT_EQ(EmbeddingOwner(123456789, 4), EmbeddingOwner(123456789, 4));
}

// An id's initial row depends on the table and the id only.
TEST(EmbeddingTest, InitialRowsAreSeededByTableAndId) {
  std::vector<float> a(8), b(8), c(8), d(8);
  InitialEmbeddingRow(Table("user"), 42, absl::MakeSpan(a));
  InitialEmbeddingRow(Table("user"), 42, absl::MakeSpan(b));
  InitialEmbeddingRow(Table("user"), 43, absl::MakeSpan(c));
  InitialEmbeddingRow(Table("item"), 42, absl::MakeSpan(d));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  for (float v : a) {
    EXPECT_GE(v, -0.05f);
    EXPECT_LE(v, 0.05f);
  }
}

// Rows follow their initializer's distribution, drawn across ids.
TEST(EmbeddingTest, InitialRowsFollowTheirDistribution) {
  for (auto kind : {InitializerSpec::RANDOM_UNIFORM, InitializerSpec::RANDOM_NORMAL,
                    InitializerSpec::TRUNCATED_NORMAL}) {
    EmbeddingTableSpec spec = Table("user");
    spec.mutable_initializer()->set_kind(kind);
    spec.mutable_initializer()->set_mean(1.0f);
    spec.mutable_initializer()->set_stddev(0.5f);
    const EmbeddingRowInitializer init(spec);
    std::vector<float> row(8);
    double sum = 0, squares = 0, low = 1e9, high = -1e9;
    constexpr int kIds = 20000;
    for (int64_t id = 0; id < kIds; ++id) {
      init.Row(id, absl::MakeSpan(row));
      for (float v : row) {
        sum += v;
        squares += double{v} * v;
        low = std::min<double>(low, v);
        high = std::max<double>(high, v);
      }
    }
    const double n = kIds * 8.0, mean = sum / n, sd = std::sqrt(squares / n - mean * mean);
    if (kind == InitializerSpec::RANDOM_UNIFORM) {  // [-0.05, 0.05]
      EXPECT_NEAR(mean, 0.0, 0.001);
      EXPECT_NEAR(sd, 0.1 / std::sqrt(12.0), 0.001);
      EXPECT_GE(low, -0.05);
      EXPECT_LE(high, 0.05);
    } else if (kind == InitializerSpec::RANDOM_NORMAL) {
      EXPECT_NEAR(mean, 1.0, 0.01);
      EXPECT_NEAR(sd, 0.5, 0.01);
    } else {  // within two standard deviations, which narrows it to 0.88 of them
      EXPECT_NEAR(mean, 1.0, 0.01);
      EXPECT_NEAR(sd, 0.5 * 0.8796, 0.01);
      EXPECT_GE(low, 0.0);
      EXPECT_LE(high, 2.0);
    }
  }
}

TEST(EmbeddingTest, BadSpecsAreNamed) {
  EXPECT_TRUE(ValidateEmbeddingTableSpec(Table("user")).ok());
  EmbeddingTableSpec spec = Table("user");
  spec.set_width(0);
  EXPECT_THAT(ValidateEmbeddingTableSpec(spec).message(), HasSubstr("'user': width"));
  spec = Table("user");
  spec.mutable_initializer()->set_kind(InitializerSpec::GLOROT_UNIFORM);
  EXPECT_THAT(ValidateEmbeddingTableSpec(spec).message(), HasSubstr("GLOROT_UNIFORM"));
  spec = Table("user");
  spec.set_max_rows(-1);
  EXPECT_THAT(ValidateEmbeddingTableSpec(spec).message(), HasSubstr("max_rows"));
  spec = Table("user");
  spec.mutable_optimizer()->set_learning_rate(-1);
  EXPECT_THAT(ValidateEmbeddingTableSpec(spec).message(), HasSubstr("learning_rate"));
  EXPECT_THAT(ValidateEmbeddingTableSpec(Table("")).message(), HasSubstr("needs a name"));
}

// A row's k-th value depends on the table, the id and k only, whatever the
// row's width: the vectorised rows (widths of whole vectors, and the floats
// past them) give each value as the shortest rows, one float at a time, do.
TEST(EmbeddingTest, UniformRowsAreTheSameAtEveryWidth) {
  const EmbeddingRowInitializer init(Table("user"));
  constexpr int64_t kWidest = 67;
  for (int64_t id : {int64_t{0}, int64_t{42}, int64_t{-7}, int64_t{1} << 40}) {
    std::vector<float> widest(kWidest);
    init.Row(id, absl::MakeSpan(widest));
    for (int64_t width = 1; width < kWidest; ++width) {
      std::vector<float> row(width);
      init.Row(id, absl::MakeSpan(row));
      EXPECT_TRUE(std::equal(row.begin(), row.end(), widest.begin()))
          << "id " << id << ", width " << width;
    }
  }
}

}  // namespace
}  // namespace fulcrum
