// The pieces the daemons' status pages are made of: plain HTML rendered on
// the server, with inline SVG and no script, that refreshes itself.
#ifndef FULCRUM_COMMON_STATUS_HTML_H_
#define FULCRUM_COMMON_STATUS_HTML_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace fulcrum {

// `text` safe inside an element or a quoted attribute.
std::string HtmlEscape(absl::string_view text);

// A whole page titled `title` (escaped here) around `body` (HTML), which
// the browser loads again every `refresh_secs` (0: never).
std::string HtmlPage(absl::string_view title, int refresh_secs, absl::string_view body);

// A table with `header` and `rows` of cells, each escaped here; `id`
// names it (for tests and links). "" for no rows: `empty` (escaped) in a
// paragraph instead.
std::string HtmlTable(absl::string_view id, const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows, absl::string_view empty);

// A horizontal bar, inline SVG: `used` of `limit` filled (red from 90%),
// labelled `label` (escaped here).
std::string HtmlBar(double used, double limit, absl::string_view label);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_STATUS_HTML_H_
