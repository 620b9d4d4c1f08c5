// fulcrum._fulcrum, the native half of the Python package: what each part
// adds to the module. Defined in the part's file; module.cc calls them.
#ifndef FULCRUM_PYTHON_FULCRUM_NATIVE_MODULE_H_
#define FULCRUM_PYTHON_FULCRUM_NATIVE_MODULE_H_

#include <pybind11/pybind11.h>

namespace fulcrum::native {

// Client, Future and resolve_cluster (client.cc).
void RegisterClient(pybind11::module_& m);

// fulcrum._fulcrum.Collective: the all-reduce group (collective.cc).
void RegisterCollective(pybind11::module_& m);
// BatchDealer (data.cc).
void RegisterData(pybind11::module_& m);
// load_checkpoint (export.cc).
void RegisterExport(pybind11::module_& m);

}  // namespace fulcrum::native

#endif  // FULCRUM_PYTHON_FULCRUM_NATIVE_MODULE_H_
