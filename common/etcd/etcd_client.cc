#include "common/etcd/etcd_client.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/rpc/grpc_status.h"

namespace fulcrum {
namespace {

EtcdValue FromKeyValue(const etcdserverpb::KeyValue& kv) {
  return {kv.key(), kv.value(), kv.mod_revision(), kv.lease()};
}

// etcd's status, said to come from etcd.
absl::Status Failed(const grpc::Status& status, absl::string_view what,
                    const std::string& endpoint) {
  const absl::Status s = FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat("etcd at ", endpoint, ": ", what, ": ", s.message()));
}

// Reconnects within about a second of etcd coming (back) up: by default
// the backoff grows to two minutes and a connection attempt that hangs (one
// made while etcd starts) is given 20 s, longer than the leases the
// coordination holds. A client's connection is its own, not shared with
// other channels to the same address, so one stuck attempt holds up no
// other client.
grpc::ChannelArguments ChannelArguments() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 2000);  // the connection attempt's timeout
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

}  // namespace

std::string EtcdPrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');  // every key
  end.back() = static_cast<char>(end.back() + 1);
  return end;
}

Etcd::Etcd(const std::string& endpoint,
           const std::shared_ptr<grpc::ChannelCredentials>& credentials,
           absl::Duration call_timeout)
    : endpoint_(endpoint),
      call_timeout_(call_timeout),
      channel_(grpc::CreateCustomChannel(endpoint, credentials, ChannelArguments())),
      kv_(etcdserverpb::KV::NewStub(channel_)),
      lease_(etcdserverpb::Lease::NewStub(channel_)),
      watch_(etcdserverpb::Watch::NewStub(channel_)) {}

std::unique_ptr<grpc::ClientContext> Etcd::Context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + call_timeout_));
  return context;
}

absl::StatusOr<EtcdValue> Etcd::Get(absl::string_view key) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::RangeResponse response;
  const grpc::Status status = kv_->Range(Context().get(), request, &response);
  if (!status.ok()) return Failed(status, absl::StrCat("reading ", key), endpoint_);
  if (response.kvs_size() == 0) {
    return absl::NotFoundError(absl::StrCat("etcd at ", endpoint_, " has no key ", key));
  }
  return FromKeyValue(response.kvs(0));
}

absl::StatusOr<EtcdListing> Etcd::List(absl::string_view prefix) {
  etcdserverpb::RangeRequest request;
  request.set_key(std::string(prefix));
  request.set_range_end(EtcdPrefixEnd(prefix));
  etcdserverpb::RangeResponse response;
  const grpc::Status status = kv_->Range(Context().get(), request, &response);
  if (!status.ok()) return Failed(status, absl::StrCat("listing ", prefix), endpoint_);
  EtcdListing listing;
  listing.revision = response.header().revision();
  for (const etcdserverpb::KeyValue& kv : response.kvs())
    listing.values.push_back(FromKeyValue(kv));
  return listing;
}

absl::StatusOr<int64_t> Etcd::Put(absl::string_view key, absl::string_view value, int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  const grpc::Status status = kv_->Put(Context().get(), request, &response);
  if (!status.ok()) return Failed(status, absl::StrCat("writing ", key), endpoint_);
  return response.header().revision();
}

absl::StatusOr<int64_t> Etcd::CompareAndPut(absl::string_view key, absl::string_view value,
                                            int64_t expected, int64_t lease) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* compare = request.add_compare();
  compare->set_key(std::string(key));
  compare->set_result(etcdserverpb::Compare::EQUAL);
  compare->set_target(etcdserverpb::Compare::MOD);
  compare->set_mod_revision(expected);  // an absent key's is 0
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(std::string(key));
  put->set_value(std::string(value));
  put->set_lease(lease);
  etcdserverpb::TxnResponse response;
  const grpc::Status status = kv_->Txn(Context().get(), request, &response);
  if (!status.ok()) return Failed(status, absl::StrCat("writing ", key), endpoint_);
  if (!response.succeeded()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "etcd at ", endpoint_, ": ", key, " was written by another since revision ", expected));
  }
  return response.header().revision();
}

