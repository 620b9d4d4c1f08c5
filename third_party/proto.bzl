"""Compiles .proto files with the system protoc and grpc_cpp_plugin."""

def cc_proto_grpc_library(name, srcs, deps = [], grpc = False, serializers = None,
                          serializer_deps = [], visibility = None):
    """A cc_library for `srcs` (.proto files in this package).

    Args:
      name: the library's name.
      srcs: .proto files; imports are resolved from the workspace root.
      deps: cc_proto_grpc_library targets whose .proto files these import.
      grpc: also generate gRPC service stubs.
      serializers: with grpc, the base name of a hand-written .h/.cc pair in
        this package, compiled into the library, whose header the generated
        service headers include: gRPC serialisers for some of the messages.
      serializer_deps: what that pair needs besides the generated code.
      visibility: passed to the cc_library.
    """
    outs = []
    for src in srcs:
        base = src[:-len(".proto")]
        outs += [base + ".pb.h", base + ".pb.cc"]
        if grpc:
            outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
    grpc_options = ""
    hand_written = []
    if serializers:
        grpc_options = "additional_header_includes=%s/%s.h:" % (native.package_name(), serializers)
        hand_written = [serializers + ".h", serializers + ".cc"]
    plugin = (" --grpc_out=" + grpc_options + "$(GENDIR)" +
              " --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin") if grpc else ""
    native.genrule(
        name = name + "_gen",
        srcs = srcs + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = "protoc -I. --cpp_out=$(GENDIR)" + plugin + " " +
              " ".join(["$(location %s)" % s for s in srcs]),
    )
    # This library's .proto files and, transitively, those they import.
    native.filegroup(name = name + "_srcs", srcs = srcs + [d + "_srcs" for d in deps])
    native.cc_library(
        name = name,
        srcs = [o for o in outs + hand_written if o.endswith(".cc")],
        hdrs = [o for o in outs + hand_written if o.endswith(".h")],
        deps = deps + serializer_deps + ["//third_party:protobuf"] +
               (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )
