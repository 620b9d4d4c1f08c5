// A port free on 127.0.0.1, for a process whose peers must know its address
// before it starts (all-reduce workers under the launcher and in tests).
#ifndef FULCRUM_COMMON_LOOPBACK_H_
#define FULCRUM_COMMON_LOOPBACK_H_

namespace fulcrum {

// A port free on 127.0.0.1 now (the kernel's pick); 0 when none is.
// Another process may take it before the caller binds it.
int FreeLoopbackPort();

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_LOOPBACK_H_