absl::Status Etcd::Delete(absl::string_view key) {
  etcdserverpb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  etcdserverpb::DeleteRangeResponse response;
  const grpc::Status status = kv_->DeleteRange(Context().get(), request, &response);
  if (!status.ok()) return Failed(status, absl::StrCat("deleting ", key), endpoint_);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Etcd::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(ttl)));
  etcdserverpb::LeaseGrantResponse response;
  const grpc::Status status = lease_->LeaseGrant(Context().get(), request, &response);
  if (!status.ok()) return Failed(status, "granting a lease", endpoint_);
  if (!response.error().empty()) {
    return absl::UnavailableError(
        absl::StrCat("etcd at ", endpoint_, ": granting a lease: ", response.error()));
  }
  return response.id();
}

absl::StatusOr<absl::Duration> Etcd::KeepAlive(int64_t lease) {
  std::unique_ptr<grpc::ClientContext> context = Context();
  auto stream = lease_->LeaseKeepAlive(context.get());
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  const bool answered = stream->Write(request) && stream->WritesDone() && stream->Read(&response);
  const grpc::Status status = stream->Finish();
  if (!answered || !status.ok()) {
    return Failed(status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "no answer") : status,
                  absl::StrCat("renewing lease ", lease), endpoint_);
  }
  if (response.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd at ", endpoint_, ": lease ", lease, " expired"));
  }
  return absl::Seconds(response.ttl());
}

absl::Status Etcd::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  const grpc::Status status = lease_->LeaseRevoke(Context().get(), request, &response);
  if (!status.ok()) return Failed(status, absl::StrCat("revoking lease ", lease), endpoint_);
  return absl::OkStatus();
}

std::unique_ptr<EtcdWatch> Etcd::Watch(absl::string_view prefix, int64_t from,
                                       std::function<void(const std::vector<EtcdEvent>&)> on_events,
                                       std::function<void(const absl::Status&)> on_error) {
  std::unique_ptr<EtcdWatch> watch(new EtcdWatch());
  etcdserverpb::WatchRequest request;
  etcdserverpb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(std::string(prefix));
  create->set_range_end(EtcdPrefixEnd(prefix));
  create->set_start_revision(from);
  watch->stream_ = watch_->Watch(&watch->context_);
  watch->reader_ = std::thread([w = watch.get(), request, what = absl::StrCat("watching ", prefix),
                                endpoint = endpoint_, on_events = std::move(on_events),
                                on_error = std::move(on_error)] {
    // Why the stream ended, unless the watch's owner ended it.
    auto fail = [&](const absl::Status& why) {
      if (!w->stopping_) on_error(why);
    };
    etcdserverpb::WatchResponse response;
    if (!w->stream_->Write(request)) {
      fail(Failed(w->stream_->Finish(), what, endpoint));
      return;
    }
    while (w->stream_->Read(&response)) {
      if (response.canceled()) {
        w->context_.TryCancel();
        w->stream_->Finish();
        fail(absl::AbortedError(absl::StrCat(
            "etcd at ", endpoint, ": ", what, " was cancelled: ", response.cancel_reason(),
            response.compact_revision() > 0
                ? absl::StrCat(" (compacted to revision ", response.compact_revision(), ")")
                : "")));
        return;
      }
      std::vector<EtcdEvent> events;
      for (const etcdserverpb::Event& event : response.events()) {
        events.push_back({event.type() == etcdserverpb::Event::DELETE, FromKeyValue(event.kv())});
      }
      if (!events.empty()) on_events(events);
    }
    const grpc::Status status = w->stream_->Finish();
    fail(Failed(
        status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream ended") : status,
        what, endpoint));
  });
  return watch;
}

EtcdWatch::~EtcdWatch() {
  stopping_ = true;
  context_.TryCancel();
  if (reader_.joinable()) reader_.join();
}

}  // namespace fulcrum
