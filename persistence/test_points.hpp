// Named kill points for crash tests. DURIN_TEST_KILL_POINT("name") does
// nothing unless the process was started with DURIN_KILL_AT=name:N, in which
// case the N-th time the point is reached the process sends itself SIGKILL.
// Compiled away entirely unless DURIN_TEST_POINTS is defined.
#pragma once

#if defined(DURIN_TEST_POINTS)
namespace durin::test_points {
void reach(const char* name) noexcept;
}  // namespace durin::test_points
#define DURIN_TEST_KILL_POINT(name) ::durin::test_points::reach(name)
#else
#define DURIN_TEST_KILL_POINT(name) ((void)0)
#endif
