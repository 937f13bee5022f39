/* csrc/dacc.h: how the rooms of the C side declare what they share. Not
** installed.
**
** The C side is rooms of one concern each: csrc/X.c, and csrc/X.h for what
** the other rooms (and Go's cgo preambles) may use of it. capi.c includes
** every room's .c into one translation unit, as SQLite's amalgamation does,
** so that the fast paths inline across rooms; each room also compiles alone
** against the headers it includes (make lint-c), and no room includes the
** header of one that includes its own, directly or not (abi:
** TestCRoomsFormNoCycle).
**
** What a room gives the others is a static inline function in its header
** (the fast paths: inlined wherever used, in one unit or alone), or a
** function or variable named dacc_* and declared DACC_HIDDEN there, defined
** in the room's .c. Hidden, not just left out of libdistautograd.map:
** in a shared object an external symbol of default visibility may be
** interposed by another object at load time, so the compiler neither
** inlines it nor calls it directly (it goes through the PLT, a variable
** through the GOT); a hidden one it treats as it treats a static one. The
** ABI contract test (abi: TestCapiDefinesEveryHeaderFunction) holds every
** function of capi.c's unit with external linkage to be a public dac_*
** function of include/distautograd.h or a hidden dacc_* one. */
#ifndef DISTAUTOGRAD_CSRC_DACC_H
#define DISTAUTOGRAD_CSRC_DACC_H

/* Visible to the library's own objects only: never exported, never
** interposed (above). */
#define DACC_HIDDEN __attribute__((visibility("hidden")))

/* Thread-local storage in the initial-exec model: an access is one load at
** a fixed offset from the thread pointer instead of a __tls_get_addr call.
** It costs nothing extra: the Go runtime's own TLS already makes the library
** STATIC_TLS, so the loader gives its whole TLS block static space anyway. */
#define DACC_TLS __thread __attribute__((tls_model("initial-exec")))

#endif
