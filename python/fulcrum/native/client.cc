// fulcrum._fulcrum's client: a thin layer over the public C++ client
// (fulcrum/ps_client.h). It implements no protocol of its own: specs
// arrive as the wire contract's JSON and go through protobuf's parser,
// calls go through PsClient, with the GIL released during each.
#include <google/protobuf/util/json_util.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/cluster_spec.h"
#include "common/consistency_mode.h"
#include "common/file_system.h"
#include "common/rpc/credentials.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/job_checkpoints.h"
#include "fulcrum/live_export.h"
#include "fulcrum/ps_client.h"
#include "python/fulcrum/native/buffers.h"
#include "python/fulcrum/native/errors.h"
#include "python/fulcrum/native/json.h"
#include "python/fulcrum/native/module.h"
#include "worker/data/dealing.h"

namespace py = pybind11;

namespace fulcrum::native {
namespace {

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

py::dict StatsDict(const PushStats& s) {
  py::dict d;
  d["applied"] = s.applied;
  d["accumulated"] = s.accumulated;
  d["stale"] = s.stale;
  d["duplicate"] = s.duplicate;
  d["lost"] = s.lost;
  d["max_staleness"] = s.max_staleness;
  return d;
}

// A PsClient whose calls, from any Python thread or a future, run one at a
// time (PsClient's contract), with the GIL released.
class Client {
 public:
  Client(const std::vector<std::string>& addresses, int worker_id, const std::string& mode,
         double call_timeout_s, double retry_timeout_s, const std::string& wire_dtype,
         int channels_per_server, const std::string& tls_cert, const std::string& tls_key,
         const std::string& tls_ca, const std::string& auth_token, bool read_from_backups) {
    if (addresses.empty()) Throw(absl::InvalidArgumentError("no parameter server addresses"));
    PsClientOptions options;
    options.worker_id = worker_id;
    absl::StatusOr<ConsistencyMode> parsed = ParseConsistencyMode(mode);
    ThrowIfError(parsed.status());
    options.mode = *parsed;
    if (call_timeout_s <= 0 || retry_timeout_s < 0) {
      Throw(absl::InvalidArgumentError("call_timeout must be > 0 and retry_timeout >= 0 seconds"));
    }
    options.call_timeout = absl::Seconds(call_timeout_s);
    options.retry_timeout = absl::Seconds(retry_timeout_s);
    if (wire_dtype == "float32") {
      options.wire_dtype = DT_FLOAT;
    } else if (wire_dtype == "bfloat16") {
      options.wire_dtype = DT_BFLOAT16;
    } else if (wire_dtype == "float16") {
      options.wire_dtype = DT_FLOAT16;
    } else {
      Throw(absl::InvalidArgumentError(
          absl::StrCat("wire_dtype '", wire_dtype, "': one of float32, bfloat16, float16")));
    }
    if (channels_per_server < 1) {
      Throw(absl::InvalidArgumentError("channels_per_server must be at least 1"));
    }
    options.channels_per_server = channels_per_server;
    ThrowIfError(CheckTlsFiles({tls_cert, tls_key, tls_ca}));
    options.tls_cert = tls_cert;
    options.tls_key = tls_key;
    options.tls_ca = tls_ca;
    options.auth_token = auth_token;
    options.read_from_backups = read_from_backups;
    client_ = NewGrpcPsClient(addresses, options);
  }

  // Runs `call` on the client, GIL released, after any call in flight.
  template <typename F>
  auto Call(F call) {
    py::gil_scoped_release release;
    return CallWithoutGil(call);
  }
  // The same from a thread that does not hold the GIL.
  template <typename F>
  auto CallWithoutGil(F call) {
    absl::MutexLock lock(&mu_);
    return call(*client_);
  }

