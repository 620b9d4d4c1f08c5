// Click-through-rate data with a known answer (issue 15's
// --dataset=synthetic_ctr): examples of `num_fields` categorical ids and
// `num_numeric` numeric features, labelled by a logistic model whose
// weights the generator knows, so that the best AUC any model can reach on
// the test split -- the AUC of the true probabilities -- is known too.
//
// Per field, ids are drawn from a Zipf distribution over `vocabulary`
// ranks (exponent `zipf_exponent`), each rank mapped to an id by a mix of
// (field, rank), so the tables are large and sparse and a few ids are
// frequent. The true model: a bias, a weight per (field, id) and per
// numeric feature, and products of the ids' factors for a few pairs of
// fields; every weight is a hash of the seed, never a stored table (the
// most frequent ranks' hashes are kept, computed once), and shrinks past
// signal_ranks.
// Seeded and reproducible, the same from build to build: every worker
// draws the same training split (shard 0) and takes its share of it, so
// that a lost worker's share can be dealt to the others; the test split
// (shard -1) is drawn apart.
#ifndef FULCRUM_WORKER_DATA_SYNTHETIC_CTR_H_
#define FULCRUM_WORKER_DATA_SYNTHETIC_CTR_H_

#include <cstdint>
#include <vector>

namespace fulcrum {

// Labelled CTR examples in memory.
struct CtrExamples {
  int64_t num_examples = 0;
  int num_fields = 0;
  int num_numeric = 0;
  std::vector<int64_t> ids;      // num_examples x num_fields
  std::vector<float> numeric;    // num_examples x num_numeric
  std::vector<float> labels;     // 0 or 1
  std::vector<float> true_prob;  // the generator's probability of a click (synthetic only)
};

struct SyntheticCtrOptions {
  int num_fields = 26;
  int num_numeric = 13;
  int64_t vocabulary = 1000000;  // ranks per field
  double zipf_exponent = 1.05;
  int num_pairs = 3;      // pairs of fields whose ids interact
  double bias = -1.0;     // the base logit: about a quarter of examples are clicks
  double id_scale = 0.8;  // standard deviation of a frequent id's weight
  // Past this rank an id's weight shrinks as signal_ranks / rank, so that
  // the long tail, which no training set covers, carries little of the
  // signal (as rare ids do in click logs), and the best AUC stays within
  // reach of a model that learns the ids it sees often.
  int64_t signal_ranks = 30;
  uint64_t seed = 0;
};

class SyntheticCtr {
 public:
  explicit SyntheticCtr(const SyntheticCtrOptions& options);

  // `count` training examples of shard `shard` (of any number: each shard
  // draws its own), or of the test split (shard -1).
  CtrExamples Generate(int64_t count, int shard) const;

  // The Zipf ranks `n` uniforms in [0, 1] fall on: for each, the first
  // rank whose cumulative probability reaches it (the last if none does).
  // The n searches go in step, without branches, so that their misses of
  // the caches overlap (searched one by one, they were most of a CTR
  // worker's start).
  void Ranks(const double* uniforms, int n, int64_t* ranks) const;

 private:
  // A field's rank: its id and the true model's weights (the factors only
  // for a field that interacts), each a hash of (seed, field, rank).
  struct RankWeights {
    int64_t id = 0;
    double weight = 0;  // of the id
    double left = 0;    // factors, as the left and the right field of a pair
    double right = 0;
  };
  RankWeights Hashed(int field, int64_t rank) const;
  double Logit(const int64_t* ranks, const RankWeights* weights, const float* numeric) const;

  const SyntheticCtrOptions options_;
  std::vector<double> cdf_;                 // of the Zipf ranks
  std::vector<std::pair<int, int>> pairs_;  // fields that interact
  std::vector<bool> paired_;                // per field: in one of pairs_
  // The most frequent ranks' weights, field by field (head_ranks_ each),
  // hashed once: most examples' ids are among them (about 60% at
  // vocabulary 10^6 and the default exponent).
  int64_t head_ranks_ = 0;
  std::vector<RankWeights> head_;
  std::vector<double> numeric_weights_;  // per numeric feature
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_DATA_SYNTHETIC_CTR_H_
