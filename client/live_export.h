// The model live parameter servers hold, written as a file other tools
// read (safetensors or npz), the same names and layout fulcrumctl export
// gives a checkpoint (docs/checkpoints.md): each variable by its name; each
// embedding table t as t.ids (int64, [rows]) and t.rows (float32, [rows,
// width]), every row the servers store. For programs that train through a
// PsClient of their own (the Python package's client.export).
//
// Variables are pulled one at a time, so memory holds the largest of them;
// tables are read page by page into a temporary file beside `path` first
// (the file's header needs their row counts), so memory holds a page. The values are
// those of the moment each is read: export after the last step (before
// JobDone) for the trained model, or take a checkpoint for a consistent one
// mid-training.
#ifndef FULCRUM_CLIENT_LIVE_EXPORT_H_
#define FULCRUM_CLIENT_LIVE_EXPORT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "fulcrum/ps_client.h"

namespace fulcrum {

struct LiveExportOptions {
  std::string path;    // the file to write, atomically
  std::string format;  // "safetensors" or "npz"; empty: by path's extension
};

struct LiveExportSummary {
  std::string format;
  int64_t tensors = 0;
  int64_t bytes = 0;  // of tensor data
};

// Writes every variable and table the servers of `client` hold. Variables
// are pulled through `client`, so they must have been created through it
// (NOT_FOUND names one that was not: export from the chief). INVALID_ARGUMENT
// for an unknown format; the servers' errors as the calls return them.
absl::StatusOr<LiveExportSummary> ExportLive(PsClient& client, const LiveExportOptions& options);

}  // namespace fulcrum

#endif  // FULCRUM_CLIENT_LIVE_EXPORT_H_
