/* say.h: distautograd-torch's lines on stderr, each in one write(2). The
** processes of a job share their stderr, and glibc 2.37 and later (Debian
** 13's) writes a printf to an unbuffered stream in pieces of 128 bytes,
** between which another process's line can land, tearing both. A line up
** to PIPE_BUF bytes written at once stays whole. Included by the shim and
** the implementation. */
#ifndef DAT_SAY_H
#define DAT_SAY_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

/* Writes fmt's line (it ends in a newline) to stderr in one write, cut to
** the buffer with its newline kept; errno is left as it was. */
__attribute__((format(printf, 1, 2))) static inline void dat_say(const char *fmt, ...) {
	int saved = errno;
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (n > 0) {
		size_t len = (size_t)n;
		if (len >= sizeof buf) { /* cut: the newline stays */
			len = sizeof buf - 1;
			buf[len - 1] = '\n';
		}
		for (size_t off = 0; off < len;) {
			ssize_t w = write(STDERR_FILENO, buf + off, len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break;
			off += (size_t)w;
		}
	}
	errno = saved;
}

#endif
