/* nomem_calloc.h: nomem.c's calloc, which interposes the library's and
** fails the allocation of an error slot on the threads that set fail_slot.
** A file of its own, which knows nothing of the library: the library's
** calls of calloc resolve to it at run time, and nothing of it calls back. */
#ifndef NOMEM_CALLOC_H
#define NOMEM_CALLOC_H

#include <stddef.h>

void *__libc_calloc(size_t n, size_t size);

/* The error slot's size: a status and a 1024-byte message. */
#define SLOT_SIZE (sizeof(int) + 1024)

static __thread int fail_slot;

void *calloc(size_t n, size_t size) {
	if (fail_slot && n == 1 && size == SLOT_SIZE)
		return NULL;
	return __libc_calloc(n, size);
}

#endif
