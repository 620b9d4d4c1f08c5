// Where the rows of an embedding table live and how they start: shared by
// the servers that hold them and the clients that route ids to them.
// Pure functions; thread-safe.
#ifndef FULCRUM_COMMON_EMBEDDING_H_
#define FULCRUM_COMMON_EMBEDDING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/tensor.pb.h"

namespace fulcrum {

// Most ids one call on rows may name on one server: the servers refuse
// more (RESOURCE_EXHAUSTED); the client splits its pulls under it.
constexpr int64_t kMaxIdsPerRowCall = int64_t{1} << 20;

// The server (of `num_servers`) that holds row `id` of any table: a fixed
// mix of the id (splitmix64), so that placement depends on nothing but the
// id and the number of servers, and skewed ids still spread evenly.
int EmbeddingOwner(int64_t id, int num_servers);

// The ranges `spec`'s ids are dealt into (EmbeddingOwner(id, partitions)):
// its `partitions`, or when 0, one per server of `num_servers` (at least 1).
int TablePartitions(const EmbeddingTableSpec& spec, int num_servers);

// The placement unit of a table's ids whose EmbeddingOwner among
// `partitions` is `partition`: "table#partition"; and back (false for a
// key that is not one).
std::string TableKey(absl::string_view table, int partition);
bool ParseTableKey(absl::string_view key, std::string* table, int* partition);

// INVALID_ARGUMENT naming what is wrong with `spec` (a name, width >= 1, a
// known initializer other than GLOROT_UNIFORM, a valid optimizer,
// max_rows >= 0, admit_after >= 0, partitions >= 0).
absl::Status ValidateEmbeddingTableSpec(const EmbeddingTableSpec& spec);

// Row `id`'s initial values (spec.width floats into `out`), drawn from a
// generator seeded by (the initializer's seed, the table's name, id).
void InitialEmbeddingRow(const EmbeddingTableSpec& spec, int64_t id, absl::Span<float> out);

// The same for one table, with its seed prepared once: a table makes a row
// for every unseen id it is asked for, so the values come from a counter
// hash (splitmix64 of the seed, the id and the element), not a seeded
// engine, costing a few nanoseconds an element.
class EmbeddingRowInitializer {
 public:
  explicit EmbeddingRowInitializer(const EmbeddingTableSpec& spec);
  void Row(int64_t id, absl::Span<float> out) const;

 private:
  const InitializerSpec init_;
  const uint64_t seed_;  // the initializer's, mixed with the table's name
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_EMBEDDING_H_
