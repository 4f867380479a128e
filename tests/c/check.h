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

/* What the kernel offers, found here without lowcopy, to check lowcopy_probe against (a test
 * never hard-codes one kernel's answer). */

/* setsockopt(SO_PEEK_OFF) on a fresh socket of this kind. */
static inline int raw_has_peek_off(int family, int type, int proto)
{
	int fd = socket(family, type, proto), zero = 0, ok;

	if (fd < 0)
		return 0;
	ok = setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof(zero)) == 0;
	close(fd);
	return ok;
}

/* setsockopt(SO_ZEROCOPY, 1) on a fresh socket of this kind. */
static inline int raw_has_so_zerocopy(int family, int type)
{
	int fd = socket(family, type, 0), one = 1, ok;

	if (fd < 0)
		return 0;
	ok = setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0;
	close(fd);
	return ok;
}

/* Bytes of struct tcp_zerocopy_receive the kernel takes: 64 since 5.12 (it lowers optlen to
 * what it knows), exactly 16 on 4.18-5.6; 0 without TCP_ZEROCOPY_RECEIVE. */
static inline int raw_zcrx_size(void)
{
	unsigned char zc[64] = { 0 };
	socklen_t len = 0;
	int sock, peer, got = 0;

	tcp_pair(AF_INET, 0, 0, &sock, &peer);
	for (int i = 0; i < 2 && !got; i++) {
		len = i == 0 ? 64 : 16;
		memset(zc, 0, sizeof(zc));
		if (getsockopt(sock, IPPROTO_TCP, 35 /* TCP_ZEROCOPY_RECEIVE */, zc, &len) == 0)
			got = (int)len;
		else if (errno != EINVAL)
			break;
	}
	close(sock);
	close(peer);
	return got;
}

#endif
