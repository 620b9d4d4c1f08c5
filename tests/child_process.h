// A child process for multi-process tests (a Subprocess, common/subprocess.h):
// started with arguments and extra environment, its stdout and stderr read
// line by line and echoed, killed and reaped when the object goes away.
// The output is read all the time, on a thread of the object's own, so a
// child whose lines nobody waits for never blocks on a full pipe.
// Thread-compatible.
#ifndef FULCRUM_TESTS_CHILD_PROCESS_H_
#define FULCRUM_TESTS_CHILD_PROCESS_H_

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/subprocess.h"

namespace fulcrum {

class ChildProcess {
 public:
  // Starts `argv[0]` with `argv` and `env` ("NAME=value") added to this
  // process's environment. Its output is echoed to this process's stderr,
  // each line prefixed with `label`.
  ChildProcess(std::string label, std::vector<std::string> argv, std::vector<std::string> env = {});
  ~ChildProcess();  // kills the child, once its output's reader has stopped

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Reads output until a line contains `text`, of the lines from the
  // `from`th on (lines().size() at some point: only the lines after it);
  // returns that line, or nothing when the output ends or `timeout` passes
  // first.
  std::optional<std::string> WaitForLine(const std::string& text, absl::Duration timeout,
                                         size_t from = 0);

  // Waits for the process to exit (reading its output meanwhile); its exit
  // code, 128 + signal if killed, or nothing on timeout.
  std::optional<int> Wait(absl::Duration timeout);

  void Signal(int sig);

  // Every line the last WaitForLine, Wait or HasLine had read.
  const std::vector<std::string>& lines() const { return lines_; }

  // Whether a line read so far contains `text`.
  bool HasLine(const std::string& text) const;

 private:
  // The reader thread's loop: reads and echoes lines until the output ends.
  void Read();
  // Takes the lines the reader has read since into lines_; whether the
  // output has ended.
  bool Take() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the reader has more lines, the output ended or `deadline`.
  void AwaitMore(absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string label_;
  Subprocess process_;
  mutable absl::Mutex mu_;
  mutable std::vector<std::string> read_ ABSL_GUARDED_BY(mu_);  // not yet taken
  bool ended_ ABSL_GUARDED_BY(mu_) = false;                     // the output ended
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The caller's thread's only: what Take moved out of read_.
  mutable std::vector<std::string> lines_;
  std::thread reader_;
};

// The path of a binary built by Bazel, from the test's runfiles, e.g.
// RunfilePath("ps_server/ps_server").
std::string RunfilePath(const std::string& path);

// The port a daemon reports it picked, from its first line holding `marker`
// ("listening on", "metrics on") and then "host:port"; nothing when no such
// line comes within `timeout`.
std::optional<int> WaitForPort(ChildProcess& process, const std::string& marker,
                               absl::Duration timeout);

// The whole file, or "" when it cannot be read.
std::string ReadWholeFile(const std::string& path);

// A socket connected to 127.0.0.1:<port>, or -1.
int ConnectLoopback(int port);

// The body of GET http://127.0.0.1:<port><path> (HTTP/1.0), or "" on failure.
std::string HttpGet(int port, const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_TESTS_CHILD_PROCESS_H_
