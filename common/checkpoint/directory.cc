#include "common/checkpoint/directory.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace fulcrum {
namespace {

constexpr char kDirPrefix[] = "ckpt-";

// The step of a "ckpt-<step>" directory name, or -1.
int64_t StepOf(const std::string& name) {
  int64_t step = -1;
  if (!absl::StartsWith(name, kDirPrefix) ||
      !absl::SimpleAtoi(absl::string_view(name).substr(strlen(kDirPrefix)), &step)) {
    return -1;
  }
  return step;
}

// A manifest lists one file per server, each a file of its own directory:
// a name like "../x" would have a restore open a file outside it.
absl::Status CheckManifest(const CheckpointManifest& manifest, const std::string& path) {
  if (manifest.num_ps() < 1 || manifest.files_size() != manifest.num_ps()) {
    return absl::DataLossError(absl::StrCat("'", path, "' lists ", manifest.files_size(),
                                            " files for ", manifest.num_ps(), " servers"));
  }
  for (const ManifestFile& file : manifest.files()) {
    if (file.name().empty() || file.name() == "." || file.name() == ".." ||
        file.name().find('/') != std::string::npos) {
      return absl::DataLossError(
          absl::StrCat("'", path, "' names '", file.name(), "', not a file of its directory"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

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
    auto data = ReadFile(fs, manifest_path);
    if (!data.ok()) continue;  // incomplete: the chief never wrote its manifest
    CheckpointInfo info;
    absl::Status s = UnframeMessage(*data, manifest_path, &info.manifest);
    if (s.ok()) s = CheckManifest(info.manifest, manifest_path);
    if (!s.ok()) {
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

absl::StatusOr<CheckpointFiles> OpenCheckpointFiles(FileSystem& fs, const CheckpointInfo& info) {
  CheckpointFiles files;
  for (const ManifestFile& entry : info.manifest.files()) {
    auto file = CheckpointFile::Open(fs, absl::StrCat(info.dir, "/", entry.name()), &entry);
    if (!file.ok()) return file.status();
    files.push_back(*std::move(file));
  }
  return files;
}

absl::StatusOr<CheckpointFiles> LoadNewestCheckpoint(
    FileSystem& fs, const std::string& root,
    const std::function<absl::Status(const CheckpointFiles&)>& accept,
    std::vector<std::string>* problems) {
  for (const CheckpointInfo& info : ListCompleteCheckpoints(fs, root, problems)) {
    absl::StatusOr<CheckpointFiles> files = OpenCheckpointFiles(fs, info);
    absl::Status status = files.status();
    if (status.ok()) status = accept(*files);
    if (status.ok()) return *std::move(files);
    problems->push_back(absl::StrCat(status.message(), "; falling back to an older checkpoint"));
  }
  return absl::NotFoundError(absl::StrCat("no complete checkpoint in '", root, "'"));
}

absl::Status WriteManifest(FileSystem& fs, const std::string& root, int64_t step, int num_ps,
                           const std::vector<ManifestFile>& files, const ChiefState& chief_state) {
  CheckpointManifest manifest;
  manifest.set_step(step);
  manifest.set_num_ps(num_ps);
  for (const ManifestFile& file : files) *manifest.add_files() = file;
  manifest.mutable_chief_state()->insert(chief_state.begin(), chief_state.end());
  manifest.set_created_unix_ms(absl::ToUnixMillis(absl::Now()));
  auto framed = FrameMessage(manifest);
  if (!framed.ok()) return framed.status();
  return WriteFileAtomically(
      fs, absl::StrCat(root, "/", CheckpointDirName(step), "/", kManifestName), *framed);
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
