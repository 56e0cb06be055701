// DURIN_ASSERT(cond, message): an invariant that must never break. Always on,
// also in release builds: on failure it prints where and why, then aborts,
// because going on would risk writing a wrong history.
#pragma once

#include <cstdio>
#include <cstdlib>

#define DURIN_ASSERT(cond, message)                                       \
  do {                                                                    \
    if (!(cond)) [[unlikely]] {                                           \
      std::fprintf(stderr, "durin: invariant broken at %s:%d: %s (%s)\n", \
                   __FILE__, __LINE__, message, #cond);                   \
      std::abort();                                                       \
    }                                                                     \
  } while (false)
