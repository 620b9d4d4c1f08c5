#include "worker/data/dataset.h"

#include <zlib.h>

#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "worker/data/ctr_data.h"

namespace fulcrum {
namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803;
constexpr uint32_t kIdxLabelsMagic = 0x00000801;

bool FileExists(FileSystem& fs, const std::string& path) {
  return fs.NewRandomAccessFile(path).ok();
}

// `data` inflated: every gzip member of it, one after the other.
absl::StatusOr<std::string> Gunzip(const std::string& path, const std::string& data) {
  std::string out;
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError("zlib: cannot start inflating");
  }
  std::unique_ptr<z_stream, int (*)(z_stream*)> ender(&stream, inflateEnd);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  char buffer[1 << 16];
  for (;;) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof(buffer);
    const int code = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - stream.avail_out);
    if (code == Z_STREAM_END) {
      if (stream.avail_in == 0) return out;
      inflateReset(&stream);  // another member follows
      continue;
    }
    if (code != Z_OK || (stream.avail_in == 0 && stream.avail_out != 0)) {
      return absl::DataLossError(absl::StrCat(
          "'", path,
          "' is corrupt or truncated: ", stream.msg != nullptr ? stream.msg : "it ends early"));
    }
  }
}

// Reads a whole file, gunzipping it if it is gzip.
absl::StatusOr<std::string> ReadMaybeGzip(FileSystem& fs, const std::string& path) {
  auto data = ReadFile(fs, path);
  if (!data.ok()) {
    return absl::Status(data.status().code(),
                        absl::StrCat("cannot open '", path, "': ", data.status().message()));
  }
  const bool gzip = data->size() >= 2 && static_cast<unsigned char>((*data)[0]) == 0x1f &&
                    static_cast<unsigned char>((*data)[1]) == 0x8b;
  return gzip ? Gunzip(path, *data) : data;
}

uint32_t BigEndian32(const std::string& data, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data()) + offset;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Checks the IDX header (magic and dims) and that the payload is complete.
absl::Status CheckIdx(const std::string& path, const std::string& data, uint32_t magic, int dims,
                      std::vector<uint32_t>* sizes) {
  const size_t header = 4 + 4 * dims;
  if (data.size() < header) {
    return absl::DataLossError(absl::StrCat("'", path, "' is truncated: ", data.size(),
                                            " bytes, shorter than its IDX header"));
  }
  if (BigEndian32(data, 0) != magic) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not the IDX file expected: magic 0x",
                     absl::Hex(BigEndian32(data, 0), absl::kZeroPad8), ", expected 0x",
                     absl::Hex(magic, absl::kZeroPad8)));
  }
  uint64_t payload = 1;
  sizes->clear();
  for (int d = 0; d < dims; ++d) {
    sizes->push_back(BigEndian32(data, 4 + 4 * d));
    payload *= sizes->back();
  }
  if (data.size() != header + payload) {
    return absl::DataLossError(
        absl::StrCat("'", path, "' is truncated or has trailing bytes: ", data.size() - header,
                     " bytes of data, expected ", payload));
  }
  return absl::OkStatus();
}

std::string FirstExisting(FileSystem& fs, const std::string& dir, const std::string& name) {
  const std::string gz = absl::StrCat(dir, "/", name, ".gz");
  return FileExists(fs, gz) ? gz : absl::StrCat(dir, "/", name);
}

absl::StatusOr<Dataset> LoadIdxSplit(FileSystem& fs, const DataSource& source,
                                     const std::string& prefix) {
  const std::string images = FirstExisting(fs, source.data_dir, prefix + "-images-idx3-ubyte");
  const std::string labels = FirstExisting(fs, source.data_dir, prefix + "-labels-idx1-ubyte");
  if (!FileExists(fs, images) || !FileExists(fs, labels)) {
    std::string hint = source.kind == "fashion_mnist"
                           ? " (install it with: apt-get install dataset-fashion-mnist)"
                           : "";
    return absl::NotFoundError(absl::StrCat("no ", prefix, " set in '", source.data_dir, "': need ",
                                            images, " and ", labels, hint));
  }
  return ReadIdx(fs, images, labels, source.num_classes);
}

}  // namespace

absl::StatusOr<Dataset> ReadIdx(FileSystem& fs, const std::string& images_path,
                                const std::string& labels_path, int num_classes) {
  auto images = ReadMaybeGzip(fs, images_path);
  if (!images.ok()) return images.status();
  auto labels = ReadMaybeGzip(fs, labels_path);
  if (!labels.ok()) return labels.status();
  std::vector<uint32_t> image_dims, label_dims;
  if (auto s = CheckIdx(images_path, *images, kIdxImagesMagic, 3, &image_dims); !s.ok()) return s;
  if (auto s = CheckIdx(labels_path, *labels, kIdxLabelsMagic, 1, &label_dims); !s.ok()) return s;
  if (image_dims[0] != label_dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat("'", images_path, "' has ", image_dims[0],
                                                   " images but '", labels_path, "' has ",
                                                   label_dims[0], " labels"));
  }
  Dataset data;
  data.num_examples = image_dims[0];
  data.feature_dim = int64_t{image_dims[1]} * image_dims[2];
  data.num_classes = num_classes;
  data.features.resize(data.num_examples * data.feature_dim);
  const auto* pixels = reinterpret_cast<const unsigned char*>(images->data()) + 16;
  for (size_t i = 0; i < data.features.size(); ++i) data.features[i] = pixels[i] / 255.0f;
  data.labels.resize(data.num_examples);
  const auto* raw_labels = reinterpret_cast<const unsigned char*>(labels->data()) + 8;
  for (int64_t i = 0; i < data.num_examples; ++i) {
    if (raw_labels[i] >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat("'", labels_path, "': label ", raw_labels[i],
                                                     " of example ", i, " is out of range [0, ",
                                                     num_classes, ")"));
    }
    data.labels[i] = raw_labels[i];
  }
  return data;
}

