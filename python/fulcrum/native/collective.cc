// fulcrum._fulcrum.Collective: the C++ worker's all-reduce group
// (worker/strategy/all_reduce_strategy.h) for a Python program. Each rank
// keeps a whole replica of the variables and their optimizer slots; a step
// averages the ranks' gradients by a ring all-reduce over gRPC and applies
// the optimizer to the mean on every rank, so the replicas stay
// bit-identical. A lost rank is left out and the others go on; a restarted
// one rejoins and takes the group's state. Given a checkpoint directory,
// the chief writes its replica there as the C++ chief does
// (common/checkpoint/checkpointer.h), and a new group starts from the
// newest complete checkpoint.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpointer.h"
#include "common/file_system.h"
#include "common/rpc/credentials.h"
#include "proto/tensor.pb.h"
#include "python/fulcrum/native/buffers.h"
#include "python/fulcrum/native/errors.h"
#include "python/fulcrum/native/json.h"
#include "python/fulcrum/native/module.h"
#include "worker/collective/grpc/grpc_peer_links.h"
#include "worker/strategy/all_reduce_strategy.h"

namespace py = pybind11;

namespace fulcrum::native {
namespace {

// The float32 buffers of `tensors` ({name: buffer}), copied.
TensorMap CopyIn(const py::dict& tensors, const char* role) {
  HeldTensors held;
  Hold(tensors, role, false, &held);
  TensorMap out;
  for (const auto& [name, view] : held.in) {
    int64_t n = 1;
    for (int64_t d : view.shape) n *= d;
    out[name] = DenseTensor{view.shape, std::vector<float>(view.data, view.data + n)};
  }
  return out;
}

// One rank of the group. Not thread-safe: one Python thread calls it.
class Collective {
 public:
  Collective(int rank, const std::vector<std::string>& peers, const std::string& bind_host,
             const std::vector<std::string>& specs_json, double timeout_s, double startup_timeout_s,
             int64_t epochs, const std::string& tls_cert, const std::string& tls_key,
             const std::string& tls_ca, const std::string& token,
             const CheckpointOptions& checkpoints) {
    if (rank < 0 || rank >= static_cast<int>(peers.size())) {
      Throw(absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is not one of the ", peers.size(), " workers")));
    }
    if (timeout_s <= 0 || startup_timeout_s <= 0 || epochs < 1) {
      Throw(absl::InvalidArgumentError(
          "timeout and startup_timeout must be > 0 seconds, and epochs at least 1"));
    }
    for (const std::string& json : specs_json) {
      specs_.push_back(ParseSpec<VariableSpec>(json, "variable spec"));
    }
    const std::string& own = peers[rank];
    int port = 0;
    if (!absl::SimpleAtoi(own.substr(own.rfind(':') + 1), &port)) {
      Throw(absl::InvalidArgumentError(
          absl::StrCat("this worker's address '", own, "' has no port")));
    }
    const TlsFiles tls{tls_cert, tls_key, tls_ca};
    ThrowIfError(CheckTlsFiles(tls));
    auto links = GrpcPeerLinks::Start(rank, static_cast<int>(peers.size()),
                                      absl::StrCat(bind_host, ":", port), tls, token);
    ThrowIfError(links.status());
    (*links)->Connect(peers);
    links_ = *std::move(links);
    options_.collective.timeout = absl::Seconds(timeout_s);
    options_.startup_timeout = absl::Seconds(startup_timeout_s);
    options_.epochs = epochs;
    // Every rank holds every slot: checkpoint() may come after any step,
    // not only one planned before it as the C++ trainer plans its own.
    options_.shard_optimizer = false;
    // The chief's checkpoints, as the C++ chief's (worker/worker_main.cc).
    if (rank == 0 && !checkpoints.dir.empty()) {
      ThrowIfError(CheckCheckpointOptions(checkpoints));
      ThrowIfError(CheckWritableDir(*fs_, checkpoints.dir));
      options_.checkpoint_dir = checkpoints.dir;
      options_.fs = fs_.get();
      checkpointer_.emplace([this](int64_t step) { return strategy_->SaveCheckpoint(step); },
                            fs_.get(), checkpoints);
    }
  }

  // Joins the group: the chief's `initial` values ({name: buffer}: they
  // replace the initializers; the other ranks' are not used), or the
  // running group's state for a rank that restarted, into `out`.
  void Start(const py::dict& initial, const py::dict& out) {
    if (strategy_ != nullptr) Throw(absl::FailedPreconditionError("the group has started"));
    options_.initial_values = CopyIn(initial, "initial value of");
    strategy_ = std::make_unique<AllReduceStrategy>(links_.get(), specs_, options_);
    TensorMap weights;
    absl::Status started;
    {
      py::gil_scoped_release release;
      started = strategy_->Start(&weights);
    }
    ThrowIfError(started);
    HeldTensors values;
    Hold(out, "output", true, &values);
    ThrowIfError(strategy_->ReadValues(values.out));
  }

  // One step: this rank's `gradients` ({name: buffer}, or None when its
  // batch is skipped) of the batch of `epoch` (`ends_epoch`: its last);
  // the variables after the step into `out`.
  void Step(const py::object& gradients, int64_t epoch, bool ends_epoch, const py::dict& out) {
    Started();
    // Both are read and written where they lie, copied by no one.
    HeldTensors grads, values;
    if (!gradients.is_none()) Hold(gradients.cast<py::dict>(), "gradient of", false, &grads);
    Hold(out, "output", true, &values);
    absl::Status stepped;
    {
      py::gil_scoped_release release;
      stepped = strategy_->StepInPlace(gradients.is_none() ? nullptr : &grads.in,
                                       StepPlace{epoch, ends_epoch}, values.out);
    }
    ThrowIfError(stepped);
    if (checkpointer_) {
      py::gil_scoped_release release;
      checkpointer_->MaybeSave(strategy_->step());  // a failure is logged; training goes on
    }
  }

  // Writes a checkpoint of the current step now (the chief, given a
  // directory: a no-op elsewhere); its error when it failed.
  void Checkpoint() {
    Started();
    if (!checkpointer_) return;
    absl::Status saved;
    {
      py::gil_scoped_release release;
      saved = checkpointer_->Save(strategy_->step());
    }
    ThrowIfError(saved);
  }

  // (shard, shards): this rank's share of `epoch`, over the members the
  // group held when it began.
  py::tuple DealEpoch(int64_t epoch) {
    Started();
    Dealing dealing;
    {
      py::gil_scoped_release release;
      dealing = strategy_->DealEpoch(epoch);
    }
    return py::make_tuple(dealing.shard_index, dealing.num_shards);
  }

  int64_t ResumedBatches(int num_workers, int64_t steps_per_epoch) {
    Started();
    return strategy_->ResumedBatches(num_workers, steps_per_epoch);
  }

  int64_t step() {
    Started();
    return strategy_->step();
  }

 private:
  void Started() const {
    if (strategy_ == nullptr) Throw(absl::FailedPreconditionError("start() the group first"));
  }

  std::vector<VariableSpec> specs_;
  const std::unique_ptr<FileSystem> fs_ = MakeLocalFileSystem();
  std::unique_ptr<GrpcPeerLinks> links_;
  AllReduceStrategyOptions options_;
  std::unique_ptr<AllReduceStrategy> strategy_;
  std::optional<Checkpointer> checkpointer_;  // the chief's, given a directory
};

}  // namespace

void RegisterCollective(py::module_& m) {
  py::class_<CheckpointOptions>(m, "CheckpointOptions")
      .def(py::init([](const std::string& dir, int64_t every_steps, int64_t every_secs, int keep) {
             return CheckpointOptions{dir, every_steps, every_secs, keep};
           }),
           py::arg("dir"), py::arg("every_steps"), py::arg("every_secs"), py::arg("keep"));
  py::class_<Collective>(m, "Collective")
      .def(py::init<int, const std::vector<std::string>&, const std::string&,
                    const std::vector<std::string>&, double, double, int64_t, const std::string&,
                    const std::string&, const std::string&, const std::string&,
                    const CheckpointOptions&>(),
           py::arg("rank"), py::arg("peers"), py::arg("bind_host"), py::arg("specs"),
           py::arg("timeout"), py::arg("startup_timeout"), py::arg("epochs"), py::arg("tls_cert"),
           py::arg("tls_key"), py::arg("tls_ca"), py::arg("token"), py::arg("checkpoints"))
      .def("start", &Collective::Start)
      .def("step", &Collective::Step)
      .def("checkpoint", &Collective::Checkpoint)
      .def("deal_epoch", &Collective::DealEpoch)
      .def("resumed_batches", &Collective::ResumedBatches)
      .def_property_readonly("step_count", &Collective::step);
}

}  // namespace fulcrum::native