  void CreateVariables(const std::vector<std::string>& specs_json, const py::dict& initial) {
    std::vector<VariableSpec> specs;
    for (const std::string& json : specs_json) {
      specs.push_back(ParseSpec<VariableSpec>(json, "variable spec"));
    }
    HeldTensors held;
    Hold(initial, "initial value of", false, &held);
    ThrowIfError(Call([&](PsClient& c) { return c.CreateVariables(specs, held.in); }));
  }

  void CreateTables(const std::vector<std::string>& specs_json) {
    std::vector<EmbeddingTableSpec> specs;
    for (const std::string& json : specs_json) {
      specs.push_back(ParseSpec<EmbeddingTableSpec>(json, "table spec"));
    }
    ThrowIfError(Call([&](PsClient& c) { return c.CreateTables(specs); }));
  }

  void Pull(const py::dict& out) {
    HeldTensors held;
    Hold(out, "output", true, &held);
    ThrowIfError(Call([&](PsClient& c) { return c.PullInto(held.out); }));
  }

  py::dict Push(const py::dict& grads) {
    HeldTensors held;
    Hold(grads, "gradient", false, &held);
    absl::StatusOr<PushStats> stats = Call([&](PsClient& c) { return c.PushFrom(held.in); });
    ThrowIfError(stats.status());
    return StatsDict(*stats);
  }

  py::dict PushPull(const py::dict& grads, const py::dict& out) {
    HeldTensors held;
    Hold(grads, "gradient", false, &held);
    Hold(out, "output", true, &held);
    absl::StatusOr<PushStats> stats =
        Call([&](PsClient& c) { return c.PushPullInto(held.in, held.out); });
    ThrowIfError(stats.status());
    return StatsDict(*stats);
  }

  class Future;
  std::unique_ptr<Future> PushPullAsync(const py::dict& grads, const py::dict& out);

  // The rows of every table of `ids` ({table: int64 ids}) into `out`
  // ({table: float32 rows}), in one call per server.
  void PullRows(const py::dict& ids, const py::dict& out) {
    std::vector<TableIds> lookups;
    std::vector<std::unique_ptr<HeldBuffer>> held;
    std::vector<absl::Span<float>> rows;
    for (const auto& [key, value] : ids) {
      const std::string table = py::str(key);
      if (!out.contains(key)) {
        Throw(absl::InvalidArgumentError(absl::StrCat("table '", table, "': ids but no output")));
      }
      lookups.push_back(HoldIds(table, value, &held));
      held.push_back(std::make_unique<HeldBuffer>(out[key], Element::kFloat32, true,
                                                  absl::StrCat("output rows of '", table, "'")));
      rows.emplace_back(static_cast<float*>(held.back()->data()), held.back()->elements());
    }
    ThrowIfError(Call([&](PsClient& c) { return c.PullRowsInto(lookups, rows); }));
  }

  // Pushes a gradient row per id of every table of `ids` ({table: ids},
  // grads {table: rows}), in one call per server.
  py::dict PushRows(const py::dict& ids, const py::dict& grads) {
    std::vector<TableIds> lookups;
    std::vector<std::unique_ptr<HeldBuffer>> held;
    std::vector<absl::Span<const float>> rows;
    for (const auto& [key, value] : ids) {
      const std::string table = py::str(key);
      if (!grads.contains(key)) {
        Throw(
            absl::InvalidArgumentError(absl::StrCat("table '", table, "': ids but no gradients")));
      }
      lookups.push_back(HoldIds(table, value, &held));
      held.push_back(std::make_unique<HeldBuffer>(grads[key], Element::kFloat32, false,
                                                  absl::StrCat("row gradients of '", table, "'")));
      rows.emplace_back(static_cast<const float*>(held.back()->data()), held.back()->elements());
    }
    absl::StatusOr<PushStats> stats = Call([&](PsClient& c) { return c.PushRows(lookups, rows); });
    ThrowIfError(stats.status());
    return StatsDict(*stats);
  }

