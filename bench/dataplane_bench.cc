// Data-plane benchmark: dense push+pull throughput for tensors from 4 KiB up,
// with 1 parameter server (over 1 and 4 channels) and 4 on loopback,
// against a bare gRPC bytes echo of the same size measured in the same run;
// and the latency (p50, p99) of a 4 KiB pull and push-then-pull; and the
// cost curve of a push+pull against the model's size, 1 MiB to 1 GiB.
// Prints tables and `name=value` lines.
// Raw TCP (iperf3) is measured by bench/run.sh beside it.
#include <arpa/inet.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/server_builder.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_util.h"
#include "bench/echo.grpc.pb.h"
#include "common/process_tuning.h"
#include "fulcrum/grpc_ps_client.h"
#include "fulcrum/ps_client.h"
#include "ps_server/grpc/ps_grpc_server.h"
#include "worker/model.h"

ABSL_FLAG(bool, quick, false, "Fewer sizes and iterations: a run of about a minute.");
ABSL_FLAG(std::string, tls_dir, "",
          "A directory of scripts/make_certs.sh's files: also measures mutual TLS (servers "
          "with ps.pem, the client with worker.pem) against plaintext. Empty: plaintext only.");
ABSL_FLAG(int64_t, curve_max_mib, 1024,
          "The cost curve's largest model, in MiB: push+pull time of 1 MiB, 4 MiB, ... up to "
          "it, over one server (--quick: at most 64; 0: no curve).");
ABSL_FLAG(int64_t, max_size_mib, 256,
          "Largest tensor of the throughput sweep, in MiB (--quick: at most 64); 0 skips the "
          "sweep, for the latencies alone.");

