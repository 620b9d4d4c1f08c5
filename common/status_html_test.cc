#include "common/status_html.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace fulcrum {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(StatusHtmlTest, EscapesWhatAPageShows) {
  EXPECT_EQ(HtmlEscape("<w&'x\">"), "&lt;w&amp;&#39;x&quot;&gt;");
  const std::string table =
      HtmlTable("t", {"a<b"}, {{"<script>"}, {HtmlCell("dead", /*alert=*/true)}, {"dead"}}, "none");
  EXPECT_THAT(table, HasSubstr("<th>a&lt;b</th>"));
  EXPECT_THAT(table, HasSubstr("<td>&lt;script&gt;</td>"));
  EXPECT_THAT(table, Not(HasSubstr("<script>")));
  EXPECT_THAT(table, HasSubstr("<td class=\"alert\">dead</td>"));
  EXPECT_THAT(table, HasSubstr("<tr><td>dead</td></tr>")) << "alert only where asked";
  EXPECT_EQ(HtmlTable("t", {"a"}, {}, "nothing <yet>"),
            "<p id=\"t\" class=\"muted\">nothing &lt;yet&gt;</p>\n");
}

TEST(StatusHtmlTest, APageRefreshesItselfAndABarShowsItsShare) {
  const std::string page = HtmlPage("ps <0>", 2, "<p>body</p>");
  EXPECT_THAT(page, HasSubstr("<meta http-equiv=\"refresh\" content=\"2\">"));
  EXPECT_THAT(page, HasSubstr("<title>ps &lt;0&gt;</title>"));
  EXPECT_THAT(page, HasSubstr("<p>body</p>"));
  EXPECT_THAT(page, Not(HasSubstr("<script")));
  EXPECT_THAT(HtmlPage("t", 0, ""), Not(HasSubstr("refresh")));
  EXPECT_THAT(HtmlBar(50, 100, "half"), HasSubstr("width=\"150\" height=\"18\" fill=\"#4a8\""));
  EXPECT_THAT(HtmlBar(95, 100, "near"), HasSubstr("fill=\"#c33\""));
  EXPECT_THAT(HtmlBar(500, 100, "over"), HasSubstr("width=\"300\" height=\"18\" fill=\"#c33\""));
  EXPECT_THAT(HtmlBar(1, 0, "no budget"), HasSubstr("width=\"0\""));
}

// A chart spans its points' range, skips points that are not finite, and
// says so when there is nothing to draw.
TEST(StatusHtmlTest, AChartDrawsEachLineOverThePointsRange) {
  const std::string chart = HtmlLineChart(
      "c", {{"loss", "#c33", {{0, 2}, {10, 1}, {20, std::nan("")}}}, {"acc<", "#36c", {{5, 0}}}},
      "step");
  EXPECT_THAT(chart, HasSubstr("<svg id=\"c\""));
  // x from 0 to 10 across 560 px from 50; y from 0 to 2 over 180 px from 10.
  EXPECT_THAT(chart, HasSubstr("points=\"50.0,10.0 610.0,100.0\""));
  EXPECT_THAT(chart, HasSubstr("points=\"330.0,190.0\""));
  EXPECT_THAT(chart, HasSubstr(">acc&lt;</text>"));
  EXPECT_THAT(chart, HasSubstr(">step</text>"));
  EXPECT_THAT(HtmlLineChart("c", {{"loss", "#c33", {}}}, "step"), HasSubstr("nothing to draw yet"));
}

}  // namespace
}  // namespace fulcrum
