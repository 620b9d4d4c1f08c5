// The pieces the daemons' status pages are made of: plain HTML rendered on
// the server, with inline SVG and no script, that refreshes itself.
#ifndef FULCRUM_COMMON_STATUS_HTML_H_
#define FULCRUM_COMMON_STATUS_HTML_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace fulcrum {

// `text` safe inside an element or a quoted attribute.
std::string HtmlEscape(absl::string_view text);

// A whole page titled `title` (escaped here) around `body` (HTML), which
// the browser loads again every `refresh_secs` (0: never).
std::string HtmlPage(absl::string_view title, int refresh_secs, absl::string_view body);

// A table's cell: its text, and whether it stands out (a worker lost).
struct HtmlCell {
  HtmlCell(std::string text, bool alert = false) : text(std::move(text)), alert(alert) {}
  HtmlCell(const char* text) : text(text) {}
  std::string text;
  bool alert = false;
};

// A table with `header` and `rows` of cells, each escaped here; `id`
// names it (for tests and links). "" for no rows: `empty` (escaped) in a
// paragraph instead.
std::string HtmlTable(absl::string_view id, const std::vector<std::string>& header,
                      const std::vector<std::vector<HtmlCell>>& rows, absl::string_view empty);

// A line of a chart: its name (escaped here), its colour ("#36c") and
// its points (x, y), x increasing.
struct ChartLine {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
};

// A line chart, inline SVG, of `lines` over one pair of axes, each axis
// spanning the points' range (labelled at its ends); `x_label` names x.
// A paragraph saying so when no line has a point.
std::string HtmlLineChart(absl::string_view id, const std::vector<ChartLine>& lines,
                          absl::string_view x_label);

// A horizontal bar, inline SVG: `used` of `limit` filled (red from 90%),
// labelled `label` (escaped here).
std::string HtmlBar(double used, double limit, absl::string_view label);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_STATUS_HTML_H_
