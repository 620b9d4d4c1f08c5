// The CTR model's embedding lookups (--model=ctr, the wide-and-deep / DLRM
// pattern): each categorical field's ids index a table of its own on the
// parameter servers ("field_<i>"), and the rows, concatenated after the
// numeric features, are the MLP's input. Per step the batch's rows are
// pulled before the forward pass and the gradients of those inputs pushed
// after the backward pass; the tables' optimizer runs on the servers.
// Thread-compatible.
#ifndef FULCRUM_WORKER_EMBEDDING_INPUTS_H_
#define FULCRUM_WORKER_EMBEDDING_INPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "fulcrum/ps_client.h"
#include "proto/tensor.pb.h"
#include "worker/data/batcher.h"

namespace fulcrum {

struct EmbeddingConfig {
  int fields = 0;
  // Each field's table: the name is set per field; the rest (width,
  // initializer, optimizer, max_rows, admit_after) is shared.
  EmbeddingTableSpec table;
};

// The fields' tables, "field_0" ... .
std::vector<EmbeddingTableSpec> EmbeddingTables(const EmbeddingConfig& config);

class EmbeddingInputs {
 public:
  // `client` outlives this.
  EmbeddingInputs(PsClient* client, EmbeddingConfig config);

  // Creates the tables on the servers (idempotent: every worker does).
  absl::Status CreateTables();

  // The MLP's input width for `numeric` numeric features.
  int64_t InputDim(int64_t numeric) const;

  // Pulls the rows of `batch`'s ids; its features become, per example, the
  // numeric features and then each field's row (feature_dim grows to
  // InputDim). INVALID_ARGUMENT when the batch's ids are not one per field.
  absl::Status Gather(Batch* batch);

  // Pushes the row gradients of a gathered batch: each field's columns of
  // `input_grads` (batch.size x batch.feature_dim, the gradient of the
  // batch's mean loss), summed per id.
  absl::StatusOr<PushStats> Push(const Batch& batch, absl::Span<const float> input_grads);

  // A step whose batch was skipped: no gradients, but in sync every server
  // still hears from this worker, so that the tables' step completes.
  absl::Status PushNothing();

 private:
  // Each field's ids of `batch`, which has one id per field.
  std::vector<TableIds> Lookups(const Batch& batch) const;

  PsClient* const client_;
  const EmbeddingConfig config_;
  const std::vector<EmbeddingTableSpec> tables_;
};

}  // namespace fulcrum

#endif  // FULCRUM_WORKER_EMBEDDING_INPUTS_H_
