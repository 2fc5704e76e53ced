// Counts heap allocations of a process, for Benchmarks/client-allocations.sh. Built as a shared object and
// loaded with LD_PRELOAD; at exit it writes "malloc-count: N" (calls of malloc, calloc, realloc,
// posix_memalign, aligned_alloc and memalign) to standard error.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_ulong count;
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

// dlsym itself may call calloc before real_calloc is known: serve that from a static arena.
static char arena[4096];
static size_t arena_used;

static void resolve(void) {
    if (real_malloc) return;
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
}

void *malloc(size_t size) {
    resolve();
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return real_malloc(size);
}

void *calloc(size_t n, size_t size) {
    if (!real_calloc) {
        static int resolving;
        if (resolving) {
            size_t bytes = (n * size + 15) & ~(size_t)15;
            void *p = arena + arena_used;
            arena_used += bytes;
            memset(p, 0, bytes);
            return p;
        }
        resolving = 1;
        resolve();
        resolving = 0;
    }
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return real_calloc(n, size);
}

void *realloc(void *p, size_t size) {
    resolve();
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return real_realloc(p, size);
}

int posix_memalign(void **p, size_t alignment, size_t size) {
    resolve();
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return real_posix_memalign(p, alignment, size);
}

void *aligned_alloc(size_t alignment, size_t size) {
    resolve();
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return real_aligned_alloc(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
    resolve();
    atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    return real_memalign(alignment, size);
}

void free(void *p) {
    static void (*real_free)(void *);
    if (p >= (void *)arena && p < (void *)(arena + sizeof arena)) return;
    if (!real_free) real_free = dlsym(RTLD_NEXT, "free");
    real_free(p);
}

__attribute__((destructor)) static void report(void) {
    char line[64];
    int length = snprintf(line, sizeof line, "malloc-count: %lu\n", atomic_load(&count));
    if (write(2, line, (size_t)length) < 0) {}
}
