// Specs from Python: the wire contract's messages as JSON, through
// protobuf's own parser, so a misspelt field or kind is an InvalidArgument
// naming it.
#ifndef FULCRUM_PYTHON_FULCRUM_NATIVE_JSON_H_
#define FULCRUM_PYTHON_FULCRUM_NATIVE_JSON_H_

#include <google/protobuf/util/json_util.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "python/fulcrum/native/errors.h"

namespace fulcrum::native {

// `json` as a `Message`; raises InvalidArgument "<what> <json>: <why>".
template <typename Message>
Message ParseSpec(const std::string& json, const char* what) {
  Message message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(json, &message, options);
  if (!status.ok()) {
    Throw(absl::InvalidArgumentError(
        absl::StrCat(what, " ", json, ": ", std::string(status.message()))));
  }
  return message;
}

}  // namespace fulcrum::native

#endif  // FULCRUM_PYTHON_FULCRUM_NATIVE_JSON_H_
