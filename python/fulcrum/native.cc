// fulcrum._fulcrum: the native half of the Python package, a thin pybind11
// layer over the public C++ client (fulcrum/ps_client.h). It implements no
// protocol of its own: specs arrive as the wire contract's JSON and go
// through protobuf's parser, calls go through PsClient.
//
// Zero copy: tensors are the caller's own float32 buffers, taken through
// the buffer protocol (NumPy arrays, memoryviews) or DLPack (CPU torch
// tensors, anything with __dlpack__), C-contiguous and never converted:
// anything else is refused, so no call copies behind the caller's back.
// Pulled values are written into them in place; gradients are read from
// them. The GIL is released during every call.
//
// Errors are fulcrum.Error subclasses named after the gRPC status code
// (fulcrum.Unavailable, ...), with .code (the name) and the message.
#include <dlpack/dlpack.h>
#include <google/protobuf/util/json_util.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/cluster_spec.h"
#include "common/consistency_mode.h"
#include "common/file_system.h"
#include "common/rpc/credentials.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"

namespace py = pybind11;

namespace fulcrum {
namespace {

// ---- Errors --------------------------------------------------------------

// A failed absl::Status on its way to Python.
struct StatusError {
  absl::Status status;
};

[[noreturn]] void Throw(const absl::Status& status) { throw StatusError{status}; }

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) Throw(status);
}

// fulcrum.Error and one subclass per status code, by code.
std::map<absl::StatusCode, py::object>& ErrorClasses() {
  static auto* classes = new std::map<absl::StatusCode, py::object>();
  return *classes;
}

std::string CodeName(absl::StatusCode code) {
  // absl's names, in CamelCase: "INVALID_ARGUMENT" -> "InvalidArgument".
  const std::string upper = absl::StatusCodeToString(code);
  std::string name;
  bool start = true;
  for (char c : upper) {
    if (c == '_') {
      start = true;
      continue;
    }
    name += start ? c : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    start = false;
  }
  return name;
}

void RegisterErrors(py::module_& m) {
  py::object base = py::reinterpret_steal<py::object>(
      PyErr_NewExceptionWithDoc("fulcrum.Error",
                                "A failed Fulcrum call: .code is the gRPC status code's name "
                                "(\"UNAVAILABLE\", ...), str() the server's or client's message.",
                                PyExc_RuntimeError, nullptr));
  m.attr("Error") = base;
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    const std::string name = CodeName(code);
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewException(absl::StrCat("fulcrum.", name).c_str(), base.ptr(), nullptr));
    m.attr(name.c_str()) = cls;
    ErrorClasses()[code] = cls;
  }
  ErrorClasses()[absl::StatusCode::kOk] = base;
  // NOLINTNEXTLINE(performance-unnecessary-value-param): pybind11's signature
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      auto it = ErrorClasses().find(e.status.code());
      py::object cls =
          it != ErrorClasses().end() ? it->second : ErrorClasses()[absl::StatusCode::kOk];
      py::object error = cls(std::string(e.status.message()));
      error.attr("code") = absl::StatusCodeToString(e.status.code());
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });
}

// ---- Buffers -------------------------------------------------------------

// The element types tensors and ids come in.
enum class Element { kFloat32, kInt64 };

const char* ElementName(Element e) { return e == Element::kFloat32 ? "float32" : "int64"; }

bool BufferFormatIs(const char* format, Element e) {
  if (format == nullptr) return false;
  std::string f = format;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f = f.substr(1);
  if (e == Element::kFloat32) return f == "f";
  return f == "q" || f == "l";  // with itemsize 8, checked by the caller
}

