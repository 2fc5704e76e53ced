#include "CMalloc.h"
#include <malloc.h>

int cachet_malloc_set_arena_max(int arenas) { return mallopt(M_ARENA_MAX, arenas); }
