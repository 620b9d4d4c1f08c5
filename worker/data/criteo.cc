#include "worker/data/criteo.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hash.h"

namespace fulcrum {
namespace {

// A categorical value's id in its field; missing values (`missing`) get
// their field's own.
int64_t FieldId(int field, uint64_t value, bool missing) {
  const uint64_t key = (static_cast<uint64_t>(field) << 56) ^ (missing ? ~uint64_t{0} : value);
  return static_cast<int64_t>(Mix64(key + kGoldenGamma) >> 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(FileSystem& fs,
                                                                 const std::string& path) {
  auto in = LineReader::Open(fs, path);
  if (!in.ok()) {
    return absl::Status(in.status().code(), absl::StrCat("cannot open the Criteo file ", path, ": ",
                                                         in.status().message()));
  }
  return std::unique_ptr<CriteoReader>(new CriteoReader(path, *std::move(in)));
}

absl::Status CriteoReader::ParseLine(const std::string& line, CtrExamples* out) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ":", line_, ": ", what));
  };
  std::vector<absl::string_view> cells = absl::StrSplit(line, '\t');
  if (cells.size() != 1 + kNumeric + kFields) {
    return bad(absl::StrCat(cells.size(), " tab-separated fields, not ", 1 + kNumeric + kFields,
                            " (a label, 13 integers, 26 categories)"));
  }
  if (cells[0] != "0" && cells[0] != "1") {
    return bad(absl::StrCat("label '", cells[0], "' is not 0 or 1"));
  }
  out->labels.push_back(cells[0] == "1" ? 1.0f : 0.0f);
  for (int d = 0; d < kNumeric; ++d) {
    const absl::string_view cell = cells[1 + d];
    int64_t x = 0;
    if (!cell.empty() && !absl::SimpleAtoi(cell, &x)) {
      return bad(absl::StrCat("integer feature ", d + 1, " '", cell, "' is not an integer"));
    }
    out->numeric.push_back(x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f);
  }
  for (int f = 0; f < kFields; ++f) {
    const absl::string_view cell = cells[1 + kNumeric + f];
    uint64_t value = 0;
    if (!cell.empty() && (cell.size() > 16 || !absl::SimpleHexAtoi(cell, &value))) {
      return bad(
          absl::StrCat("categorical feature ", f + 1, " '", cell, "' is not a hexadecimal value"));
    }
    out->ids.push_back(FieldId(f, value, cell.empty()));
  }
  ++out->num_examples;
  return absl::OkStatus();
}

absl::StatusOr<CtrExamples> CriteoReader::Next(int64_t max_examples) {
  CtrExamples out;
  out.num_fields = kFields;
  out.num_numeric = kNumeric;
  std::string line;
  while (out.num_examples < max_examples) {
    absl::StatusOr<bool> more = in_->Next(&line);
    if (!more.ok()) return more.status();
    if (!*more) break;
    ++line_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (absl::Status s = ParseLine(line, &out); !s.ok()) return s;
  }
  return out;
}

}  // namespace fulcrum