// A caller's buffer, held for one call: through the buffer protocol or
// DLPack. Must be acquired and released with the GIL held.
class HeldBuffer {
 public:
  // `what` names it in errors ("variable 'w'"); `writable` for outputs.
  HeldBuffer(const py::handle& object, Element element, bool writable, const std::string& what) {
    if (PyObject_CheckBuffer(object.ptr())) {
      int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
      if (writable) flags |= PyBUF_WRITABLE;
      if (PyObject_GetBuffer(object.ptr(), &view_, flags) != 0) {
        const std::string why = py::error_already_set().what();
        Throw(absl::InvalidArgumentError(
            absl::StrCat(what, ": needs a C-contiguous", writable ? ", writable " : " ",
                         ElementName(element), " buffer (", why, ")")));
      }
      has_view_ = true;
      const Py_ssize_t itemsize = element == Element::kFloat32 ? 4 : 8;
      if (view_.itemsize != itemsize || !BufferFormatIs(view_.format, element)) {
        const std::string format = view_.format != nullptr ? view_.format : "?";
        Release();
        Throw(absl::InvalidArgumentError(absl::StrCat(what, ": a buffer of format '", format,
                                                      "'; Fulcrum takes ", ElementName(element),
                                                      " and converts nothing")));
      }
      data_ = view_.buf;
      for (int i = 0; i < view_.ndim; ++i) shape_.push_back(view_.shape[i]);
      return;
    }
    if (!py::hasattr(object, "__dlpack__")) {
      Throw(absl::InvalidArgumentError(absl::StrCat(
          what, ": a ", py::str(py::type::of(object).attr("__name__")).cast<std::string>(),
          "; Fulcrum takes NumPy arrays, CPU torch tensors or other objects with the buffer "
          "protocol or __dlpack__")));
    }
    py::object capsule;
    try {
      capsule = object.attr("__dlpack__")();
    } catch (py::error_already_set& e) {
      const std::string why = py::str(e.value());
      Throw(absl::InvalidArgumentError(absl::StrCat(what, ": ", why)));
    }
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    if (managed == nullptr) {
      PyErr_Clear();
      Throw(absl::InvalidArgumentError(absl::StrCat(what, ": __dlpack__ gave no DLPack tensor")));
    }
    // Ours now: the capsule must not free it again.
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    managed_ = managed;
    const DLTensor& t = managed->dl_tensor;
    const bool type_ok = t.dtype.lanes == 1 && (element == Element::kFloat32
                                                    ? t.dtype.code == kDLFloat && t.dtype.bits == 32
                                                    : t.dtype.code == kDLInt && t.dtype.bits == 64);
    if (t.device.device_type != kDLCPU) {
      Release();
      Throw(absl::InvalidArgumentError(
          absl::StrCat(what, ": a tensor on device type ", t.device.device_type,
                       "; Fulcrum reads and writes host memory (move it with .cpu())")));
    }
    if (!type_ok) {
      const int code = t.dtype.code, bits = t.dtype.bits;
      Release();
      Throw(absl::InvalidArgumentError(
          absl::StrCat(what, ": a DLPack tensor of type code ", code, " and ", bits,
                       " bits; Fulcrum takes ", ElementName(element), " and converts nothing")));
    }
    for (int i = 0; i < t.ndim; ++i) shape_.push_back(t.shape[i]);
    if (t.strides != nullptr) {
      int64_t expected = 1;
      for (int i = t.ndim - 1; i >= 0; --i) {
        if (t.shape[i] != 1 && t.strides[i] != expected) {
          Release();
          Throw(absl::InvalidArgumentError(
              absl::StrCat(what, ": not C-contiguous (call .contiguous() first)")));
        }
        expected *= t.shape[i];
      }
    }
    data_ = static_cast<char*>(t.data) + t.byte_offset;
  }

  ~HeldBuffer() { Release(); }
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;

  void* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t elements() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }

 private:
  void Release() {
    if (has_view_) PyBuffer_Release(&view_);
    has_view_ = false;
    if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
    managed_ = nullptr;
  }

  Py_buffer view_{};
  bool has_view_ = false;
  DLManagedTensor* managed_ = nullptr;
  void* data_ = nullptr;
  Shape shape_;
};

// The buffers of one call, and views of them for PsClient.
struct HeldTensors {
  std::vector<std::unique_ptr<HeldBuffer>> held;
  TensorViews out;
  ConstTensorViews in;
};

// Holds each tensor of `tensors` (float32, writable for outputs) and views
// it by name: in `into->out` for outputs, in `into->in` for inputs. `role`
// names them in errors ("gradient", "output").
void Hold(const py::dict& tensors, const char* role, bool output, HeldTensors* into) {
  for (const auto& [key, value] : tensors) {
    const std::string name = py::str(key);
    into->held.push_back(std::make_unique<HeldBuffer>(value, Element::kFloat32, output,
                                                      absl::StrCat(role, " '", name, "'")));
    const HeldBuffer& b = *into->held.back();
    if (output) {
      into->out[name] = TensorView{b.shape(), static_cast<float*>(b.data())};
    } else {
      into->in[name] = ConstTensorView{b.shape(), static_cast<const float*>(b.data())};
    }
  }
}

// ---- Specs ---------------------------------------------------------------

template <typename Message>
Message ParseSpec(const std::string& json, const char* what) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(json, &message, options);
  if (!status.ok()) {
    Throw(absl::InvalidArgumentError(
        absl::StrCat(what, " ", json, ": ", std::string(status.message()))));
  }
  return message;
}

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

// ---- The client ----------------------------------------------------------

