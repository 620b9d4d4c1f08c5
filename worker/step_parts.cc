#include "worker/step_parts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fulcrum {

std::string FormatStepParts(const StepParts& sums, int64_t steps) {
  std::string out;
  for (int p = 0; p < StepParts::kParts; ++p) {
    absl::StrAppendFormat(&out, "%s%s %.1f ms", p == 0 ? "" : ", ", kStepPartNames[p],
                          absl::ToDoubleMilliseconds(sums.time[p]) /
                              static_cast<double>(std::max<int64_t>(steps, 1)));
  }
  return out;
}

void TraceStep(TraceFile& trace, int64_t step, absl::Time start, absl::Time end,
               const StepParts& parts) {
  trace.Add({"step", absl::StrCat("step ", step), start, end});
  absl::Time at = start;
  for (int p = 0; p < StepParts::kParts; ++p) {
    if (parts.time[p] <= absl::ZeroDuration()) continue;
    trace.Add({"step", kStepPartNames[p], at, at + parts.time[p]});
    at += parts.time[p];
  }
}

}  // namespace fulcrum
