"""Compiles .proto files with the system protoc and grpc_cpp_plugin."""

def cc_proto_library_local(name, srcs, deps = [], visibility = None):
    """A cc_library of the messages of `srcs` (.proto files in this package).

    Args:
      name: the library's name.
      srcs: .proto files; imports are resolved from the workspace root.
      deps: cc_proto_library_local targets whose .proto files these import.
      visibility: passed to the cc_library.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "protoc -I. --cpp_out=$(GENDIR) " +
              " ".join(["$(location %s)" % s for s in srcs]),
    )

    # This library's .proto files and, transitively, those they import.
    native.filegroup(name = name + "_srcs", srcs = srcs + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["//third_party:protobuf"],
        visibility = visibility,
    )

def cc_grpc_library_local(name, srcs, proto, serializer_header = None, deps = [],
                          visibility = None):
    """A cc_library of the gRPC service stubs of `srcs`.

    Args:
      name: the library's name.
      srcs: .proto files in this package, whose messages `proto` holds.
      proto: the cc_proto_library_local target of `srcs`.
      serializer_header: a header (workspace path) the generated service
        headers include: gRPC serialisers for some of the messages, which
        `deps` must provide.
      deps: what the generated code needs besides `proto` and gRPC.
      visibility: passed to the cc_library.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    options = "additional_header_includes=%s:" % serializer_header if serializer_header else ""
    native.genrule(
        name = name + "_gen",
        srcs = [proto + "_srcs"],
        outs = outs,
        cmd = ("protoc -I. --grpc_out=" + options + "$(GENDIR)" +
               " --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin " +
               " ".join(["%s/%s" % (native.package_name(), s) for s in srcs])),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = [proto] + deps + ["//third_party:grpc"],
        visibility = visibility,
    )