  // Table `table`'s lookup of the ids in `ids`, held in *held.
  static TableIds HoldIds(const std::string& table, const py::handle& ids,
                          std::vector<std::unique_ptr<HeldBuffer>>* held) {
    held->push_back(std::make_unique<HeldBuffer>(ids, Element::kInt64, false,
                                                 absl::StrCat("ids of '", table, "'")));
    const auto* first = static_cast<const int64_t*>(held->back()->data());
    return {table, {first, first + held->back()->elements()}};
  }

  std::vector<std::string> Describe() {
    auto described = Call([](PsClient& c) { return c.Describe(); });
    ThrowIfError(described.status());
    std::vector<std::string> out;
    for (const DescribeResponse& d : *described) out.push_back(ToJson(d));
    return out;
  }

  // (ids, rows, slots or None) of every row the servers store of `table`.
  py::tuple ReadTable(const std::string& table, bool slots) {
    std::vector<int64_t> ids;
    std::vector<float> values, slot_values;
    int64_t width = 0, row_slots = 0;
    ThrowIfError(Call([&](PsClient& c) {
      return c.ReadTable(table, slots, [&](const ReadRowsResponse& page) {
        width = page.width();
        row_slots = page.num_slots();
        ids.insert(ids.end(), page.ids().begin(), page.ids().end());
        values.insert(values.end(), page.values().begin(), page.values().end());
        slot_values.insert(slot_values.end(), page.slots().begin(), page.slots().end());
        return absl::OkStatus();
      });
    }));
    const auto rows = static_cast<py::ssize_t>(ids.size());
    py::array_t<int64_t> id_array(rows, ids.data());
    py::array_t<float> row_array({rows, static_cast<py::ssize_t>(width)}, values.data());
    py::object slot_array = py::none();
    if (slots) {
      slot_array = py::array_t<float>({rows, static_cast<py::ssize_t>(width * row_slots)},
                                      slot_values.data());
    }
    return py::make_tuple(id_array, row_array, slot_array);
  }

  // The servers' model written to `path` (ExportLive): {format, tensors, bytes}.
  py::dict Export(const std::string& path, const std::string& format) {
    auto summary = Call([&](PsClient& c) { return ExportLive(c, {path, format}); });
    ThrowIfError(summary.status());
    py::dict out;
    out["format"] = summary->format;
    out["tensors"] = summary->tensors;
    out["bytes"] = summary->bytes;
    return out;
  }

  void Heartbeat() {
    ThrowIfError(Call([](PsClient& c) { return c.Heartbeat(); }));
  }
  void AwaitJobStart() {
    ThrowIfError(Call([](PsClient& c) { return c.AwaitJobStart(nullptr); }));
  }
  void Finish() {
    ThrowIfError(Call([](PsClient& c) { return c.Finish(); }));
  }
  void JobDone(const std::string& reason) {
    ThrowIfError(Call([&](PsClient& c) { return c.JobDone(reason); }));
  }
  void StartHeartbeats(double interval_s) {
    if (interval_s <= 0) Throw(absl::InvalidArgumentError("heartbeat interval must be > 0"));
    Call([&](PsClient& c) {
      c.StartHeartbeats(absl::Seconds(interval_s));
      return 0;
    });
  }
  int64_t step() {
    return Call([](PsClient& c) { return c.step(); });
  }
  int64_t clock() {
    return Call([](PsClient& c) { return c.clock(); });
  }
  int64_t ResumedBatches(int num_workers) {
    if (num_workers < 1) Throw(absl::InvalidArgumentError("num_workers must be at least 1"));
    return Call([&](PsClient& c) { return c.ResumedBatches(num_workers); });
  }
  // (shard_index, num_shards, gone): `worker`'s dealing over the workers
  // the servers have not lost for good (DealOverWorkersLeft).
  py::tuple DealEpoch(int worker, int num_workers) {
    auto described = Call([](PsClient& c) { return c.Describe(); });
    ThrowIfError(described.status());
    std::vector<int> gone;
    const Dealing dealing = DealOverWorkersLeft(*described, worker, num_workers, &gone);
    return py::make_tuple(dealing.shard_index, dealing.num_shards, gone);
  }
  int num_servers() const { return client_->num_servers(); }
  std::string mode() const { return ConsistencyModeName(client_->mode()); }

