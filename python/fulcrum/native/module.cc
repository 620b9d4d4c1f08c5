// fulcrum._fulcrum: the native half of the Python package, a thin pybind11
// layer over the public C++ client (fulcrum/ps_client.h). It implements no
// protocol of its own: specs arrive as the wire contract's JSON and go
// through protobuf's parser, calls go through PsClient.
//
// Zero copy: tensors are the caller's own float32 buffers, taken through
// the buffer protocol (NumPy arrays, memoryviews) or DLPack (CPU torch
// tensors, anything with __dlpack__), C-contiguous and never converted:
// anything else is refused, so no call copies behind the caller's back.
// Pulled values are written into them in place; gradients are read from
// them. The GIL is released during every call.
//
// Errors are fulcrum.Error subclasses named after the gRPC status code
// (fulcrum.Unavailable, ...), with .code (the name) and the message.
#include "python/fulcrum/native/module.h"

#include <pybind11/pybind11.h>

#include "python/fulcrum/native/errors.h"

PYBIND11_MODULE(_fulcrum, m) {
  m.doc() = "Fulcrum's native client (use the fulcrum package, not this module).";
  fulcrum::native::RegisterErrors(m);
  fulcrum::native::RegisterClient(m);
  fulcrum::native::RegisterCollective(m);
  fulcrum::native::RegisterData(m);
  fulcrum::native::RegisterExport(m);
}
