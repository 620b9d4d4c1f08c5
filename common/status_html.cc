#include "common/status_html.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fulcrum {

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string HtmlPage(absl::string_view title, int refresh_secs, absl::string_view body) {
  return absl::StrCat("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
                      refresh_secs > 0 ? absl::StrCat("<meta http-equiv=\"refresh\" content=\"",
                                                      refresh_secs, "\">")
                                       : "",
                      "<title>", HtmlEscape(title), "</title><style>",
                      "body{font-family:sans-serif;margin:1.5em;color:#222}"
                      "table{border-collapse:collapse;margin:.5em 0 1.5em}"
                      "th,td{border:1px solid #ccc;padding:.2em .6em;text-align:left;font-size:90%}"
                      "th{background:#f0f0f0}.alert{color:#b00;font-weight:bold}"
                      "h1{font-size:140%}h2{font-size:115%;margin-bottom:.2em}.muted{color:#777}",
                      "</style></head><body>\n", body, "\n</body></html>\n");
}

std::string HtmlTable(absl::string_view id, const std::vector<std::string>& header,
                      const std::vector<std::vector<HtmlCell>>& rows, absl::string_view empty) {
  if (rows.empty()) {
    return absl::StrCat("<p id=\"", HtmlEscape(id), "\" class=\"muted\">", HtmlEscape(empty),
                        "</p>\n");
  }
  std::string out = absl::StrCat("<table id=\"", HtmlEscape(id), "\"><tr>");
  for (const std::string& cell : header) absl::StrAppend(&out, "<th>", HtmlEscape(cell), "</th>");
  out += "</tr>\n";
  for (const std::vector<HtmlCell>& row : rows) {
    out += "<tr>";
    for (const HtmlCell& cell : row) {
      absl::StrAppend(&out, cell.alert ? "<td class=\"alert\">" : "<td>", HtmlEscape(cell.text),
                      "</td>");
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string HtmlLineChart(absl::string_view id, const std::vector<ChartLine>& lines,
                          absl::string_view x_label) {
  double x0 = 0, x1 = 0, y0 = 0, y1 = 0;
  bool any = false;
  for (const ChartLine& line : lines) {
    for (const auto& [x, y] : line.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = any ? std::min(x0, x) : x;
      x1 = any ? std::max(x1, x) : x;
      y0 = any ? std::min(y0, y) : y;
      y1 = any ? std::max(y1, y) : y;
      any = true;
    }
  }
  if (!any) {
    return absl::StrCat("<p id=\"", HtmlEscape(id), "\" class=\"muted\">nothing to draw yet</p>\n");
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  constexpr double kWidth = 560, kHeight = 180, kLeft = 50, kTop = 10;
  auto px = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * kWidth; };
  auto py = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * kHeight; };
  std::string out = absl::StrFormat(
      "<svg id=\"%s\" width=\"%d\" height=\"%d\" role=\"img\" font-size=\"11\">"
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#ccc\"/>"
      "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.4g</text>"
      "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.4g</text>"
      "<text x=\"%g\" y=\"%g\">%.4g</text>"
      "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.4g</text>"
      "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>",
      HtmlEscape(id), static_cast<int>(kLeft + kWidth + 130), static_cast<int>(kTop + kHeight + 30),
      kLeft, kTop, kWidth, kHeight, kLeft - 4, kTop + 10, y1, kLeft - 4, kTop + kHeight, y0, kLeft,
      kTop + kHeight + 14, x0, kLeft + kWidth, kTop + kHeight + 14, x1, kLeft + kWidth / 2,
      kTop + kHeight + 26, HtmlEscape(x_label));
  int legend = 0;
  for (const ChartLine& line : lines) {
    std::string points;
    for (const auto& [x, y] : line.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      absl::StrAppendFormat(&points, "%s%.1f,%.1f", points.empty() ? "" : " ", px(x), py(y));
    }
    const std::string color = HtmlEscape(line.color);
    absl::StrAppendFormat(&out,
                          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "points=\"%s\"/><text x=\"%g\" y=\"%g\" fill=\"%s\">%s</text>",
                          color, points, kLeft + kWidth + 8, kTop + 12 + 14.0 * legend++, color,
                          HtmlEscape(line.name));
  }
  return out + "</svg>\n";
}

std::string HtmlBar(double used, double limit, absl::string_view label) {
  const double share = limit > 0 ? std::clamp(used / limit, 0.0, 1.0) : 0.0;
  constexpr int kWidth = 300;
  return absl::StrFormat(
      "<svg width=\"%d\" height=\"18\" role=\"img\"><rect width=\"%d\" height=\"18\" "
      "fill=\"#eee\"/><rect width=\"%d\" height=\"18\" fill=\"%s\"/></svg> %s\n",
      kWidth, kWidth, static_cast<int>(share * kWidth), share >= 0.9 ? "#c33" : "#4a8",
      HtmlEscape(label));
}

}  // namespace fulcrum