 private:
  absl::Mutex mu_;  // one call at a time
  std::unique_ptr<PsClient> client_;
};

// A push_pull in flight on a thread of its own, holding the caller's
// buffers until it is done and its result taken (or it is dropped).
class Client::Future {
 public:
  Future(Client* client, std::unique_ptr<HeldTensors> held)
      : held_(std::move(held)), thread_([this, client] {
          result_ = client->CallWithoutGil(
              [this](PsClient& c) { return c.PushPullInto(held_->in, held_->out); });
          done_.Notify();
        }) {}

  // Waits (GIL released) for the call, then lets the buffers go.
  ~Future() {
    {
      py::gil_scoped_release release;
      if (thread_.joinable()) thread_.join();
    }
    held_.reset();
  }

  bool done() const { return done_.HasBeenNotified(); }

  // The push's stats once the call is done; raises its error. `timeout_s`
  // < 0 waits for ever; past it, DeadlineExceeded and the call goes on.
  py::dict Result(double timeout_s) {
    bool finished = true;
    {
      py::gil_scoped_release release;
      if (timeout_s < 0) {
        done_.WaitForNotification();
      } else {
        finished = done_.WaitForNotificationWithTimeout(absl::Seconds(timeout_s));
      }
      if (finished && thread_.joinable()) thread_.join();
    }
    if (!finished) {
      Throw(absl::DeadlineExceededError(
          absl::StrCat("push_pull still in flight after ", timeout_s, " s")));
    }
    held_.reset();  // the call is over: the caller's buffers are theirs again
    ThrowIfError(result_.status());
    return StatsDict(*result_);
  }

 private:
  std::unique_ptr<HeldTensors> held_;
  absl::StatusOr<PushStats> result_ = absl::UnknownError("not done");
  absl::Notification done_;
  std::thread thread_;  // last: started once the rest is built
};

std::unique_ptr<Client::Future> Client::PushPullAsync(const py::dict& grads, const py::dict& out) {
  auto held = std::make_unique<HeldTensors>();
  Hold(grads, "gradient", false, held.get());
  Hold(out, "output", true, held.get());
  return std::make_unique<Future>(this, std::move(held));
}

// A chief's JobCheckpoints, whose calls go through its Client (one call at
// a time, GIL released). State is bytes by name.
class Checkpoints {
 public:
  Checkpoints(Client* client, const std::string& dir, int64_t every_steps, int64_t every_secs,
              int keep)
      : client_(*client) {
    auto created = client_.Call([&](PsClient& c) {
      return JobCheckpoints::Create(&c, {dir, every_steps, every_secs, keep});
    });
    ThrowIfError(created.status());
    checkpoints_ = *std::move(created);
  }

  bool Due(int64_t step) const { return checkpoints_->Due(step); }

  void Save(int64_t step, const std::map<std::string, py::bytes>& state) {
    CheckpointState bytes;
    for (const auto& [name, value] : state) bytes[name] = std::string(value);
    ThrowIfError(client_.Call([&](PsClient&) { return checkpoints_->Save(step, bytes); }));
  }

  // The restored checkpoint's state ({name: bytes}), or None.
  py::object RestoredState() {
    auto state = client_.Call([&](PsClient&) { return checkpoints_->RestoredState(); });
    if (state.status().code() == absl::StatusCode::kNotFound) return py::none();
    ThrowIfError(state.status());
    py::dict out;
    for (const auto& [name, value] : *state) out[py::str(name)] = py::bytes(value);
    return std::move(out);
  }

