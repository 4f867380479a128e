/*
 * check.h - the small harness of the ABI tests (test_*.c): CHECK_EQ / CHECK count and print
 * what fails, check_summary() prints the "c-<name>: N passed, M failed" line and gives the exit
 * status, and a few socket fixtures. Header-only (static inline), so that a test still builds
 * from its one .c file, as scripts/test.sh's install check does with test_abi.c.
 */
#ifndef LOWCOPY_TESTS_CHECK_H
#define LOWCOPY_TESTS_CHECK_H

#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common.h"

/* One TU per test program, so file-scope counters are the program's. */
static int passed, failed;

/* Both cast to long long so that one macro serves every integer and pointer-sized result; the
 * expression's text is the message, so a failure names the call without a comment. */
#define CHECK_EQ(got, want) check_eq((long long)(got), (long long)(want), #got, __FILE__, __LINE__)
#define CHECK(cond) check_eq(!!(cond), 1, #cond, __FILE__, __LINE__)

/* Counts a check; a failed one is printed at once and the test goes on, so one run lists every
 * failure. */
static inline void check_eq(long long got, long long want, const char *what, const char *file,
			    int line)
{
	if (got == want) {
		passed++;
		return;
	}
	failed++;
	printf("FAIL %s:%d: %s = %lld, want %lld\n", file, line, what, got, want);
}

/* The closing line (scripts/test.sh and CI read it) and the exit status. */
static inline int check_summary(const char *suite)
{
	printf("%s: %d passed, %d failed\n", suite, passed, failed);
	return failed ? 1 : 0;
}

/* A fixture that cannot be built is no verdict on lowcopy: stop with a distinct status. */
__attribute__((noreturn)) static inline void die(const char *what)
{
	perror(what);
	exit(2);
}

/* A heap block of exactly n bytes, filled with 0xa5 so that what the library writes shows;
 * under ASan a byte written past it is a heap overflow report. */
static inline void *block(size_t n)
{
	void *p = malloc(n);

	if (!p)
		die("malloc");
	memset(p, 0xa5, n);
	return p;
}

/* Writes all n bytes (a fixture: a short write is no verdict on lowcopy). */
static inline void send_all(int fd, const void *buf, size_t n)
{
	if (write(fd, buf, n) != (ssize_t)n)
		die("write");
}

/* A socket option's value, or -errno: one value a CHECK_EQ can compare. */
static inline int get_int(int fd, int level, int name)
{
	int v = 0;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, level, name, &v, &len))
		return -errno;
	return v;
}

static inline int set_int(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof(v));
}

/* A listener on loopback port 0 (mss > 0: TCP_MAXSEG before listen, so that connections
 * inherit it from the handshake). */
static inline int listener(int family, int proto, int mss)
{
	struct sockaddr_storage ss;
	socklen_t len = loopback(family, &ss);
	int l = socket(family, SOCK_STREAM, proto);

	if (l < 0)
		die("socket");
	if (mss && set_int(l, IPPROTO_TCP, TCP_MAXSEG, mss))
		die("TCP_MAXSEG");
	if (bind(l, (struct sockaddr *)&ss, len) || listen(l, 4))
		die("bind/listen");
	return l;
}

/* A client of the listener `l`, of the same protocol (mss > 0: TCP_MAXSEG before connect). */
static inline int connect_to(int l, int proto, int mss)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int c;

	if (getsockname(l, (struct sockaddr *)&ss, &len))
		die("getsockname");
	c = socket(ss.ss_family, SOCK_STREAM, proto);
	if (c < 0 || (mss && set_int(c, IPPROTO_TCP, TCP_MAXSEG, mss)) ||
	    connect(c, (struct sockaddr *)&ss, len))
		die("connect");
	return c;
}

/* A connected loopback pair: *sock is the accepted side, *peer the client. */
static inline void tcp_pair(int family, int proto, int mss, int *sock, int *peer)
{
	int l = listener(family, proto, mss);

	*peer = connect_to(l, proto, mss);
	*sock = accept(l, NULL, NULL);
	if (*sock < 0)
		die("accept");
	close(l);
}

#endif
