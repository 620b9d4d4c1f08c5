"""libFuzzer targets that are also regression tests."""

def fulcrum_fuzzer(name, srcs, deps, corpus = [], messages = {}, proto = None, proto_srcs = []):
    """A fuzz target (LLVMFuzzerTestOneInput in `srcs`) built two ways.

    `name` is a cc_test that runs the target once on every input of
    `corpus` and of regressions/<name>/ (the inputs that once crashed it),
    in any build, the sanitizers' included. `name`_fuzzer is the libFuzzer
    binary; it needs clang's libFuzzer, so it builds only with
    --config=asan (which instruments for it) and is left out of //...:
    scripts/fuzz.sh builds and runs it.

    Args:
      name: the target's name, e.g. "cluster_spec".
      srcs: the source defining LLVMFuzzerTestOneInput.
      deps: what it needs.
      corpus: the seed inputs: files, or a rule's outputs.
      messages: more seeds, written as text-format messages:
        {"corpus/<name>/x.textproto": "fulcrum.MessageName"} (encoded_seeds).
      proto: the .proto file (workspace path) that defines `messages`.
      proto_srcs: that file and what it imports.
    """
    if messages:
        encoded_seeds(name + "_seeds", messages, proto, proto_srcs)
        corpus = corpus + [":%s_seeds" % name]
    regressions = native.glob(["regressions/%s/*" % name])
    native.cc_test(
        name = name,
        size = "small",
        srcs = srcs,
        args = ["$(rootpaths %s)" % c for c in corpus] +
               ["$(rootpath %s)" % r for r in regressions],
        data = corpus + regressions,
        deps = deps + [":replay_main"],
    )
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = srcs,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual"],
        deps = deps,
    )

def encoded_seeds(name, seeds, proto, proto_srcs):
    """Seed inputs written as text-format messages, encoded with protoc.

    Each seed x.textproto becomes x.bin, the message in protobuf's binary
    encoding, as a peer would send it.

    Args:
      name: the rule's name; its outputs are the encoded seeds.
      seeds: {"corpus/<target>/x.textproto": "fulcrum.MessageName"}.
      proto: the .proto file (workspace path) that defines the messages.
      proto_srcs: that file and what it imports.
    """
    outs = []
    cmds = []
    for src, message in seeds.items():
        out = src[:-len(".textproto")] + ".bin"
        outs.append(out)
        cmds.append("protoc -I. --encode=%s %s < $(location %s) > $(location %s)" %
                    (message, proto, src, out))
    native.genrule(
        name = name,
        srcs = list(seeds.keys()) + proto_srcs,
        outs = outs,
        cmd = " && ".join(cmds),
    )