 private:
  Client& client_;
  std::unique_ptr<JobCheckpoints> checkpoints_;
};

py::dict ResolveCluster(const std::string& cluster_spec_path, const std::string& tf_config,
                        const std::string& ps_hosts, const std::string& worker_hosts,
                        const std::string& chief_host, const std::string& task_type,
                        int task_index) {
  ClusterSources sources;
  sources.cluster_spec_path = cluster_spec_path;
  sources.tf_config_env = tf_config;
  sources.flags = ClusterFlags{ps_hosts, worker_hosts, chief_host, task_type, task_index};
  absl::StatusOr<TfConfig> config = ResolveTfConfig(sources, *MakeLocalFileSystem());
  ThrowIfError(config.status());
  py::dict out;
  out["ps"] =
      std::vector<std::string>(config->cluster().ps().begin(), config->cluster().ps().end());
  out["task_type"] = config->task().type();
  out["task_index"] = config->task().index();
  out["num_replicas"] = NumReplicas(config->cluster());
  out["replicas"] = ReplicaAddresses(config->cluster());  // by replica id: the chief first
  absl::StatusOr<int> replica = ReplicaId(*config);
  out["replica_id"] = replica.ok() ? py::object(py::int_(*replica)) : py::object(py::none());
  return out;
}

}  // namespace

void RegisterClient(py::module_& m) {
  m.def("resolve_cluster", &ResolveCluster, py::arg("cluster_spec_path"), py::arg("tf_config"),
        py::arg("ps_hosts"), py::arg("worker_hosts"), py::arg("chief_host"), py::arg("task_type"),
        py::arg("task_index"));
  py::class_<Client::Future>(m, "Future")
      .def("done", &Client::Future::done)
      .def("result", &Client::Future::Result, py::arg("timeout") = -1.0);
  py::class_<Checkpoints>(m, "Checkpoints")
      .def(py::init<Client*, const std::string&, int64_t, int64_t, int>(), py::arg("client"),
           py::arg("dir"), py::arg("every_steps"), py::arg("every_secs"), py::arg("keep"),
           py::keep_alive<1, 2>())
      .def("due", &Checkpoints::Due)
      .def("save", &Checkpoints::Save)
      .def("restored_state", &Checkpoints::RestoredState);
  py::class_<Client>(m, "Client")
      .def(py::init<const std::vector<std::string>&, int, const std::string&, double, double,
                    const std::string&, int, const std::string&, const std::string&,
                    const std::string&, const std::string&, bool>(),
           py::arg("addresses"), py::arg("worker_id"), py::arg("mode"), py::arg("call_timeout"),
           py::arg("retry_timeout"), py::arg("wire_dtype"), py::arg("channels_per_server"),
           py::arg("tls_cert"), py::arg("tls_key"), py::arg("tls_ca"), py::arg("auth_token"),
           py::arg("read_from_backups") = false)
      .def("create_variables", &Client::CreateVariables)
      .def("create_tables", &Client::CreateTables)
      .def("pull", &Client::Pull)
      .def("push", &Client::Push)
      .def("push_pull", &Client::PushPull)
      .def("push_pull_async", &Client::PushPullAsync, py::keep_alive<0, 1>())
      .def("pull_rows", &Client::PullRows)
      .def("push_rows", &Client::PushRows)
      .def("read_table", &Client::ReadTable, py::arg("table"), py::arg("slots"))
      .def("export", &Client::Export, py::arg("path"), py::arg("format"))
      .def("describe", &Client::Describe)
      .def("heartbeat", &Client::Heartbeat)
      .def("await_job_start", &Client::AwaitJobStart)
      .def("finish", &Client::Finish)
      .def("job_done", &Client::JobDone)
      .def("start_heartbeats", &Client::StartHeartbeats)
      .def_property_readonly("step", &Client::step)
      .def_property_readonly("clock", &Client::clock)
      .def("resumed_batches", &Client::ResumedBatches)
      .def("deal_epoch", &Client::DealEpoch)
      .def_property_readonly("num_servers", &Client::num_servers)
      .def_property_readonly("mode", &Client::mode);
}

}  // namespace fulcrum::native
