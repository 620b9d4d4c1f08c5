#include "worker/strategy/all_reduce_strategy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/checkpoint/checkpointer.h"
#include "common/checkpoint/directory.h"
#include "common/checkpoint/restored_variables.h"
#include "common/file_system.h"
#include "common/initializer.h"
#include "common/tensor.h"
#include "worker/collective/in_process_links.h"
#include "worker/data/batcher.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// A kernel [5, 3] and a bias [3], with Adam (slots and bias correction)
// and the square-root learning-rate scaling of sync steps.
std::vector<VariableSpec> Specs(int64_t kernel_rows = 5) {
  std::vector<VariableSpec> specs(2);
  specs[0].set_name("kernel");
  specs[0].add_shape(kernel_rows);
  specs[0].add_shape(3);
  specs[0].mutable_initializer()->set_kind(InitializerSpec::GLOROT_UNIFORM);
  specs[0].mutable_initializer()->set_seed(7);
  specs[1].set_name("bias");
  specs[1].add_shape(3);
  for (VariableSpec& spec : specs) {
    spec.set_dtype(DT_FLOAT);
    spec.mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
    spec.mutable_optimizer()->set_learning_rate(0.01f);
    spec.mutable_optimizer()->set_learning_rate_scaling(OptimizerSpec::SQRT);
  }
  return specs;
}

// Rank r's gradients at step s: different on every rank and step.
TensorMap Gradients(int rank, int step) {
  std::mt19937 gen(static_cast<unsigned>(rank * 100003 + step));
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  TensorMap grads;
  grads["kernel"] = DenseTensor{{5, 3}, std::vector<float>(15)};
  grads["bias"] = DenseTensor{{3}, std::vector<float>(3)};
  for (auto& [name, tensor] : grads) {
    for (float& v : tensor.values) v = value(gen);
  }
  return grads;
}

// Runs `body` as each of `n` ranks on its own thread.
void RunRanks(int n, const std::function<void(PeerLinks&)>& body) {
  Mailbox mailbox(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      InProcessLinks links(&mailbox, r);
      body(links);
    });
  }
  for (std::thread& t : threads) t.join();
}

