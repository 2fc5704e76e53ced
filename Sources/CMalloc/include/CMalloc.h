#ifndef CACHET_CMALLOC_H
#define CACHET_CMALLOC_H

// glibc allocator settings that Swift's Glibc module does not export (<malloc.h>).

/// Limits the number of malloc arenas (mallopt M_ARENA_MAX). Returns 1 on success, 0 on failure.
int cachet_malloc_set_arena_max(int arenas);

#endif
