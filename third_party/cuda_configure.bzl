"""Finds the CUDA toolkit (CUDA_PATH, default /usr/local/cuda) at build time.

Creates @local_cuda with:
  defs.bzl: CUDA_AVAILABLE (whether nvcc exists) and CUDA_PATH;
  //:cuda: the toolkit's headers and the static CUDA runtime (cuBLAS and NCCL
  are loaded at run time: worker/cuda/cuda_libs.h).
Without a toolkit the build goes on and the worker reports that this build
has no CUDA.
"""

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    available = ctx.path(path + "/bin/nvcc").exists
    ctx.file("defs.bzl", "CUDA_AVAILABLE = %s\nCUDA_PATH = %r\n" % (available, path))
    if available:
        ctx.symlink(path + "/include", "include")
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "cuda",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.inl"]),
    includes = ["include"],
    linkopts = [
        "-L{path}/lib64",
        "-lcudart_static",
        "-ldl",
        "-lrt",
        "-lpthread",
    ],
)
""".format(path = path))
    else:
        ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(name = "cuda")
""")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
