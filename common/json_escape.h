// A string as the body of a JSON string: quotes, backslashes and control
// characters escaped (JSON log lines, trace files).
#ifndef FULCRUM_COMMON_JSON_ESCAPE_H_
#define FULCRUM_COMMON_JSON_ESCAPE_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace fulcrum {

inline std::string JsonEscape(absl::string_view text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (char c : text) {
    if (c == '"' || c == '\\') {
      escaped.push_back('\\');
      escaped.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppendFormat(&escaped, "\\u%04x", c);
    } else {
      escaped.push_back(c);
    }
  }
  return escaped;
}

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_JSON_ESCAPE_H_
