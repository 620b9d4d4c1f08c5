#include "fuzz/checkpoint_seed.h"

#include <numeric>
#include <vector>

#include "common/checkpoint/file.h"
#include "proto/checkpoint.pb.h"

namespace fulcrum::fuzz {
namespace {

ShardCheckpoint Shard(int index, int64_t rows) {
  ShardCheckpoint shard;
  ShardSpec* spec = shard.mutable_spec();
  VariableSpec* variable = spec->mutable_variable();
  variable->set_name("dense/kernel");
  variable->add_shape(5);
  variable->add_shape(3);
  variable->set_dtype(DT_FLOAT);
  variable->mutable_optimizer()->set_kind(OptimizerSpec::ADAM);
  variable->mutable_optimizer()->set_learning_rate(0.01f);
  spec->set_shard(index);
  spec->set_num_shards(2);
  spec->set_row_offset(index == 0 ? 0 : 3);
  spec->set_rows(rows);
  shard.set_version(11);
  shard.set_num_slots(2);
  return shard;
}

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

absl::Status WriteSeedCheckpoint(FileSystem& fs, const std::string& path) {
  PsCheckpointHeader header;
  header.set_ps_index(0);
  header.set_num_ps(1);
  header.set_step(7);
  header.set_created_unix_ms(1'700'000'000'000);
  auto writer = CheckpointFileWriter::Open(fs, path, header, /*max_record_bytes=*/24);
  if (!writer.ok()) return writer.status();
  for (int index = 0; index < 2; ++index) {
    const int64_t rows = index == 0 ? 3 : 2;
    const std::vector<float> values = Iota(rows * 3, 1);
    const std::vector<float> m = Iota(rows * 3, 100);
    const std::vector<float> v = Iota(rows * 3, 200);
    if (absl::Status s = (*writer)->AddShard(Shard(index, rows), values, {m, v}); !s.ok()) return s;
  }
  TableCheckpoint table;
  table.mutable_spec()->set_name("embedding");
  table.mutable_spec()->set_width(2);
  table.mutable_spec()->mutable_optimizer()->set_kind(OptimizerSpec::ADAGRAD);
  table.mutable_spec()->mutable_optimizer()->set_learning_rate(0.1f);
  table.set_version(9);
  table.set_rows(3);
  table.set_candidates(2);
  const std::vector<float> rows = Iota(12, 500);  // 3 rows of 2 values and 2 accumulators
  absl::Status s = (*writer)->AddTable(table);
  if (s.ok()) s = (*writer)->AddTableRows({11, 22}, absl::MakeSpan(rows).first(8));
  if (s.ok()) s = (*writer)->AddTableRows({33}, absl::MakeSpan(rows).subspan(8));
  if (s.ok()) s = (*writer)->AddTableCandidates({44, 55}, {1, 2});
  if (!s.ok()) return s;
  return (*writer)->Commit().status();
}

absl::Status WriteSeedManifest(FileSystem& fs, const std::string& file_path,
                               const std::string& path) {
  auto data = ReadFile(fs, file_path);
  if (!data.ok()) return data.status();
  CheckpointManifest manifest;
  manifest.set_step(7);
  manifest.set_num_ps(1);
  manifest.set_created_unix_ms(1'700'000'000'000);
  ManifestFile* entry = manifest.add_files();
  entry->set_name(kSeedFileName);
  entry->set_bytes(static_cast<int64_t>(data->size()));
  entry->set_crc32(Crc32(*data));
  auto framed = FrameMessage(manifest);
  if (!framed.ok()) return framed.status();
  return WriteFile(fs, path, *framed);
}

}  // namespace fulcrum::fuzz
