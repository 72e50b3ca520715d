// Data-path probes for tests: interposes malloc & co., pthread_mutex_lock and pthread_spin_lock
// and counts the calls made by the current thread while `g_counting` is set. Include in exactly
// one translation unit of a test executable, and build that executable with ENABLE_EXPORTS so
// shared libraries (libstdc++, dlopen'ed verbs providers) resolve to these definitions.
#pragma once

#include <dlfcn.h>
#include <pthread.h>

#include <cstddef>

namespace {
thread_local bool g_counting = false;
thread_local long g_allocs = 0;
thread_local long g_mutex_locks = 0;
thread_local long g_spin_locks = 0;
}  // namespace

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  if (g_counting) ++g_allocs;
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  if (g_counting) ++g_allocs;
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  if (g_counting) ++g_allocs;
  return __libc_realloc(p, n);
}
void* memalign(size_t a, size_t n) {
  if (g_counting) ++g_allocs;
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  if (g_counting) ++g_allocs;
  *out = __libc_memalign(a, n);
  return *out == nullptr ? 12 : 0;
}
void* aligned_alloc(size_t a, size_t n) {
  if (g_counting) ++g_allocs;
  return __libc_memalign(a, n);
}
int pthread_mutex_lock(pthread_mutex_t* m) {
  using Fn = int (*)(pthread_mutex_t*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
  if (g_counting) ++g_mutex_locks;
  return real(m);
}
int pthread_spin_lock(pthread_spinlock_t* l) {
  using Fn = int (*)(pthread_spinlock_t*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_spin_lock"));
  if (g_counting) ++g_spin_locks;
  return real(l);
}
}