absl::StatusOr<Dataset> ReadLibsvm(FileSystem& fs, const std::string& path, int num_classes,
                                   int64_t feature_dim) {
  auto file = LineReader::Open(fs, path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("cannot open '", path, "': ", file.status().message()));
  }
  std::vector<std::vector<std::pair<int64_t, float>>> rows;
  Dataset data;
  data.num_classes = num_classes;
  int64_t max_index = 0;
  std::string line;
  for (int64_t line_no = 1;; ++line_no) {
    absl::StatusOr<bool> more = (*file)->Next(&line);
    if (!more.ok()) return more.status();
    if (!*more) break;
    absl::string_view text = line;
    if (size_t hash = text.find('#'); hash != absl::string_view::npos) text = text.substr(0, hash);
    std::vector<absl::string_view> fields = absl::StrSplit(text, ' ', absl::SkipWhitespace());
    if (fields.empty()) continue;
    const std::string where = absl::StrCat("'", path, "' line ", line_no);
    int label = 0;
    if (!absl::SimpleAtoi(fields[0], &label) || label < 0 || label >= num_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": label '", fields[0], "' is not an integer in [0, ", num_classes, ")"));
    }
    auto& row = rows.emplace_back();
    for (size_t f = 1; f < fields.size(); ++f) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(fields[f], ':');
      int64_t index = 0;
      float value = 0;
      if (!absl::SimpleAtoi(kv.first, &index) || index < 1 ||
          !absl::SimpleAtof(kv.second, &value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": '", fields[f], "' is not index:value with index >= 1"));
      }
      if (feature_dim > 0 && index > feature_dim) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": index ", index, " exceeds the ",
                                                       feature_dim, " features of the model"));
      }
      max_index = std::max(max_index, index);
      row.emplace_back(index - 1, value);
    }
    data.labels.push_back(label);
  }
  if (rows.empty()) return absl::InvalidArgumentError(absl::StrCat("'", path, "' has no examples"));
  data.num_examples = static_cast<int64_t>(rows.size());
  data.feature_dim = feature_dim > 0 ? feature_dim : max_index;
  data.features.assign(data.num_examples * data.feature_dim, 0.0f);
  for (int64_t i = 0; i < data.num_examples; ++i) {
    for (const auto& [index, value] : rows[i]) data.features[i * data.feature_dim + index] = value;
  }
  return data;
}

namespace {

SyntheticCtr Generator(const DataSource& source) {
  SyntheticCtrOptions options;
  options.vocabulary = source.ctr_vocabulary;
  options.seed = source.seed;
  return SyntheticCtr(options);
}

}  // namespace

absl::Status ValidateDataSource(const DataSource& source) {
  for (const char* kind : {"fashion_mnist", "idx", "libsvm", "criteo", "synthetic_ctr"}) {
    if (source.kind == kind) break;
    if (std::string(kind) == "synthetic_ctr") {
      return absl::InvalidArgumentError(
          absl::StrCat("--dataset: '", source.kind,
                       "' is not one of fashion_mnist, idx, libsvm, criteo, synthetic_ctr"));
    }
  }
  if (source.stream && source.kind != "criteo") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stream_data streams criteo files; --dataset=", source.kind, " is read into memory"));
  }
  if (source.shuffle_buffer < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shuffle_buffer: must be >= 1, got ", source.shuffle_buffer));
  }
  if (source.kind == "synthetic_ctr" &&
      (source.ctr_vocabulary < 1 || source.ctr_train_examples < 1 ||
       source.ctr_test_examples < 1)) {
    return absl::InvalidArgumentError(
        "--ctr_vocabulary, --ctr_train_examples and --ctr_test_examples must be >= 1");
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> LoadTrainingSet(FileSystem& fs, const DataSource& source) {
  if (absl::Status s = ValidateDataSource(source); !s.ok()) return s;
  if (source.kind == "libsvm") {
    return ReadLibsvm(fs, source.data_dir + "/train.libsvm", source.num_classes,
                      source.feature_dim);
  }
  if (source.kind == "fashion_mnist" || source.kind == "idx") {
    return LoadIdxSplit(fs, source, "train");
  }
  if (source.kind == "criteo") return ReadCriteoFile(fs, source.data_dir + "/train.txt");
  return CtrDataset(Generator(source).Generate(source.ctr_train_examples, 0));  // synthetic_ctr
}

absl::StatusOr<Dataset> LoadTestSet(FileSystem& fs, const DataSource& source, int64_t feature_dim) {
  absl::StatusOr<Dataset> data =
      source.kind == "libsvm"
          ? ReadLibsvm(fs, source.data_dir + "/test.libsvm", source.num_classes, feature_dim)
      : source.kind == "criteo" ? ReadCriteoFile(fs, source.data_dir + "/test.txt")
      : source.kind == "synthetic_ctr"
          ? absl::StatusOr<Dataset>(
                CtrDataset(Generator(source).Generate(source.ctr_test_examples, -1)))
          : LoadIdxSplit(fs, source, "t10k");
  if (data.ok() && data->feature_dim != feature_dim) {
    return absl::InvalidArgumentError(absl::StrCat("the test set has ", data->feature_dim,
                                                   " features, the training set ", feature_dim));
  }
  return data;
}

}  // namespace fulcrum