namespace fulcrum {
namespace {

class EchoService final : public bench::Echo::Service {
  grpc::Status Echo(grpc::ServerContext*, const bench::Bytes* request,
                    bench::Bytes* response) override {
    response->set_data(request->data());
    return grpc::Status::OK;
  }
};

// The files of `role` in a make_certs.sh directory; plaintext for "".
TlsFiles RoleFiles(const std::string& dir, const std::string& role) {
  if (dir.empty()) return {};
  return {dir + "/" + role + ".pem", dir + "/" + role + ".key", dir + "/ca.pem"};
}

// `num_ps` servers on loopback and a client sending `wire` encodings over
// `channels` channels to each; mutual TLS with the certificates in
// `tls_dir`, when given.
struct Cluster {
  explicit Cluster(int num_ps, DataType wire = DT_FLOAT, int channels = 1,
                   const std::string& tls_dir = "")
      : loopback(num_ps, BenchServerConfig(), RoleFiles(tls_dir, "ps")) {
    PsClientOptions options;
    options.wire_dtype = wire;
    options.channels_per_server = channels;
    const TlsFiles client_files = RoleFiles(tls_dir, "worker");
    options.tls_cert = client_files.cert;
    options.tls_key = client_files.key;
    options.tls_ca = client_files.ca;
    client = NewGrpcPsClient(loopback.addresses, options);
  }
  // Holding one variable of `bytes` (float32), split evenly over the servers
  // and, on each, over its channels; with `max_shard_bytes`, into shards of
  // at most that many bytes (the MAX_SIZE partitioner).
  Cluster(int num_ps, int64_t bytes, DataType wire = DT_FLOAT, int channels = 1,
          int64_t max_shard_bytes = 0, const std::string& tls_dir = "")
      : Cluster(num_ps, wire, channels, tls_dir) {
    const int shards = num_ps * channels;
    const int64_t floats = std::max<int64_t>(1, bytes / 4);
    const int64_t rows = std::max<int64_t>(shards, std::min<int64_t>(floats, 1024));
    VariableSpec spec;
    spec.set_name("w");
    spec.add_shape(rows);
    spec.add_shape(std::max<int64_t>(1, floats / rows));
    spec.set_dtype(DT_FLOAT);
    spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
    spec.mutable_partitioner()->set_num_shards(shards);
    if (max_shard_bytes > 0) {
      spec.mutable_partitioner()->set_kind(PartitionerSpec::MAX_SIZE);
      spec.mutable_partitioner()->set_max_shard_bytes(max_shard_bytes);
    }
    spec.mutable_optimizer()->set_learning_rate(1e-6f);
    if (!client->CreateVariables({spec}).ok()) std::abort();
    grads["w"] = DenseTensor{{spec.shape(0), spec.shape(1)},
                             std::vector<float>(spec.shape(0) * spec.shape(1), 1e-3f)};
  }
  // Holding the variables of the worker's model, placed as the worker places them.
  Cluster(int num_ps, const ModelConfig& model, DataType wire = DT_FLOAT) : Cluster(num_ps, wire) {
    const std::vector<VariableSpec> specs = ModelVariables(model);
    if (!client->CreateVariables(specs).ok()) std::abort();
    for (const VariableSpec& spec : specs) {
      DenseTensor& grad = grads[spec.name()];
      grad.shape.assign(spec.shape().begin(), spec.shape().end());
      grad.values.assign(NumElements(grad.shape), 1e-3f);
    }
  }
  LoopbackServers loopback;
  std::unique_ptr<PsClient> client;
  TensorMap grads;
};

// Seconds per push-pull of the cluster's gradients, pulling every variable.
std::vector<double> TimePushPull(Cluster& cluster, int iterations) {
  TensorMap out;
  return Time(iterations, [&] {
    if (!cluster.client->PushPull(cluster.grads, {}, &out).ok()) std::abort();
  });
}

// Reads or writes exactly `n` bytes; false when the peer went away.
template <typename Io>
bool Exactly(Io io, int fd, char* buf, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t got = io(fd, buf + done, n - done);
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

// Round trips of `bytes` over a raw loopback TCP connection (TCP_NODELAY)
// to an echo thread: the floor under any RPC's latency.
std::vector<double> TcpPingPong(size_t bytes, int iterations) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::abort();
  }
  const auto reader = [](int fd, char* b, size_t n) { return read(fd, b, n); };
  const auto writer = [](int fd, char* b, size_t n) { return write(fd, b, n); };
  std::thread echo([&] {
    const int fd = accept(listener, nullptr, nullptr);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::vector<char> buf(bytes);
    while (Exactly(reader, fd, buf.data(), bytes) && Exactly(writer, fd, buf.data(), bytes)) {
    }
    close(fd);
  });
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
  std::vector<char> buf(bytes, 'x');
  std::vector<double> seconds = Time(iterations, [&] {
    if (!Exactly(writer, fd, buf.data(), bytes) || !Exactly(reader, fd, buf.data(), bytes)) {
      std::abort();
    }
  });
  close(fd);
  echo.join();
  close(listener);
  return seconds;
}

// Rounds of each throughput measurement; the best counts.
constexpr int kRounds = 3;

std::string SizeName(int64_t bytes) {
  return bytes >= (1 << 20) ? absl::StrCat(bytes >> 20, "MiB") : absl::StrCat(bytes >> 10, "KiB");
}

// Push+pull time of models of 1 MiB to `largest` bytes (by fours) over one
// server, in shards of 4 MiB at most: its median over at least 3 calls,
// and the rate it makes.
void PushPullCurve(int64_t largest) {
  if (largest <= 0) return;
  std::printf("push+pull time against the model's size (1 server, shards of 4 MiB at most)\n");
  for (int64_t size = 1 << 20; size <= largest; size *= 4) {
    Cluster cluster(1, size, DT_FLOAT, 1, int64_t{4} << 20);
    const int iterations =
        static_cast<int>(std::clamp<int64_t>((int64_t{512} << 20) / size, 3, 50));
    const double seconds = Percentile(TimePushPull(cluster, iterations), 0.5);
    std::printf("  %-8s %10.2f ms %10.1f MB/s\n", SizeName(size).c_str(), seconds * 1e3,
                2.0 * static_cast<double>(size) / seconds / 1e6);
    std::printf("curve_pushpull_%s_ms=%.2f\n", SizeName(size).c_str(), seconds * 1e3);
  }
  std::printf("\n");
}

int Run() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  PushPullCurve(std::min<int64_t>(absl::GetFlag(FLAGS_curve_max_mib), quick ? 64 : 1 << 30) << 20);
  EchoService echo_service;
  grpc::ServerBuilder builder;
  int echo_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &echo_port);
  builder.SetMaxReceiveMessageSize(1 << 30);
  builder.SetMaxSendMessageSize(1 << 30);
  builder.RegisterService(&echo_service);
  auto echo_server = builder.BuildAndStart();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  auto echo = bench::Echo::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", echo_port), grpc::InsecureChannelCredentials(), args));

  std::vector<int64_t> sizes;
  const int64_t max_size = std::min<int64_t>(absl::GetFlag(FLAGS_max_size_mib), quick ? 64 : 256)
                           << 20;
  for (int64_t size : {4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20}) {
    if (size <= max_size) sizes.push_back(size);
  }
  // MB/s count the tensor's float32 bytes both ways, also when bfloat16
  // carries them in half the bytes.
  struct Column {
    const char* title;
    const char* metric;  // dense_<size>_pushpull_<metric>_MBps
    int num_ps;
    int channels;
    DataType wire;
    int64_t max_shard_bytes;  // 0: one shard per server and channel
  };
  const Column columns[] = {{"1 PS", "1ps", 1, 1, DT_FLOAT, 0},
                            {"1 PS 4 ch", "1ps_4ch", 1, 4, DT_FLOAT, 0},
                            {"1 PS split", "1ps_split", 1, 1, DT_FLOAT, 4 << 20},
                            {"4 PS", "4ps", 4, 1, DT_FLOAT, 0},
                            {"4 PS bf16", "4ps_bf16", 4, 1, DT_BFLOAT16, 0}};
  std::printf("%-8s %10s", "size", "echo");
  for (const Column& column : columns) std::printf(" %10s", column.title);
  std::printf(" %9s   (MB/s)\n", "best/echo");
  for (int64_t size : sizes) {
    // At least 10 calls, and their median: a shared machine's hiccups
    // would move the mean of a few large transfers by a third.
    const int iterations = std::max<int>(
        10, static_cast<int>((quick ? int64_t{64} : int64_t{256}) * (1 << 20) / size));
    const int capped = std::min(iterations, quick ? 200 : 1000);
    bench::Bytes request;
    request.set_data(std::string(size, 'x'));
    const auto echo_call = [&] {
      grpc::ClientContext context;
      bench::Bytes response;
      if (!echo->Echo(&context, request, &response).ok()) std::abort();
    };
    std::vector<std::unique_ptr<Cluster>> clusters;
    for (const Column& column : columns) {
      clusters.push_back(std::make_unique<Cluster>(column.num_ps, size, column.wire,
                                                   column.channels, column.max_shard_bytes));
    }
    // Rounds take turns over the echo and the columns, and each keeps its
    // best round: as for iperf3's baseline, other load on a shared machine
    // only ever lowers throughput.
    double echo_mbs = 0;
    std::vector<double> mbs(clusters.size(), 0.0);
    for (int round = 0; round < kRounds; ++round) {
      echo_mbs = std::max(echo_mbs, 2.0 * size / Percentile(Time(capped, echo_call), 0.5) / 1e6);
      for (size_t c = 0; c < clusters.size(); ++c) {
        // The tensor goes out and comes back.
        const double seconds = Percentile(TimePushPull(*clusters[c], capped), 0.5);
        mbs[c] = std::max(mbs[c], 2.0 * size / seconds / 1e6);
      }
    }
    std::string row = absl::StrFormat("%-8s %10.1f", SizeName(size), echo_mbs);
    double best_f32 = 0;
    std::string metrics;
    for (size_t c = 0; c < clusters.size(); ++c) {
      if (columns[c].wire == DT_FLOAT) best_f32 = std::max(best_f32, mbs[c]);
      absl::StrAppendFormat(&row, " %10.1f", mbs[c]);
      absl::StrAppend(&metrics, "dense_", SizeName(size), "_pushpull_", columns[c].metric,
                      "_MBps=", absl::StrFormat("%.1f", mbs[c]), "\n");
    }
    std::printf("%s %9.2f\n%s", row.c_str(), best_f32 / echo_mbs, metrics.c_str());
    std::printf("dense_%s_pushpull_vs_grpc_echo=%.2f\n", SizeName(size).c_str(),
                best_f32 / echo_mbs);
  }

  // Small-message latency on one server. Turns of 50 calls go round the
  // pull, the push+pull and the echo, so that the VM's drift during the
  // run (other tenants, the CPU's clock), which lasts longer than a turn,
  // falls on each alike; the pull's ratio to the echo is the median over
  // the turns of the ratio of their p50s.
  Cluster cluster(1, 4 << 10);
  TensorMap out;
  const int n = quick ? 500 : 3000;
  constexpr int kTurnCalls = 50;
  bench::Bytes small;
  small.set_data(std::string(4 << 10, 'x'));
  std::vector<double> pull, push_pull, echo_small, pull_vs_echo;
  const auto add = [](std::vector<double>& to, const std::vector<double>& more) {
    to.insert(to.end(), more.begin(), more.end());
  };
  for (int turn = 0; turn < n / kTurnCalls; ++turn) {
    const std::vector<double> pulls = Time(kTurnCalls, [&] {
      if (!cluster.client->Pull({}, &out).ok()) std::abort();
    });
    add(pull, pulls);
    add(push_pull, TimePushPull(cluster, kTurnCalls));
    const std::vector<double> echoes = Time(kTurnCalls, [&] {
      grpc::ClientContext context;
      bench::Bytes response;
      if (!echo->Echo(&context, small, &response).ok()) std::abort();
    });
    add(echo_small, echoes);
    pull_vs_echo.push_back(Percentile(pulls, 0.5) / Percentile(echoes, 0.5));
  }
  std::printf("pull_4KiB_p50_us=%.1f\npull_4KiB_p99_us=%.1f\n", Percentile(pull, 0.5) * 1e6,
              Percentile(pull, 0.99) * 1e6);
  std::printf("pushpull_4KiB_p50_us=%.1f\npushpull_4KiB_p99_us=%.1f\n",
              Percentile(push_pull, 0.5) * 1e6, Percentile(push_pull, 0.99) * 1e6);
  const std::vector<double> tcp_small = TcpPingPong(4 << 10, n);
  std::printf("grpc_echo_4KiB_p50_us=%.1f\npull_4KiB_p50_vs_grpc_echo=%.2f\n",
              Percentile(echo_small, 0.5) * 1e6, Percentile(pull_vs_echo, 0.5));
  std::printf("tcp_pingpong_4KiB_p50_us=%.1f\ntcp_pingpong_4KiB_p99_us=%.1f\n",
              Percentile(tcp_small, 0.5) * 1e6, Percentile(tcp_small, 0.99) * 1e6);
  std::printf("pull_4KiB_p50_vs_tcp_pingpong=%.2f\n",
              Percentile(pull, 0.5) / Percentile(tcp_small, 0.5));

  // Mutual TLS against plaintext: 64 MiB in 4 MiB shards on one server
  // (the pipelined case), rounds taking turns, the best of each; and a
  // 4 KiB pull's latency.
  if (const std::string tls_dir = absl::GetFlag(FLAGS_tls_dir); !tls_dir.empty()) {
    const int64_t size = 64 << 20;
    Cluster plain(1, size, DT_FLOAT, 1, 4 << 20);
    Cluster tls(1, size, DT_FLOAT, 1, 4 << 20, tls_dir);
    double plain_mbs = 0, tls_mbs = 0;
    for (int round = 0; round < kRounds; ++round) {
      plain_mbs = std::max(plain_mbs, 2.0 * size / Percentile(TimePushPull(plain, 10), 0.5) / 1e6);
      tls_mbs = std::max(tls_mbs, 2.0 * size / Percentile(TimePushPull(tls, 10), 0.5) / 1e6);
    }
    std::printf("dense_64MiB_pushpull_plain_MBps=%.1f\ndense_64MiB_pushpull_tls_MBps=%.1f\n",
                plain_mbs, tls_mbs);
    std::printf("dense_64MiB_pushpull_tls_vs_plain=%.2f\n", tls_mbs / plain_mbs);
    Cluster small_tls(1, 4 << 10, DT_FLOAT, 1, 0, tls_dir);
    const std::vector<double> pull_tls = Time(n, [&] {
      if (!small_tls.client->Pull({}, &out).ok()) std::abort();
    });
    std::printf("pull_4KiB_p50_tls_us=%.1f\npull_4KiB_p50_tls_vs_plain=%.2f\n",
                Percentile(pull_tls, 0.5) * 1e6, Percentile(pull_tls, 0.5) / Percentile(pull, 0.5));
  }

  // One training step's push-pull of the Fashion-MNIST MLP (784-256-128-10,
  // Adam) over 2 servers, as the end-to-end benchmark's workers make it.
  ModelConfig model;
  model.optimizer.set_kind(OptimizerSpec::ADAM);
  model.optimizer.set_learning_rate(1e-6f);
  model.num_ps = 2;
  // Float32 and bfloat16 on the wire take turns, as the latencies above.
  Cluster f32(2, model, DT_FLOAT), bf16(2, model, DT_BFLOAT16);
  std::vector<double> f32_steps, bf16_steps;
  for (int turn = 0; turn < (quick ? 200 : 1000) / kTurnCalls; ++turn) {
    add(f32_steps, TimePushPull(f32, kTurnCalls));
    add(bf16_steps, TimePushPull(bf16, kTurnCalls));
  }
  for (const auto& [suffix, step] : {std::pair{"", &f32_steps}, std::pair{"_bf16", &bf16_steps}}) {
    std::printf("mlp_pushpull_2ps%s_p50_us=%.1f\nmlp_pushpull_2ps%s_p99_us=%.1f\n", suffix,
                Percentile(*step, 0.5) * 1e6, suffix, Percentile(*step, 0.99) * 1e6);
  }
  std::printf("mlp_pushpull_2ps_bf16_vs_f32=%.2f\n",
              Percentile(bf16_steps, 0.5) / Percentile(f32_steps, 0.5));
  echo_server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace fulcrum

int main(int argc, char** argv) {
  fulcrum::TuneProcess();
  absl::SetProgramUsageMessage(
      "Dense push+pull throughput and 4 KiB latency against a bare gRPC echo on loopback, "
      "plaintext and (with --tls_dir) mutual TLS; name=value lines for bench/run.sh.");
  absl::ParseCommandLine(argc, argv);
  return fulcrum::Run();
}
