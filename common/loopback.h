// Ports free on 127.0.0.1, for processes whose peers must know their
// addresses before they start (all-reduce workers under the launcher and in
// tests).
#ifndef FULCRUM_COMMON_LOOPBACK_H_
#define FULCRUM_COMMON_LOOPBACK_H_

#include <vector>

namespace fulcrum {

// `n` distinct ports free on 127.0.0.1 now (the kernel's picks, each held
// until all are picked: one released at once may be picked again); 0 in
// place of any that could not be had. Another process may take one before
// the caller binds it.
std::vector<int> FreeLoopbackPorts(int n);

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_LOOPBACK_H_
