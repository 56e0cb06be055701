// Named kill points for crash tests. DURIN_TEST_KILL_POINT("name") does
// nothing unless the process was started with DURIN_KILL_AT=name:N, in which
// case the N-th time the point is reached the process sends itself SIGKILL.
// DURIN_TEST_FAIL_POINT("name") is false unless the process was started
// with DURIN_FAIL_AT=name:N: then it is true the N-th time, where the code
// acts as if the operation there failed (a fault no file system can be
// made to show in a process test). DURIN_TEST_SLOW_POINT("name") sleeps N
// milliseconds every time it is reached when the process was started with
// DURIN_SLOW_AT=name:N, which widens a race's window until a process test
// meets it every time. Compiled away entirely (kill, slow: nothing, fail:
// false) unless DURIN_TEST_POINTS is defined.
#pragma once

#if defined(DURIN_TEST_POINTS)
namespace durin::test_points {
void reach(const char* name) noexcept;
bool fails(const char* name) noexcept;
void slow(const char* name) noexcept;
}  // namespace durin::test_points
#define DURIN_TEST_KILL_POINT(name) ::durin::test_points::reach(name)
#define DURIN_TEST_FAIL_POINT(name) ::durin::test_points::fails(name)
#define DURIN_TEST_SLOW_POINT(name) ::durin::test_points::slow(name)
#else
#define DURIN_TEST_KILL_POINT(name) ((void)0)
#define DURIN_TEST_FAIL_POINT(name) false
#define DURIN_TEST_SLOW_POINT(name) ((void)0)
#endif