// A PsClient whose calls, from any Python thread or a future, run one at a
// time (PsClient's contract), with the GIL released.
class Client {
 public:
  Client(const std::vector<std::string>& addresses, int worker_id, const std::string& mode,
         double call_timeout_s, double retry_timeout_s, const std::string& wire_dtype,
         int channels_per_server, const std::string& tls_cert, const std::string& tls_key,
         const std::string& tls_ca, const std::string& auth_token) {
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

  void PullRows(const std::string& table, const py::handle& ids, const py::handle& out) {
    HeldBuffer id_buffer(ids, Element::kInt64, false, "ids");
    HeldBuffer out_buffer(out, Element::kFloat32, true, "output rows");
    const auto* first = static_cast<const int64_t*>(id_buffer.data());
    std::vector<TableIds> lookups = {{table, {first, first + id_buffer.elements()}}};
    ThrowIfError(Call([&](PsClient& c) {
      return c.PullRowsInto(
          lookups, {absl::MakeSpan(static_cast<float*>(out_buffer.data()), out_buffer.elements())});
    }));
  }

  py::dict PushRows(const std::string& table, const py::handle& ids, const py::handle& grads) {
    HeldBuffer id_buffer(ids, Element::kInt64, false, "ids");
    HeldBuffer grad_buffer(grads, Element::kFloat32, false, "row gradients");
    const auto* first = static_cast<const int64_t*>(id_buffer.data());
    std::vector<TableIds> lookups = {{table, {first, first + id_buffer.elements()}}};
    absl::StatusOr<PushStats> stats = Call([&](PsClient& c) {
      return c.PushRows(lookups, {absl::MakeConstSpan(static_cast<const float*>(grad_buffer.data()),
                                                      grad_buffer.elements())});
    });
    ThrowIfError(stats.status());
    return StatsDict(*stats);
  }

  std::vector<std::string> Describe() {
    auto described = Call([](PsClient& c) { return c.Describe(); });
    ThrowIfError(described.status());
    std::vector<std::string> out;
    for (const DescribeResponse& d : *described) out.push_back(ToJson(d));
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

// ---- The cluster spec ----------------------------------------------------

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
  absl::StatusOr<int> replica = ReplicaId(*config);
  out["replica_id"] = replica.ok() ? py::object(py::int_(*replica)) : py::object(py::none());
  return out;
}

}  // namespace
}  // namespace fulcrum

PYBIND11_MODULE(_fulcrum, m) {
  using fulcrum::Client;
  m.doc() = "Fulcrum's native client (use the fulcrum package, not this module).";
  fulcrum::RegisterErrors(m);
  m.def("resolve_cluster", &fulcrum::ResolveCluster, py::arg("cluster_spec_path"),
        py::arg("tf_config"), py::arg("ps_hosts"), py::arg("worker_hosts"), py::arg("chief_host"),
        py::arg("task_type"), py::arg("task_index"));
  py::class_<Client::Future>(m, "Future")
      .def("done", &Client::Future::done)
      .def("result", &Client::Future::Result, py::arg("timeout") = -1.0);
  py::class_<Client>(m, "Client")
      .def(py::init<const std::vector<std::string>&, int, const std::string&, double, double,
                    const std::string&, int, const std::string&, const std::string&,
                    const std::string&, const std::string&>(),
           py::arg("addresses"), py::arg("worker_id"), py::arg("mode"), py::arg("call_timeout"),
           py::arg("retry_timeout"), py::arg("wire_dtype"), py::arg("channels_per_server"),
           py::arg("tls_cert"), py::arg("tls_key"), py::arg("tls_ca"), py::arg("auth_token"))
      .def("create_variables", &Client::CreateVariables)
      .def("create_tables", &Client::CreateTables)
      .def("pull", &Client::Pull)
      .def("push", &Client::Push)
      .def("push_pull", &Client::PushPull)
      .def("push_pull_async", &Client::PushPullAsync, py::keep_alive<0, 1>())
      .def("pull_rows", &Client::PullRows)
      .def("push_rows", &Client::PushRows)
      .def("describe", &Client::Describe)
      .def("heartbeat", &Client::Heartbeat)
      .def("await_job_start", &Client::AwaitJobStart)
      .def("finish", &Client::Finish)
      .def("job_done", &Client::JobDone)
      .def("start_heartbeats", &Client::StartHeartbeats)
      .def_property_readonly("step", &Client::step)
      .def_property_readonly("clock", &Client::clock)
      .def_property_readonly("num_servers", &Client::num_servers)
      .def_property_readonly("mode", &Client::mode);
}
