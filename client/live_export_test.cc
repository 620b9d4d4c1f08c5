// The live servers' model written as a tensor file: variables whole from
// their shards, every stored row of a table, the layout fulcrumctl export
// gives; nothing left behind when it cannot be done.
#include "fulcrum/live_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client_test_util.h"
#include "client/ps_client_impl.h"
#include "client/transport/in_process_ps_transport.h"
#include "common/file_system.h"

namespace fulcrum {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
std::vector<T> As(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

class LiveExportTest : public ::testing::Test {
 protected:
  LiveExportTest()
      : fs_(MakeLocalFileSystem()),
        dir_(absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    EXPECT_TRUE(fs_->RemoveAll(dir_).ok());
    EXPECT_TRUE(fs_->MakeDirs(dir_).ok());
    for (int i = 0; i < 2; ++i) {
      servers_.push_back(std::make_unique<ParameterServer>(TestServerConfig(ASYNC, 2)));
    }
  }

  std::unique_ptr<PsClient> Client(int worker) {
    std::vector<std::unique_ptr<PsTransport>> transports;
    for (auto& server : servers_) {
      transports.push_back(std::make_unique<InProcessPsTransport>(server.get()));
    }
    PsClientOptions options;
    options.worker_id = worker;
    return std::make_unique<PsClientImpl>(std::move(transports), options);
  }

  std::unique_ptr<FileSystem> fs_;
  const std::string dir_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
};

TEST_F(LiveExportTest, WritesTheVariablesAndEveryStoredRow) {
  auto client = Client(0);
  ASSERT_TRUE(client
                  ->CreateVariables({TestVariable("w", {5, 2}, 3, 1.0f),  // 3 shards, 2 servers
                                     TestVariable("b", {2}, 1, 0.0f)})
                  .ok());
  ASSERT_TRUE(client->Push({{"w", Filled({5, 2}, 0.5f)}}).ok());  // SGD at 1: w = 0.5
  EmbeddingTableSpec table;
  table.set_name("t");
  table.set_width(2);
  table.mutable_optimizer()->set_kind(OptimizerSpec::SGD);
  table.mutable_optimizer()->set_learning_rate(1.0f);
  ASSERT_TRUE(client->CreateTables({table}).ok());
  const std::vector<int64_t> ids = {3, 10, int64_t{1} << 40};
  ASSERT_TRUE(client->PushRows({{"t", ids}}, {std::vector<float>(6, 1.0f)}).ok());

  const std::string path = dir_ + "/model.safetensors";
  auto summary = ExportLive(*client, {path});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->format, "safetensors");
  EXPECT_EQ(summary->tensors, 4);  // b, w, t.ids, t.rows
  EXPECT_EQ(summary->bytes, 8 + 40 + 24 + 24);
  const std::string file = *ReadFile(*fs_, path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file.data(), 8);
  const std::string header = file.substr(8, header_bytes);
  EXPECT_THAT(header,
              HasSubstr("\"w\":{\"dtype\":\"F32\",\"shape\":[5,2],\"data_offsets\":[8,48]}"));
  EXPECT_THAT(header, HasSubstr("\"t.ids\":{\"dtype\":\"I64\",\"shape\":[3]"));
  EXPECT_THAT(header, HasSubstr("\"t.rows\":{\"dtype\":\"F32\",\"shape\":[3,2]"));
  const std::string data = file.substr(8 + header_bytes);
  EXPECT_EQ(As<float>(data.substr(8, 40)), std::vector<float>(10, 0.5f));
  std::vector<int64_t> exported = As<int64_t>(data.substr(48, 24));
  std::sort(exported.begin(), exported.end());
  EXPECT_EQ(exported, ids);
  EXPECT_EQ(As<float>(data.substr(72, 24)), std::vector<float>(6, -1.0f));

  ASSERT_TRUE(ExportLive(*client, {dir_ + "/model.npz"}).ok());
  EXPECT_EQ(ReadFile(*fs_, dir_ + "/model.npz")->substr(0, 4), std::string("PK\3\4"));
  // The tables' spools are gone with the export.
  EXPECT_THAT(*fs_->ListDir(dir_),
              ::testing::UnorderedElementsAre("model.npz", "model.safetensors"));
}

TEST_F(LiveExportTest, WhatCannotBeExportedIsRefusedLeavingNothing) {
  auto chief = Client(0);
  ASSERT_TRUE(chief->CreateVariables({TestVariable("w", {4}, 2, 1.0f)}).ok());
  auto other = Client(1);  // created nothing: cannot pull w
  auto refused = ExportLive(*other, {dir_ + "/m.safetensors"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(refused.status().message(), HasSubstr("'w' was not created through this client"));
  EXPECT_EQ(ExportLive(*chief, {dir_ + "/m", "onnx"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(*fs_->ListDir(dir_), ElementsAre());
}

}  // namespace
}  // namespace fulcrum