// Each behaviour holds with the optimizer's slots sharded over the
// members (ZeRO-1, the default) and with every member holding them all.
class AllReduceStrategyTest : public ::testing::TestWithParam<bool> {
 protected:
  AllReduceStrategyOptions Options() const {
    AllReduceStrategyOptions options;
    options.shard_optimizer = GetParam();
    return options;
  }
  // A failed rank is noticed quickly.
  AllReduceStrategyOptions Quick() const {
    AllReduceStrategyOptions options = Options();
    options.collective.timeout = absl::Milliseconds(300);
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(Slots, AllReduceStrategyTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Sharded" : "Whole";
                         });

// Rank `rank` skips its batch (not finite) at this step.
bool Skips(int rank, int step) { return rank == 1 && step % 7 == 3; }

// After many steps -- with a rank skipping now and then -- every rank's
// replica is bit-identical, and equal to one replica that applies the
// mean of the gradients that were not skipped.
TEST_P(AllReduceStrategyTest, ReplicasStayBitIdenticalAndFollowTheMeanGradient) {
  constexpr int kSteps = 200;
  for (int n : {2, 3, 4}) {
    std::vector<TensorMap> weights(n);
    std::vector<int64_t> steps(n);
    RunRanks(n, [&](PeerLinks& links) {
      const int r = links.rank();
      AllReduceStrategy strategy(&links, Specs(), Options());
      ASSERT_TRUE(strategy.Start(&weights[r]).ok());
      for (int s = 0; s < kSteps; ++s) {
        const TensorMap grads = Gradients(r, s);
        auto stale = strategy.Step(Skips(r, s) ? nullptr : &grads, {}, &weights[r]);
        ASSERT_TRUE(stale.ok()) << stale.status();
      }
      steps[r] = strategy.step();
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(steps[r], kSteps) << "n " << n << " rank " << r;
      for (const char* name : {"kernel", "bias"}) {
        EXPECT_EQ(weights[r][name].values, weights[0][name].values)
            << "n " << n << " rank " << r << " " << name;
      }
    }

    // The reference: one replica, the mean of each step's contributions.
    std::vector<std::vector<float>> values;
    std::vector<OptimizerSlots> slots;
    std::vector<VariableSpec> specs;
    for (const VariableSpec& spec : Specs()) specs.push_back(CanonicalSpec(spec));
    for (const VariableSpec& spec : specs) {
      const int64_t size = spec.shape_size() == 2 ? 15 : 3;
      values.emplace_back(size);
      InitializeRows(spec, 0, spec.shape(0), absl::MakeSpan(values.back()));
      slots.push_back(MakeSlots(spec.optimizer(), size));
    }
    for (int s = 0; s < kSteps; ++s) {
      int averaged = 0;
      std::vector<std::vector<float>> mean = {std::vector<float>(15), std::vector<float>(3)};
      for (int r = 0; r < n; ++r) {
        if (Skips(r, s)) continue;
        ++averaged;
        TensorMap grads = Gradients(r, s);
        for (int i = 0; i < 15; ++i) mean[0][i] += grads["kernel"].values[i];
        for (int i = 0; i < 3; ++i) mean[1][i] += grads["bias"].values[i];
      }
      for (int v = 0; v < 2; ++v) {
        for (float& g : mean[v]) g /= static_cast<float>(averaged);
        const FloatBytes parts[] = {AsFloatBytes(mean[v])};
        ApplyGradient(specs[v].optimizer(), s + 1, averaged, parts, absl::MakeSpan(values[v]),
                      slots[v]);
      }
    }
    for (int i = 0; i < 15; ++i) {
      EXPECT_NEAR(weights[0]["kernel"].values[i], values[0][i], 1e-4) << "n " << n << " " << i;
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(weights[0]["bias"].values[i], values[1][i], 1e-4) << "n " << n << " " << i;
    }
  }
}

// A member that stops (dies) mid-training: the others notice within the
// collective timeout, regroup without it, redo the failed step and go on,
// still bit-identical; later epochs are dealt over the three left.
TEST_P(AllReduceStrategyTest, ALostMemberIsLeftOutAndTheOthersGoOn) {
  constexpr int kSteps = 60, kLostAfter = 25;
  std::vector<TensorMap> weights(4);
  std::vector<absl::Status> results(4);
  std::vector<int64_t> steps(4);
  std::vector<Dealing> before(4), after(4);
  RunRanks(4, [&](PeerLinks& links) {
    const int r = links.rank();
    AllReduceStrategy strategy(&links, Specs(), Quick());
    results[r] = strategy.Start(&weights[r]);
    for (int s = 0; s < (r == 3 ? kLostAfter : kSteps) && results[r].ok(); ++s) {
      const TensorMap grads = Gradients(r, s);
      results[r] = strategy.Step(&grads, {}, &weights[r]).status();
    }
    steps[r] = strategy.step();
    before[r] = strategy.DealEpoch(0);
    after[r] = strategy.DealEpoch(1);
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(steps[r], kSteps) << "rank " << r;
    EXPECT_EQ(weights[r]["kernel"].values, weights[0]["kernel"].values) << "rank " << r;
    EXPECT_EQ(before[r].num_shards, 4);
    EXPECT_EQ(after[r].num_shards, 3);
    EXPECT_EQ(after[r].shard_index, r);
  }
  EXPECT_EQ(steps[3], kLostAfter);
}

// Of two, the lower rank goes on alone; the higher one alone is no quorum
// (it could be the half of a partition), and stops naming why.
TEST_P(AllReduceStrategyTest, OfTwoOnlyTheLowerRankGoesOnAlone) {
  for (int lost : {0, 1}) {
    std::vector<absl::Status> results(2);
    RunRanks(2, [&](PeerLinks& links) {
      const int r = links.rank();
      AllReduceStrategy strategy(&links, Specs(), Quick());
      TensorMap weights;
      results[r] = strategy.Start(&weights);
      for (int s = 0; s < (r == lost ? 3 : 6) && results[r].ok(); ++s) {
        const TensorMap grads = Gradients(r, s);
        results[r] = strategy.Step(&grads, {}, &weights).status();
      }
    });
    const absl::Status& survivor = results[1 - lost];
    if (lost == 1) {
      EXPECT_TRUE(survivor.ok()) << survivor;
    } else {
      EXPECT_EQ(survivor.code(), absl::StatusCode::kFailedPrecondition) << survivor;
      EXPECT_THAT(survivor.message(), HasSubstr("not a quorum"));
      EXPECT_THAT(survivor.message(), HasSubstr("all-reduce of step 4 ("));
    }
  }
}

// Trains epochs `first`.. of `epochs` as the trainer does: each epoch is
// dealt by the strategy, an example per step, and each step tells its
// place. A rank that `dies_at` a step stops there.
absl::Status TrainEpochs(AllReduceStrategy& strategy, int rank, int64_t first, int64_t epochs,
                         int64_t examples, TensorMap* weights,
                         const std::function<void()>& after_step, int64_t dies_at = -1) {
  int64_t done = 0;
  for (int64_t epoch = first; epoch < epochs; ++epoch) {
    const int64_t steps = examples / strategy.DealEpoch(epoch).num_shards;
    for (int64_t s = 0; s < steps; ++s) {
      if (done++ == dies_at) return absl::CancelledError("died");
      const TensorMap grads = Gradients(rank, static_cast<int>(epoch * 1000 + s));
      auto stepped = strategy.Step(&grads, {epoch, s + 1 == steps}, weights);
      if (!stepped.ok()) return stepped.status();
      after_step();
    }
  }
  return absl::OkStatus();
}

// A member dies; the three left go on; it restarts (new links, an empty
// inbox, as a new process) and asks to rejoin: the leader admits it at a
// step boundary, it takes the state, follows with no gradients to the end
// of the epoch in flight and trains from the next epoch, dealt over four
// again. Every replica ends bit-identical, at the same step.
TEST_P(AllReduceStrategyTest, ARestartedMemberRejoinsAndTheGroupGrowsBack) {
  constexpr int64_t kEpochs = 4, kExamples = 120;  // 30 steps an epoch over 4 ranks, 40 over 3
  Mailbox mailbox(4);
  std::vector<std::unique_ptr<InProcessLinks>> links;
  for (int r = 0; r < 4; ++r) links.push_back(std::make_unique<InProcessLinks>(&mailbox, r));
  std::vector<TensorMap> weights(4);
  std::vector<absl::Status> results(4);
  std::vector<int64_t> steps(4);
  absl::Mutex mu;
  int64_t leader_steps = 0;
  int64_t rejoined_first = 0;  // the first epoch the restarted rank trains
  auto run = [&](int r, int64_t dies_at) {
    AllReduceStrategyOptions options = Quick();
    options.epochs = kEpochs;
    AllReduceStrategy strategy(links[r].get(), Specs(), options);
    results[r] = strategy.Start(&weights[r]);
    const int64_t first = strategy.ResumedBatches(4, kExamples / 4) / (kExamples / 4);
    if (r == 2 && dies_at < 0) {
      // It asks in the second epoch, or later where the others ran ahead
      // while it started (a slow machine): it trains from the next.
      EXPECT_GE(first, 2) << "it trains no epoch dealt before it asked";
      absl::MutexLock lock(&mu);
      rejoined_first = first;
    }
    if (results[r].ok()) {
      results[r] = TrainEpochs(
          strategy, r, first, kEpochs, kExamples, &weights[r],
          [&] {
            absl::MutexLock lock(&mu);
            if (r == 0) leader_steps = strategy.step();
          },
          dies_at);
    }
    steps[r] = strategy.step();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) threads.emplace_back(run, r, r == 2 ? 10 : -1);
  threads[2].join();
  EXPECT_EQ(results[2].code(), absl::StatusCode::kCancelled);
  links[2]->Die();
  {
    // It restarts once the others are well into the second epoch.
    absl::MutexLock lock(&mu);
    auto second_epoch = [&leader_steps] { return leader_steps >= 45; };
    mu.Await(absl::Condition(&second_epoch));
  }
  mailbox.Forget(2);
  links[2] = std::make_unique<InProcessLinks>(&mailbox, 2);
  threads[2] = std::thread(run, 2, -1);
  for (std::thread& t : threads) t.join();
  // Epoch 0 over four, then over three until the epoch it trains from.
  const int64_t expected_steps = 30 + 40 * (rejoined_first - 1) + 30 * (kEpochs - rejoined_first);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(steps[r], expected_steps) << "rank " << r;
    for (const char* name : {"kernel", "bias"}) {
      EXPECT_EQ(weights[r][name].values, weights[0][name].values) << "rank " << r << " " << name;
    }
  }
}

// A worker that never starts: the chief waits for it until the start-up
// timeout, then the group starts without it and leaves it out at the
// first all-reduce.
TEST_P(AllReduceStrategyTest, AWorkerThatNeverStartsIsLeftOut) {
  Mailbox mailbox(3);
  std::vector<absl::Status> results(2);
  std::vector<int64_t> steps(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      InProcessLinks links(&mailbox, r);
      AllReduceStrategyOptions options = Quick();
      options.startup_timeout = absl::Milliseconds(300);
      AllReduceStrategy strategy(&links, Specs(), options);
      TensorMap weights;
      results[r] = strategy.Start(&weights);
      for (int s = 0; s < 5 && results[r].ok(); ++s) {
        const TensorMap grads = Gradients(r, s);
        results[r] = strategy.Step(&grads, {}, &weights).status();
      }
      steps[r] = strategy.step();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r];
    EXPECT_EQ(steps[r], 5);
  }
}

// Every rank starts from the chief's initial values.
TEST_P(AllReduceStrategyTest, EveryRankStartsFromTheChiefsVariables) {
  std::vector<TensorMap> weights(3);
  RunRanks(3, [&](PeerLinks& links) {
    AllReduceStrategy strategy(&links, Specs(), Options());
    ASSERT_TRUE(strategy.Start(&weights[links.rank()]).ok());
    EXPECT_EQ(strategy.ResumedBatches(3, 100), 0);
  });
  std::vector<float> kernel(15);
  InitializeRows(Specs()[0], 0, 5, absl::MakeSpan(kernel));
  for (const TensorMap& w : weights) {
    EXPECT_EQ(w.at("kernel").values, kernel);
    EXPECT_EQ(w.at("kernel").shape, (Shape{5, 3}));
    EXPECT_EQ(w.at("bias").values, std::vector<float>(3, 0.0f));
  }
}

// A program's own initial values (the chief's) replace the initializers
// of the variables they name, on every rank; a value of the wrong size is
// refused.
TEST_P(AllReduceStrategyTest, TheChiefsInitialValuesReplaceTheInitializers) {
  std::vector<TensorMap> weights(3);
  RunRanks(3, [&](PeerLinks& links) {
    AllReduceStrategyOptions options = Options();
    // The others' values are not used: the chief's are broadcast.
    options.initial_values["bias"] = DenseTensor{{3}, {1.0f, 2.0f, links.rank() + 3.0f}};
    AllReduceStrategy strategy(&links, Specs(), options);
    ASSERT_TRUE(strategy.Start(&weights[links.rank()]).ok());
  });
  std::vector<float> kernel(15);
  InitializeRows(Specs()[0], 0, 5, absl::MakeSpan(kernel));
  for (const TensorMap& w : weights) {
    EXPECT_EQ(w.at("bias").values, (std::vector<float>{1.0f, 2.0f, 3.0f}));
    EXPECT_EQ(w.at("kernel").values, kernel);
  }
  SoloLinks solo;
  AllReduceStrategyOptions wrong;
  wrong.initial_values["bias"] = DenseTensor{{2}, {1.0f, 2.0f}};
  AllReduceStrategy strategy(&solo, Specs(), wrong);
  TensorMap out;
  const absl::Status started = strategy.Start(&out);
  EXPECT_EQ(started.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(started.message(), HasSubstr("initial value of 'bias': 2 elements where 3"));
}

// A worker started with another model is told so, not left to corrupt
// the others' all-reduce.
TEST_P(AllReduceStrategyTest, AWorkerWithAnotherModelIsRefused) {
  std::vector<absl::Status> started(2);
  RunRanks(2, [&](PeerLinks& links) {
    AllReduceStrategy strategy(&links, Specs(links.rank() == 0 ? 5 : 6), Options());
    TensorMap weights;
    started[links.rank()] = strategy.Start(&weights);
  });
  EXPECT_TRUE(started[0].ok()) << started[0];
  EXPECT_EQ(started[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(started[1].message(), HasSubstr("differs from the chief's"));
}

// Sharded, each of n members holds about 1/n of the optimizer's slots
// (Adam: two slots of the model's 18 floats); unsharded, each holds them
// all.
TEST(AllReduceStrategySlotsTest, SlotsAreShardedOverTheMembers) {
  for (bool shard : {true, false}) {
    for (int n = 1; n <= 4; ++n) {
      std::vector<int64_t> held(n);
      RunRanks(n, [&](PeerLinks& links) {
        AllReduceStrategyOptions options;
        options.shard_optimizer = shard;
        AllReduceStrategy strategy(&links, Specs(), options);
        TensorMap weights;
        ASSERT_TRUE(strategy.Start(&weights).ok());
        const TensorMap grads = Gradients(links.rank(), 0);
        ASSERT_TRUE(strategy.Step(&grads, {}, &weights).ok());
        held[links.rank()] = strategy.slot_floats();
      });
      int64_t total = 0;
      for (int r = 0; r < n; ++r) {
        total += held[r];
        // Parts of ceil(18 / n) floats, the last one shorter.
        EXPECT_LE(held[r], shard ? 2 * ((18 + n - 1) / n) : 36) << "n " << n << " rank " << r;
        EXPECT_GE(held[r], shard ? 2 * (18 - (n - 1) * ((18 + n - 1) / n)) : 36)
            << "n " << n << " rank " << r;
      }
      EXPECT_EQ(total, shard ? 36 : 36 * n) << "n " << n;
    }
  }
}

// A checkpoint taken at a step whose place asks for it holds every slot:
// a new group restored from it goes on exactly as the group that wrote it
// would have, to the bit. Sharded, a step that did not ask gathers none,
// and its checkpoint is refused rather than written without them.
TEST_P(AllReduceStrategyTest, ACheckpointAtAPlannedStepResumesTheGroupToTheBit) {
  constexpr int kRanks = 3, kSaveAt = 12, kSteps = 20;
  const std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/planned-", GetParam());
  // Runs steps [first, last) on every rank; rank 0 checkpoints after `save_at`.
  auto run = [&](int first, int last, int save_at, std::vector<TensorMap>* weights) {
    RunRanks(kRanks, [&](PeerLinks& links) {
      const int r = links.rank();
      AllReduceStrategyOptions options = Options();
      if (r == 0) {
        options.checkpoint_dir = dir;
        options.fs = fs.get();
      }
      AllReduceStrategy strategy(&links, Specs(), options);
      ASSERT_TRUE(strategy.Start(&(*weights)[r]).ok());
      ASSERT_EQ(strategy.step(), first);
      for (int s = first; s < last; ++s) {
        const TensorMap grads = Gradients(r, s);
        StepPlace place;
        place.checkpoint = s + 1 == save_at;
        ASSERT_TRUE(strategy.Step(&grads, place, &(*weights)[r]).ok());
        if (r == 0 && s == 2) {
          const auto unplanned = strategy.SaveCheckpoint(strategy.step());
          if (GetParam()) {
            EXPECT_EQ(unplanned.status().code(), absl::StatusCode::kFailedPrecondition);
            EXPECT_THAT(unplanned.status().message(), HasSubstr("not gathered at step 3"));
          } else {
            EXPECT_TRUE(unplanned.ok()) << unplanned.status();
          }
        }
        if (r == 0 && s + 1 == save_at) {
          Checkpointer checkpointer([&](int64_t step) { return strategy.SaveCheckpoint(step); },
                                    fs.get(), {dir, 0, 0, 5});
          ASSERT_TRUE(checkpointer.Save(strategy.step()).ok());
        }
      }
    });
  };
  std::vector<TensorMap> straight(kRanks), resumed(kRanks);
  run(0, kSteps, kSaveAt, &straight);
  run(kSaveAt, kSteps, -1, &resumed);
  for (int r = 0; r < kRanks; ++r) {
    for (const char* name : {"kernel", "bias"}) {
      EXPECT_EQ(resumed[r][name].values, straight[r][name].values) << "rank " << r << " " << name;
    }
  }
}

// Rank 2 of three dies in the middle of a step's all-gather, having sent
// rank 0 its part: rank 0 passes it on, so rank 1 completes the step while
// rank 0 does not. Rank 0 then takes the step from rank 1 and only then
// updates its part of the optimizer's slots, from the gradient it kept. A
// checkpoint two steps later holds the slots of one replica that applied
// every step's mean gradient, but for the dead member's part of them,
// which started again.
TEST(AllReduceStrategySlotsTest, AMemberThatMissedTheGatherUpdatesItsSlotsWithTheGroup) {
  constexpr int kRanks = 3, kDiesAt = 5, kSteps = 8;
  const std::unique_ptr<FileSystem> fs = MakeLocalFileSystem();
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/missed-gather");
  std::vector<int64_t> steps(kRanks);
  Mailbox mailbox(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      InProcessLinks links(&mailbox, r);
      AllReduceStrategyOptions options;
      options.shard_optimizer = true;
      options.collective.timeout = absl::Milliseconds(300);
      if (r == 0) {
        options.checkpoint_dir = dir;
        options.fs = fs.get();
      }
      AllReduceStrategy strategy(&links, Specs(), options);
      TensorMap weights;
      ASSERT_TRUE(strategy.Start(&weights).ok());
      for (int s = 0; s < (r == 2 ? kDiesAt + 1 : kSteps); ++s) {
        // Its reduce-scatter's two messages, then its own part of the
        // all-gather.
        if (r == 2 && s == kDiesAt) links.DieAfterSends(3);
        const TensorMap grads = Gradients(r, s);
        StepPlace place;
        place.checkpoint = s + 1 == kSteps;
        const auto stepped = strategy.Step(&grads, place, &weights);
        if (r == 2 && s == kDiesAt) break;
        ASSERT_TRUE(stepped.ok()) << "rank " << r << " step " << s << ": " << stepped.status();
      }
      steps[r] = strategy.step();
      if (r == 0) {
        Checkpointer checkpointer([&](int64_t step) { return strategy.SaveCheckpoint(step); },
                                  fs.get(), {dir, 0, 0, 5});
        EXPECT_TRUE(checkpointer.Save(strategy.step()).ok());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(steps[0], kSteps);
  ASSERT_EQ(steps[1], kSteps);

  // The reference's slots: every rank's gradients until the step rank 2
  // died in (rank 1 completed it with them), then ranks 0 and 1's.
  std::vector<VariableSpec> specs;
  for (const VariableSpec& spec : Specs()) specs.push_back(CanonicalSpec(spec));
  std::vector<std::vector<float>> values;
  std::vector<OptimizerSlots> slots;
  for (const VariableSpec& spec : specs) {
    values.emplace_back(NumElements(spec.shape()));
    InitializeRows(spec, 0, spec.shape(0), absl::MakeSpan(values.back()));
    slots.push_back(MakeSlots(spec.optimizer(), values.back().size()));
  }
  for (int s = 0; s < kSteps; ++s) {
    const int members = s <= kDiesAt ? 3 : 2;
    for (size_t v = 0; v < specs.size(); ++v) {
      std::vector<float> mean(values[v].size());
      for (int r = 0; r < members; ++r) {
        const TensorMap grads = Gradients(r, s);
        const std::vector<float>& g = grads.at(specs[v].name()).values;
        for (size_t i = 0; i < mean.size(); ++i) mean[i] += g[i];
      }
      for (float& g : mean) g /= static_cast<float>(members);
      const FloatBytes parts[] = {AsFloatBytes(mean)};
      ApplyGradient(specs[v].optimizer(), s + 1, members, parts, absl::MakeSpan(values[v]),
                    slots[v]);
    }
  }

  std::vector<std::string> problems;
  auto files = LoadNewestCheckpoint(
      *fs, dir, [](const CheckpointFiles&) { return absl::OkStatus(); }, &problems);
  ASSERT_TRUE(files.ok()) << files.status();
  auto restored = RegroupCheckpoint(*files);
  ASSERT_TRUE(restored.ok()) << restored.status();
  // The model's floats (kernel, then bias) whose slots are not the
  // reference's: those of the dead member's part, of 6 floats, alone.
  std::vector<int> differ;
  int64_t offset = 0;
  for (size_t v = 0; v < specs.size(); ++v) {
    const int64_t rows = specs[v].shape(0);
    const int64_t size = static_cast<int64_t>(values[v].size());
    ShardContents contents;
    contents.values.resize(size);
    contents.slots = MakeSlots(specs[v].optimizer(), size);
    ASSERT_TRUE(restored->at(specs[v].name()).Read(0, rows, &contents).ok());
    for (int64_t i = 0; i < size; ++i) {
      for (size_t j = 0; j < slots[v].size(); ++j) {
        if (std::abs(contents.slots[j][i] - slots[v][j][i]) > 1e-5f) {
          differ.push_back(static_cast<int>(offset + i));
          break;
        }
      }
    }
    offset += size;
  }
  ASSERT_FALSE(differ.empty()) << "the dead member's part of the slots started again";
  EXPECT_LE(differ.size(), 6u);
  EXPECT_EQ(differ.front() / 6, differ.back() / 6)
      << "floats " << differ.front() << " to " << differ.back() << " are not one part";
}

// Gradients that do not fit the variables are refused before anything is
// sent.
TEST(AllReduceStrategyTest, GradientsOfTheWrongShapeAreRefused) {
  SoloLinks solo;
  AllReduceStrategy strategy(&solo, Specs(), {});
  TensorMap weights;
  ASSERT_TRUE(strategy.Start(&weights).ok());
  TensorMap grads = Gradients(0, 0);
  grads["bias"].values.pop_back();
  const auto stepped = strategy.Step(&grads, {}, &weights);
  EXPECT_EQ(stepped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(stepped.status().message(), HasSubstr("'bias': 2 elements where 3"));
  grads.erase("bias");
  EXPECT_THAT(strategy.Step(&grads, {}, &weights).status().message(), HasSubstr("missing"));
  EXPECT_EQ(strategy.step(), 0);
}

// StepInPlace, on a caller's buffers, steps as Step does: two replicas,
// one stepped each way with the same gradients, hold the same values,
// written into the buffers it names. Buffers that do not fit are refused
// before the step.
TEST(AllReduceStrategyTest, StepsInPlaceAsOnTensorMaps) {
  SoloLinks solo_a, solo_b;
  AllReduceStrategy on_maps(&solo_a, Specs(), {});
  AllReduceStrategy in_place(&solo_b, Specs(), {});
  TensorMap weights, started;
  ASSERT_TRUE(on_maps.Start(&weights).ok());
  ASSERT_TRUE(in_place.Start(&started).ok());
  std::vector<float> kernel(15, -1.0f);
  std::vector<float> bias(3, -1.0f);
  const TensorViews out = {{"kernel", TensorView{{5, 3}, kernel.data()}},
                           {"bias", TensorView{{3}, bias.data()}}};
  for (int step = 0; step < 3; ++step) {
    const TensorMap grads = Gradients(0, step);
    ConstTensorViews views;
    for (const auto& [name, tensor] : grads) {
      views[name] = ConstTensorView{tensor.shape, tensor.values.data()};
    }
    ASSERT_TRUE(on_maps.Step(&grads, {}, &weights).ok());
    const absl::Status stepped = in_place.StepInPlace(&views, {}, out);
    ASSERT_TRUE(stepped.ok()) << stepped;
    EXPECT_EQ(kernel, weights["kernel"].values) << "step " << step;
    EXPECT_EQ(bias, weights["bias"].values) << "step " << step;
  }
  // A skipped batch moves nothing; an output it does not name is not
  // written.
  const std::vector<float> before = kernel;
  ASSERT_TRUE(in_place.StepInPlace(nullptr, {}, {{"kernel", out.at("kernel")}}).ok());
  EXPECT_EQ(kernel, before);

  std::vector<float> short_bias(2);
  const absl::Status misfit =
      in_place.StepInPlace(nullptr, {}, {{"bias", TensorView{{2}, short_bias.data()}}});
  EXPECT_EQ(misfit.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(misfit.message(), HasSubstr("output for 'bias': 2 elements where 3"));
  const absl::Status unknown =
      in_place.StepInPlace(nullptr, {}, {{"gamma", TensorView{{3}, bias.data()}}});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.message(), HasSubstr("'gamma' is not in the group"));
  const ConstTensorViews wrong = {{"kernel", ConstTensorView{{5, 3}, kernel.data()}},
                                  {"bias", ConstTensorView{{4}, bias.data()}}};
  EXPECT_THAT(in_place.StepInPlace(&wrong, {}, out).message(),
              HasSubstr("gradient of 'bias': 4 elements where 3"));
  EXPECT_EQ(in_place.step(), 3);
}

}  // namespace
}  // namespace fulcrum
