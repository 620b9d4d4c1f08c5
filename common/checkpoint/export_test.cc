// Exporting checkpoints: the tensors of two servers' files by name, tables
// as ids and rows, and safetensors and npz files laid out as their formats
// say.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/exported.h"
#include "common/checkpoint/tensor_files.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

class ExportTest : public ::testing::Test {
 protected:
  ExportTest()
      : fs_(MakeLocalFileSystem()),
        root_(absl::StrCat(std::getenv("TEST_TMPDIR"), "/",
                           ::testing::UnitTest::GetInstance()->current_test_info()->name())) {
    EXPECT_TRUE(fs_->RemoveAll(root_).ok());
    EXPECT_TRUE(fs_->MakeDirs(root_).ok());
  }

  // Server `ps` of 2's final file: rows [3 ps, 3 ps + 3) of w [6, 2]
  // (element i is i + 0.5, its slot -i), and the rows of ids 10 ps + 1, 10 ps + 2
  // of table t (width 2, SGD).
  void WriteFinal(int ps) {
    auto written =
        WriteServerFile(*fs_, absl::StrCat(root_, "/", FinalFileName(ps, 2)), ps, 2, -1,
                        [&](CheckpointFileWriter& writer) {
                          ShardCheckpoint shard;
                          VariableSpec& w = *shard.mutable_spec()->mutable_variable();
                          w.set_name("w");
                          w.add_shape(6);
                          w.add_shape(2);
                          w.set_dtype(DT_FLOAT);
                          w.mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
                          w.mutable_optimizer()->set_learning_rate(1);
                          shard.mutable_spec()->set_shard(ps);
                          shard.mutable_spec()->set_num_shards(2);
                          shard.mutable_spec()->set_row_offset(int64_t{3} * ps);
                          shard.mutable_spec()->set_rows(3);
                          shard.set_num_slots(1);
                          std::vector<float> values, slot;
                          for (int i = 6 * ps; i < 6 * ps + 6; ++i) {
                            values.push_back(i + 0.5f);
                            slot.push_back(-static_cast<float>(i));
                          }
                          if (absl::Status s = writer.AddShard(shard, values, {slot}); !s.ok())
                            return s;
                          TableCheckpoint table;
                          table.mutable_spec()->set_name("t");
                          table.mutable_spec()->set_width(2);
                          table.mutable_spec()->mutable_optimizer()->set_kind(OptimizerSpec::SGD);
                          table.mutable_spec()->mutable_optimizer()->set_learning_rate(1);
                          table.set_rows(2);
                          if (absl::Status s = writer.AddTable(table); !s.ok()) return s;
                          const std::vector<int64_t> ids = {10 * ps + 1, 10 * ps + 2};
                          const std::vector<float> rows = {1.0f * ps, 1, 2.0f * ps, 2};
                          return writer.AddTableRows(ids, rows);
                        });
    ASSERT_TRUE(written.ok()) << written.status();
  }

  // Tensor `name`'s bytes.
  std::string Bytes(const ExportedCheckpoint& checkpoint, const std::string& name) {
    for (size_t i = 0; i < checkpoint.tensors().size(); ++i) {
      if (checkpoint.tensors()[i].name != name) continue;
      std::string bytes;
      EXPECT_TRUE(checkpoint
                      .Read(i,
                            [&](absl::string_view piece) {
                              bytes.append(piece.data(), piece.size());
                              return absl::OkStatus();
                            })
                      .ok());
      return bytes;
    }
    ADD_FAILURE() << "no tensor " << name;
    return "";
  }

  std::unique_ptr<FileSystem> fs_;
  const std::string root_;
};

