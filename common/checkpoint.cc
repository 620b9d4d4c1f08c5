#include "common/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace fulcrum {
namespace {

constexpr char kMagic[8] = {'F', 'U', 'L', 'C', 'K', 'P', 'T', '\n'};
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 4;
constexpr char kDirPrefix[] = "ckpt-";

template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86-64, arm64)
  out->append(bytes, sizeof(T));
}

template <typename T>
T Get(absl::string_view data, size_t offset) {
  T value;
  std::memcpy(&value, data.data() + offset, sizeof(T));
  return value;
}

// The step of a "ckpt-<step>" directory name, or -1.
int64_t StepOf(const std::string& name) {
  int64_t step = -1;
  if (!absl::StartsWith(name, kDirPrefix) ||
      !absl::SimpleAtoi(absl::string_view(name).substr(strlen(kDirPrefix)), &step)) {
    return -1;
  }
  return step;
}

// Reads and checks one server's file against its manifest entry.
absl::StatusOr<PsCheckpoint> LoadPsFile(FileSystem& fs, const std::string& dir,
                                        const ManifestFile& entry) {
  const std::string path = absl::StrCat(dir, "/", entry.name());
  auto data = fs.ReadFile(path);
  if (!data.ok()) return data.status();
  if (static_cast<int64_t>(data->size()) != entry.bytes() || Crc32(*data) != entry.crc32()) {
    return absl::DataLossError(
        absl::StrCat("'", path, "' does not match its manifest: ", data->size(),
                     " bytes, expected ", entry.bytes(), " with another checksum"));
  }
  PsCheckpoint checkpoint;
  if (absl::Status s = UnframeMessage(*data, path, &checkpoint); !s.ok()) return s;
  return checkpoint;
}

}  // namespace

uint32_t Crc32(absl::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes at most 4 GiB at a time.
  for (size_t done = 0; done < data.size();) {
    const size_t n = std::min<size_t>(data.size() - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

std::string FrameMessage(const google::protobuf::Message& message) {
  const std::string payload = message.SerializeAsString();
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, kCheckpointFormatVersion);
  Put<uint64_t>(&out, payload.size());
  Put<uint32_t>(&out, Crc32(payload));
  out += payload;
  return out;
}

absl::Status UnframeMessage(absl::string_view data, const std::string& path,
                            google::protobuf::Message* out) {
  if (data.size() < kHeaderBytes || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a Fulcrum checkpoint file (",
                                            data.size() < kHeaderBytes ? "too short" : "bad magic",
                                            ")"));
  }
  const uint32_t version = Get<uint32_t>(data, 8);
  if (version != kCheckpointFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("'", path, "' has format version ", version,
                                                      "; this build reads version ",
                                                      kCheckpointFormatVersion));
  }
  const uint64_t length = Get<uint64_t>(data, 12);
  const absl::string_view payload = data.substr(kHeaderBytes);
  if (payload.size() != length) {
    return absl::DataLossError(absl::StrCat("'", path, "' is truncated: ", payload.size(),
                                            " bytes of data, expected ", length));
  }
  if (Crc32(payload) != Get<uint32_t>(data, 20)) {
    return absl::DataLossError(absl::StrCat("'", path, "' is corrupt: checksum mismatch"));
  }
  if (!out->ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(
        absl::StrCat("'", path, "' does not parse as a ", out->GetTypeName()));
  }
  return absl::OkStatus();
}

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("%s%012d", kDirPrefix, step); }

std::string PsFileName(int ps_index, int num_ps) {
  return absl::StrFormat("ps-%05d-of-%05d.ckpt", ps_index, num_ps);
}

std::string FinalFileName(int ps_index, int num_ps) {
  return absl::StrCat("final-", PsFileName(ps_index, num_ps));
}

std::vector<CheckpointInfo> ListCompleteCheckpoints(FileSystem& fs, const std::string& root,
                                                    std::vector<std::string>* problems) {
  std::vector<CheckpointInfo> out;
  auto names = fs.ListDir(root);
  if (!names.ok()) return out;
  for (const std::string& name : *names) {
    const int64_t step = StepOf(name);
    if (step < 0) continue;
    const std::string dir = absl::StrCat(root, "/", name);
    const std::string manifest_path = absl::StrCat(dir, "/", kManifestName);
    auto data = fs.ReadFile(manifest_path);
    if (!data.ok()) continue;  // incomplete: the chief never wrote its manifest
    CheckpointInfo info;
    if (absl::Status s = UnframeMessage(*data, manifest_path, &info.manifest); !s.ok()) {
      problems->push_back(std::string(s.message()));
      continue;
    }
    info.step = step;
    info.dir = dir;
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step > b.step; });
  return out;
}

absl::StatusOr<std::vector<PsCheckpoint>> LoadNewestCheckpoint(FileSystem& fs,
                                                               const std::string& root,
                                                               std::vector<std::string>* problems) {
  for (const CheckpointInfo& info : ListCompleteCheckpoints(fs, root, problems)) {
    std::vector<PsCheckpoint> files;
    absl::Status status;
    for (const ManifestFile& entry : info.manifest.files()) {
      auto file = LoadPsFile(fs, info.dir, entry);
      if (!file.ok()) {
        status = file.status();
        break;
      }
      files.push_back(*std::move(file));
    }
    if (status.ok()) return files;
    problems->push_back(absl::StrCat(status.message(), "; falling back to an older checkpoint"));
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint in '", root, "'"));
}

absl::Status WriteManifest(FileSystem& fs, const std::string& root, int64_t step, int num_ps,
                           const std::vector<ManifestFile>& files) {
  CheckpointManifest manifest;
  manifest.set_step(step);
  manifest.set_num_ps(num_ps);
  for (const ManifestFile& file : files) *manifest.add_files() = file;
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  return WriteFileAtomically(fs,
                             absl::StrCat(root, "/", CheckpointDirName(step), "/", kManifestName),
                             FrameMessage(manifest));
}

absl::Status PruneCheckpoints(FileSystem& fs, const std::string& root, int keep) {
  std::vector<std::string> problems;
  const std::vector<CheckpointInfo> complete = ListCompleteCheckpoints(fs, root, &problems);
  if (complete.empty()) return absl::OkStatus();
  const int64_t newest = complete.front().step;
  const int64_t oldest_kept = complete[std::min<size_t>(keep, complete.size()) - 1].step;
  auto names = fs.ListDir(root);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const int64_t step = StepOf(name);
    if (step < 0) continue;
    const bool is_complete = std::any_of(complete.begin(), complete.end(),
                                         [&](const CheckpointInfo& c) { return c.step == step; });
    if ((is_complete && step < oldest_kept) || (!is_complete && step < newest)) {
      if (absl::Status s = fs.RemoveAll(absl::StrCat(root, "/", name)); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace fulcrum
