// A child process whose stdout and stderr are read as lines: started with
// its arguments and extra environment, read without blocking, reaped, and
// killed and reaped when destroyed. What the local launcher and the
// multi-process tests start. Thread-compatible.
#ifndef FULCRUM_COMMON_SUBPROCESS_H_
#define FULCRUM_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace fulcrum {

struct SubprocessOptions {
  std::vector<std::string> env;    // "NAME=value", added to this process's environment
  bool ignore_interrupts = false;  // SIGINT ignored: the parent stops the child itself
};

class Subprocess {
 public:
  // Starts `argv` (argv[0] found on PATH when it has no '/'). A program
  // that cannot be run exits 127, saying why on its output.
  explicit Subprocess(std::vector<std::string> argv,
                      SubprocessOptions options = SubprocessOptions());
  ~Subprocess();

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // The output's descriptor, to poll on; -1 once the output ended.
  int output_fd() const { return out_fd_; }

  // The lines of output that arrive within `timeout` (what is there now,
  // with none): every complete line read, and at the output's end its last
  // unterminated one.
  std::vector<std::string> ReadLines(absl::Duration timeout = absl::ZeroDuration());

  // The exit code (128 + the signal when killed) once the process exited;
  // nothing while it runs. Never waits.
  std::optional<int> Poll();

  void Signal(int sig);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string partial_;
  std::optional<int> exit_code_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_SUBPROCESS_H_