template <typename T>
std::vector<T> As(const std::string& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST_F(ExportTest, TheServersFinalFilesExportByNameTablesAsIdsAndRows) {
  WriteFinal(0);
  WriteFinal(1);
  auto checkpoint = ExportedCheckpoint::Open(*fs_, root_, {-1, /*slots=*/true});
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->description(), "the servers' final checkpoint files (2 files)");
  std::vector<std::string> names;
  for (const ExportedTensor& t : checkpoint->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"w", "w.slot0", "t.ids", "t.rows"}));
  EXPECT_EQ(checkpoint->tensors()[0].shape, (Shape{6, 2}));
  EXPECT_EQ(checkpoint->tensors()[3].shape, (Shape{4, 2}));
  std::vector<float> w;
  for (int i = 0; i < 12; ++i) w.push_back(i + 0.5f);
  EXPECT_EQ(As<float>(Bytes(*checkpoint, "w")), w);
  EXPECT_EQ(As<float>(Bytes(*checkpoint, "w.slot0"))[11], -11.0f);
  EXPECT_EQ(As<int64_t>(Bytes(*checkpoint, "t.ids")), (std::vector<int64_t>{1, 2, 11, 12}));
  EXPECT_EQ(As<float>(Bytes(*checkpoint, "t.rows")), (std::vector<float>{0, 1, 0, 2, 1, 1, 2, 2}));

  // Without slots; and nothing to export where one server's file is missing.
  auto values = ExportedCheckpoint::Open(*fs_, root_, {});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(values->tensors().size(), 3u);
  ASSERT_TRUE(fs_->RemoveAll(absl::StrCat(root_, "/", FinalFileName(1, 2))).ok());
  auto half = ExportedCheckpoint::Open(*fs_, root_, {});
  EXPECT_EQ(half.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(half.status().message(), HasSubstr("no whole set of final checkpoint files"));
  EXPECT_EQ(ExportedCheckpoint::Open(*fs_, root_, {7, false}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ExportTest, SafetensorsAndNpzFilesAreLaidOutAsTheirFormatsSay) {
  WriteFinal(0);
  WriteFinal(1);
  auto checkpoint = ExportedCheckpoint::Open(*fs_, root_, {});
  ASSERT_TRUE(checkpoint.ok());
  const std::string safetensors = root_ + "/model.safetensors";
  ASSERT_TRUE(WriteTensorFile(*checkpoint, TensorFileFormat::kSafetensors, *fs_, safetensors).ok());
  const std::string file = *ReadFile(*fs_, safetensors);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file.data(), 8);
  ASSERT_EQ(header_bytes % 8, 0u);
  const std::string header = file.substr(8, header_bytes);
  EXPECT_THAT(header,
              HasSubstr("\"w\":{\"dtype\":\"F32\",\"shape\":[6,2],\"data_offsets\":[0,48]}"));
  EXPECT_THAT(header,
              HasSubstr("\"t.ids\":{\"dtype\":\"I64\",\"shape\":[4],\"data_offsets\":[48,80]}"));
  EXPECT_EQ(file.size(), 8 + header_bytes + 48 + 32 + 32);
  EXPECT_EQ(As<int64_t>(file.substr(8 + header_bytes + 48, 32)),
            (std::vector<int64_t>{1, 2, 11, 12}));

  const std::string npz = root_ + "/model.npz";
  ASSERT_TRUE(WriteTensorFile(*checkpoint, TensorFileFormat::kNpz, *fs_, npz).ok());
  const std::string zip = *ReadFile(*fs_, npz);
  EXPECT_EQ(zip.substr(0, 4), std::string("PK\3\4"));
  EXPECT_THAT(zip, HasSubstr("w.npy\x93NUMPY"));
  EXPECT_THAT(zip, HasSubstr("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }"));
  EXPECT_EQ(zip.substr(zip.size() - 22, 4), std::string("PK\5\6"));  // the end record
}

// A source that gives a tensor fewer or more bytes than its shape holds
// makes no file; formats are named or taken from the extension.
TEST_F(ExportTest, ASourceOfTheWrongLengthMakesNoFile) {
  class Short final : public TensorSource {
   public:
    explicit Short(int64_t bytes) : bytes_(bytes) {}
    const std::string& description() const override { return description_; }
    const std::vector<ExportedTensor>& tensors() const override { return tensors_; }
    absl::Status Read(size_t, BytesSink sink) const override {
      return sink(std::string(static_cast<size_t>(bytes_), '\0'));
    }

   private:
    const int64_t bytes_;
    const std::string description_ = "a test";
    const std::vector<ExportedTensor> tensors_ = {{"w", false, {3}}};
  };
  for (const int64_t bytes : {8, 16}) {
    for (const TensorFileFormat format : {TensorFileFormat::kSafetensors, TensorFileFormat::kNpz}) {
      const std::string path = absl::StrCat(root_, "/short-", bytes);
      const absl::Status s = WriteTensorFile(Short(bytes), format, *fs_, path);
      EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
      EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("'w' came as ", bytes, " bytes")));
    }
  }
  EXPECT_TRUE(WriteTensorFile(Short(12), TensorFileFormat::kNpz, *fs_, root_ + "/ok.npz").ok());
  EXPECT_THAT(*fs_->ListDir(root_), ::testing::ElementsAre("ok.npz"));  // nothing half-made

  EXPECT_EQ(*ChooseTensorFileFormat("", "m.npz"), TensorFileFormat::kNpz);
  EXPECT_EQ(*ChooseTensorFileFormat("", "m.bin"), TensorFileFormat::kSafetensors);
  EXPECT_EQ(*ChooseTensorFileFormat("npz", "m.safetensors"), TensorFileFormat::kNpz);
  EXPECT_THAT(ChooseTensorFileFormat("onnx", "m").status().message(),
              HasSubstr("'onnx': one of safetensors or npz"));
}

}  // namespace
}  // namespace fulcrum
