#include "common/checkpoint/tensor_files.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/file.h"

namespace fulcrum {
namespace {

// `text` as a JSON string literal.
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      absl::StrAppend(&out, "\\u00", u < 0x10 ? "0" : "", absl::Hex(u));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// `value`'s low `bytes` (at most 8) bytes, least significant first.
void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// The .npy header of `tensor`, padded so its data starts 64-byte aligned.
std::string NpyHeader(const ExportedTensor& tensor) {
  std::string shape = absl::StrJoin(tensor.shape, ", ");
  if (tensor.shape.size() == 1) shape += ",";
  std::string dict = absl::StrCat("{'descr': '", tensor.int64 ? "<i8" : "<f4",
                                  "', 'fortran_order': False, 'shape': (", shape, "), }");
  const size_t unpadded = 10 + dict.size() + 1;  // magic, version, length; the newline
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  AppendLittleEndian(dict.size(), 2, &header);
  return header + dict;
}

// Tensor `i` of `source`, its bytes to `sink`: INTERNAL when they are not
// its shape's.
absl::Status ReadExactly(const TensorSource& source, size_t i, BytesSink sink) {
  int64_t bytes = 0;
  absl::Status s = source.Read(i, [&](absl::string_view piece) {
    bytes += static_cast<int64_t>(piece.size());
    return bytes > source.tensors()[i].bytes() ? absl::OkStatus() : sink(piece);
  });
  if (!s.ok()) return s;
  if (bytes != source.tensors()[i].bytes()) {
    return absl::InternalError(absl::StrCat("'", source.tensors()[i].name, "' came as ", bytes,
                                            " bytes where its shape holds ",
                                            source.tensors()[i].bytes()));
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const TensorSource& checkpoint, FileSystem& fs,
                              const std::string& path) {
  std::string header = absl::StrCat("{\"__metadata__\":{\"format\":\"pt\",\"exported_from\":",
                                    JsonString(checkpoint.description()), "}");
  int64_t offset = 0;
  for (const ExportedTensor& tensor : checkpoint.tensors()) {
    absl::StrAppend(&header, ",", JsonString(tensor.name), ":{\"dtype\":\"",
                    tensor.int64 ? "I64" : "F32", "\",\"shape\":[",
                    absl::StrJoin(tensor.shape, ","), "],\"data_offsets\":[", offset, ",",
                    offset + tensor.bytes(), "]}");
    offset += tensor.bytes();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data 8-byte aligned
  std::string length;
  AppendLittleEndian(header.size(), 8, &length);
  auto file = AtomicFileWriter::Open(fs, path);
  if (!file.ok()) return file.status();
  if (absl::Status s = (*file)->Append(length + header); !s.ok()) return s;
  for (size_t i = 0; i < checkpoint.tensors().size(); ++i) {
    if (absl::Status s = ReadExactly(
            checkpoint, i, [&](absl::string_view bytes) { return (*file)->Append(bytes); });
        !s.ok()) {
      return s;
    }
  }
  return (*file)->Commit();
}

absl::Status WriteNpz(const TensorSource& checkpoint, FileSystem& fs, const std::string& path) {
  constexpr uint64_t kZip32 = 0xffffffffu;
  constexpr uint16_t kFlags = 0x0808;  // sizes and CRC after the data; UTF-8 names
  constexpr uint16_t kDate = 0x21;     // 1980-01-01
  if (checkpoint.tensors().size() > 0xffff) {
    return absl::ResourceExhaustedError("npz holds at most 65535 tensors: use safetensors");
  }
  auto file = AtomicFileWriter::Open(fs, path);
  if (!file.ok()) return file.status();
  std::string central;
  uint64_t offset = 0;
  for (size_t i = 0; i < checkpoint.tensors().size(); ++i) {
    const ExportedTensor& tensor = checkpoint.tensors()[i];
    const std::string name = tensor.name + ".npy";
    const std::string npy = NpyHeader(tensor);
    const uint64_t size = npy.size() + tensor.bytes();
    if (size > kZip32 || offset > kZip32) {
      return absl::ResourceExhaustedError(
          absl::StrCat("npz: '", tensor.name,
                       "' lies past 4 GiB, which npz without zip64 cannot hold: "
                       "export as safetensors"));
    }
    std::string local;
    AppendLittleEndian(0x04034b50, 4, &local);
    for (uint64_t field : {20, int{kFlags}, 0, 0, int{kDate}}) AppendLittleEndian(field, 2, &local);
    local.append(12, '\0');  // CRC and sizes: in the descriptor
    AppendLittleEndian(name.size(), 2, &local);
    AppendLittleEndian(0, 2, &local);
    local += name;
    uint32_t crc = Crc32(npy);
    if (absl::Status s = (*file)->Append(local + npy); !s.ok()) return s;
    if (absl::Status s = ReadExactly(checkpoint, i,
                                     [&](absl::string_view bytes) {
                                       crc = Crc32(bytes, crc);
                                       return (*file)->Append(bytes);
                                     });
        !s.ok()) {
      return s;
    }
    std::string descriptor;
    AppendLittleEndian(0x08074b50, 4, &descriptor);
    for (uint64_t field : {uint64_t{crc}, size, size}) AppendLittleEndian(field, 4, &descriptor);
    if (absl::Status s = (*file)->Append(descriptor); !s.ok()) return s;
    AppendLittleEndian(0x02014b50, 4, &central);
    for (uint64_t field : {20, 20, int{kFlags}, 0, 0, int{kDate}}) {
      AppendLittleEndian(field, 2, &central);
    }
    for (uint64_t field : {uint64_t{crc}, size, size}) AppendLittleEndian(field, 4, &central);
    for (uint64_t field : {name.size(), size_t{0}, size_t{0}, size_t{0}, size_t{0}}) {
      AppendLittleEndian(field, 2, &central);  // name, extra, comment, disk, internal
    }
    AppendLittleEndian(0, 4, &central);  // external attributes
    AppendLittleEndian(offset, 4, &central);
    central += name;
    offset += local.size() + size + descriptor.size();
  }
  if (offset > kZip32) {
    return absl::ResourceExhaustedError("npz: over 4 GiB without zip64: export as safetensors");
  }
  std::string end;
  AppendLittleEndian(0x06054b50, 4, &end);
  AppendLittleEndian(0, 4, &end);  // this disk, the directory's disk
  for (int twice = 0; twice < 2; ++twice) AppendLittleEndian(checkpoint.tensors().size(), 2, &end);
  AppendLittleEndian(central.size(), 4, &end);
  AppendLittleEndian(offset, 4, &end);
  AppendLittleEndian(0, 2, &end);  // no comment
  if (absl::Status s = (*file)->Append(central + end); !s.ok()) return s;
  return (*file)->Commit();
}

}  // namespace

absl::StatusOr<TensorFileFormat> ChooseTensorFileFormat(const std::string& name,
                                                        const std::string& path) {
  if (name == "safetensors") return TensorFileFormat::kSafetensors;
  if (name == "npz") return TensorFileFormat::kNpz;
  if (name.empty()) {
    return absl::EndsWith(path, ".npz") ? TensorFileFormat::kNpz : TensorFileFormat::kSafetensors;
  }
  return absl::InvalidArgumentError(absl::StrCat("format '", name, "': one of safetensors or npz"));
}

const char* TensorFileFormatName(TensorFileFormat format) {
  return format == TensorFileFormat::kNpz ? "npz" : "safetensors";
}

absl::Status WriteTensorFile(const TensorSource& source, TensorFileFormat format, FileSystem& fs,
                             const std::string& path) {
  return format == TensorFileFormat::kNpz ? WriteNpz(source, fs, path)
                                          : WriteSafetensors(source, fs, path);
}

}  // namespace fulcrum
