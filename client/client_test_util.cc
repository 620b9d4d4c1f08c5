#include "client/client_test_util.h"

#include <vector>

namespace fulcrum {

PsServerConfig TestServerConfig(ConsistencyMode mode, int replicas) {
  PsServerConfig config;
  config.set_mode(mode);
  config.set_num_replicas(replicas);
  config.set_replicas_to_aggregate(replicas);
  config.set_max_staleness(-1);
  config.set_staleness_bound(1);
  config.set_lease_timeout_ms(10000);
  config.set_startup_timeout_ms(10000);
  config.set_max_message_bytes(64 << 20);
  return config;
}

VariableSpec TestVariable(const std::string& name, Shape shape, int shards, float init) {
  VariableSpec spec;
  spec.set_name(name);
  spec.mutable_shape()->Assign(shape.begin(), shape.end());
  spec.set_dtype(DT_FLOAT);
  spec.mutable_initializer()->set_kind(InitializerSpec::CONSTANT);
  spec.mutable_initializer()->set_value(init);
  spec.mutable_partitioner()->set_kind(PartitionerSpec::FIXED_SHARDS);
  spec.mutable_partitioner()->set_num_shards(shards);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  return spec;
}

DenseTensor Filled(const Shape& shape, float value) {
  return DenseTensor{shape, std::vector<float>(NumElements(shape), value)};
}

}  // namespace fulcrum
