/*
 * The zerocopy-send C ABI: NULL pointers, bad fds and enums, every backend over loopback TCP,
 * send_reap, wait, and free with sends in flight; the options (reserve, max_pending); the
 * thread's one io_uring ring shared by its senders, the thread rules, and fork. Built against
 * liblowcopy.so and .a and run under AddressSanitizer by scripts/test.sh. Prints
 * "c-zc: N passed, M failed".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include <lowcopy.h>

#include "check.h"

/* Loopback TCP: *tx sends, *rx is the accepted receiving side. */
static void zc_pair(int *tx, int *rx)
{
	tcp_pair(AF_INET, 0, 0, rx, tx);
}

/* Fills buf with the stream pattern from stream position `pos` (common.h). */
static void fill_pattern(unsigned char *buf, size_t n, uint64_t pos)
{
	for (size_t i = 0; i < n; i++)
		buf[i] = pattern_byte(pos + i);
}

/* Reads exactly n bytes and checks each against the pattern at its stream position, from
 * `pos`: a byte out of place, a lost or a repeated chunk all show as wrong values. */
static int read_all(int fd, size_t n, uint64_t pos)
{
	unsigned char buf[65536];
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, buf, sizeof(buf) < n - got ? sizeof(buf) : n - got);
		if (r <= 0)
			return 0;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pattern_byte(pos + got + i)) {
				printf("stream byte %zu: got %u, want %u\n", (size_t)(pos + got + i),
				       buf[i], pattern_byte(pos + got + i));
				return 0;
			}
		got += r;
	}
	return 1;
}

/* Reads the pattern stream until the connection is reset: 1 if it ends with ECONNRESET after
 * only pattern bytes. */
static int read_until_reset(int fd)
{
	unsigned char buf[65536];
	uint64_t pos = 0;

	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == ECONNRESET;
		if (r == 0)
			return 0;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pattern_byte(pos + i))
				return 0;
		pos += (uint64_t)r;
	}
}

/* The backend AUTO picks on a TCP socket of this kernel, as lowcopy_probe reports it:
 * io_uring SEND_ZC, else the error queue, else plain copies. */
static uint32_t auto_backend(void)
{
	lowcopy_caps caps;

	if (lowcopy_probe(&caps, sizeof(caps)) < 0)
		die("lowcopy_probe");
	return caps.uring_send_zc ? LOWCOPY_ZC_IO_URING
	       : caps.zerocopy_tcp ? LOWCOPY_ZC_ERRQUEUE
				   : LOWCOPY_ZC_COPY;
}

/* Collects completions until none is in flight (bounded); returns how many were reaped. */
static size_t collect(lowcopy_zc *z, lowcopy_zc_completion *out, size_t cap)
{
	size_t n = 0;

	for (int tries = 0; tries < 100; tries++) {
		ssize_t k = lowcopy_zc_reap(z, out + n, cap - n, sizeof(lowcopy_zc_completion));
		if (k < 0)
			return n;
		n += k;
		if (lowcopy_zc_inflight(z) == 0 && k == 0)
			break;
		if (k == 0)
			lowcopy_zc_wait(z, 50);
	}
	return n;
}

static void test_null_and_bad_input(void)
{
	lowcopy_zc *z = (lowcopy_zc *)0x1; /* sentinel: untouched on failure */
	lowcopy_zc_completion c[4] = { 0 }; /* sent as payload below: defined bytes */
	lowcopy_zc_send_stats st;
	struct iovec iov = { c, 1 };
	struct msghdr msg = { 0 };
	size_t n = 77;
	int tx, rx, devnull = open("/dev/null", O_RDONLY), closed = dup(0), u;

	close(closed);
	zc_pair(&tx, &rx);
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_AUTO, 0, NULL), -EINVAL);
	CHECK_EQ(lowcopy_zc_new(tx, 4, 0, &z), -EINVAL);
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_AUTO, 0x80, &z), -EINVAL);
	CHECK_EQ(lowcopy_zc_new(-1, LOWCOPY_ZC_AUTO, 0, &z), -EBADF);
	CHECK_EQ(lowcopy_zc_new(closed, LOWCOPY_ZC_COPY, 0, &z), -EBADF);
	CHECK_EQ(lowcopy_zc_new(devnull, LOWCOPY_ZC_COPY, 0, &z), -ENOTSOCK);
	u = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK_EQ(lowcopy_zc_new(u, LOWCOPY_ZC_ERRQUEUE, 0, &z), -EOPNOTSUPP);
	CHECK_EQ(lowcopy_zc_new(u, LOWCOPY_ZC_IO_URING, 0, &z), -EOPNOTSUPP);
	CHECK_EQ((uintptr_t)z, 1);
	close(u);

	CHECK_EQ(lowcopy_zc_send(NULL, c, 1, 0, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_sendv(NULL, &iov, 1, 0, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_sendmsg(NULL, &msg, 0, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_send_reap(NULL, &iov, 1, 0, 1, c, 4, sizeof(lowcopy_zc_completion), &n), -EINVAL);
	CHECK_EQ(lowcopy_zc_reap(NULL, c, 4, sizeof(lowcopy_zc_completion)), -EINVAL);
	CHECK_EQ(lowcopy_zc_wait(NULL, 0), -EINVAL);
	CHECK_EQ(lowcopy_zc_inflight(NULL), 0);
	CHECK_EQ(lowcopy_zc_pollfd(NULL), -EINVAL);
	CHECK_EQ(lowcopy_zc_backend(NULL), LOWCOPY_ZC_AUTO);
	CHECK_EQ(lowcopy_zc_stats(NULL, &st, sizeof(lowcopy_zc_send_stats)), -EINVAL);
	CHECK_EQ(lowcopy_zc_free(NULL), 0);
	{
		size_t nb = 0;
		uint64_t ud = 1;
		lowcopy_zc_send_stats cs;
		CHECK_EQ(lowcopy_zc_send_batch(NULL, &iov, 1, &ud, 0, c, 4, sizeof(lowcopy_zc_completion), &n, &nb), -EINVAL);
		CHECK_EQ(lowcopy_zc_close(NULL, &cs, sizeof cs), -EINVAL);
		CHECK_EQ(lowcopy_zc_close(NULL, NULL, 0), -EINVAL);
	}

	z = NULL;
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_ERRQUEUE, 0, &z), 0);
	CHECK_EQ(lowcopy_zc_send(z, NULL, 1, 0, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_sendv(z, NULL, 1, 0, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_sendv(z, &iov, 0, 0, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_sendv(z, &iov, 1025, 0, 1), -EMSGSIZE);
	CHECK_EQ(lowcopy_zc_sendmsg(z, NULL, 0, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_sendmsg(z, &msg, 0, 1), -EINVAL); /* no iovecs */
	CHECK_EQ(lowcopy_zc_send(z, c, 1, MSG_OOB, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_send(z, c, 1, MSG_ZEROCOPY, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_send_reap(z, &iov, 1, 0, 1, NULL, 4, sizeof(lowcopy_zc_completion), &n), -EINVAL);
	CHECK_EQ(lowcopy_zc_send_reap(z, &iov, 1, 0, 1, c, 4, sizeof(lowcopy_zc_completion), NULL), -EINVAL);
	{
		size_t nb = 77;
		uint64_t ud = 1;
		CHECK_EQ(lowcopy_zc_send_batch(z, NULL, 1, &ud, 0, c, 4, sizeof(lowcopy_zc_completion), &n, &nb), -EINVAL);
		CHECK_EQ(lowcopy_zc_send_batch(z, &iov, 1, NULL, 0, c, 4, sizeof(lowcopy_zc_completion), &n, &nb), -EINVAL);
		CHECK_EQ(lowcopy_zc_send_batch(z, &iov, 1, &ud, 0, c, 4, sizeof(lowcopy_zc_completion), NULL, &nb), -EINVAL);
		CHECK_EQ(lowcopy_zc_send_batch(z, &iov, 1, &ud, 0, c, 4, sizeof(lowcopy_zc_completion), &n, NULL), -EINVAL);
		CHECK_EQ(lowcopy_zc_send_batch(z, &iov, 1, &ud, 0, NULL, 4, sizeof(lowcopy_zc_completion), &n, &nb), -EINVAL);
		CHECK_EQ(lowcopy_zc_send_batch(z, &iov, 1, &ud, MSG_OOB, c, 4, sizeof(lowcopy_zc_completion), &n, &nb), -EINVAL);
		/* Counts no array in memory can have: refused before any send, nothing read past &iov. */
		CHECK_EQ(lowcopy_zc_send_batch(z, &iov, SIZE_MAX, &ud, 0, c, 4, sizeof(lowcopy_zc_completion), &n, &nb), -EINVAL);
		CHECK_EQ(lowcopy_zc_send_batch(z, &iov, (size_t)PTRDIFF_MAX / sizeof(struct iovec) + 1, &ud, 0, c, 4,
					       sizeof(lowcopy_zc_completion), &n, &nb), -EINVAL);
		CHECK_EQ(lowcopy_zc_inflight(z), 0);
		CHECK_EQ(lowcopy_zc_send_batch(z, NULL, 0, NULL, 0, c, 4, sizeof(lowcopy_zc_completion), &n, &nb), 0);
		CHECK_EQ(nb, 0);
		n = 77;
	}
	CHECK_EQ(n, 77);
	CHECK_EQ(lowcopy_zc_reap(z, NULL, 4, sizeof(lowcopy_zc_completion)), -EINVAL);
	CHECK_EQ(lowcopy_zc_reap(z, NULL, 0, sizeof(lowcopy_zc_completion)), 0);
	CHECK_EQ(lowcopy_zc_stats(z, NULL, sizeof(lowcopy_zc_send_stats)), -EINVAL);
	/* A length no buffer can have: the kernel's EINVAL, and nothing in flight. */
	CHECK_EQ(lowcopy_zc_send(z, c, SIZE_MAX, MSG_DONTWAIT, 1), -EINVAL);
	CHECK_EQ(lowcopy_zc_inflight(z), 0);
	CHECK_EQ(lowcopy_zc_free(z), 0);

	/* A second error-queue sender on the socket: EBUSY (the kernel's ids go on from the
	 * first's; this one would count from 0), and no sender made. */
	z = (lowcopy_zc *)0x1;
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_ERRQUEUE, 0, &z), -EBUSY);
	CHECK(z == (lowcopy_zc *)0x1);
	close(tx);
	close(rx);

	/* NULL msg_name or msg_control with a length: sendmsg(2)'s EFAULT on every backend
	 * (io_uring's SENDMSG_ZC would send), nothing sent, nothing in flight. Each sender on a
	 * socket of its own (one error-queue sender per socket). */
	for (uint32_t b = LOWCOPY_ZC_ERRQUEUE; b <= LOWCOPY_ZC_COPY; b++) {
		struct msghdr bad = { .msg_iov = &iov, .msg_iovlen = 1 };
		z = NULL;
		zc_pair(&tx, &rx);
		CHECK_EQ(lowcopy_zc_new(tx, b, 0, &z), 0);
		bad.msg_controllen = 64;
		CHECK_EQ(lowcopy_zc_sendmsg(z, &bad, MSG_DONTWAIT, 1), -EFAULT);
		bad.msg_controllen = 0;
		bad.msg_namelen = sizeof(struct sockaddr_in);
		CHECK_EQ(lowcopy_zc_sendmsg(z, &bad, MSG_DONTWAIT, 2), -EFAULT);
		CHECK_EQ(lowcopy_zc_inflight(z), 0);
		CHECK_EQ(lowcopy_zc_stats(z, &st, sizeof(lowcopy_zc_send_stats)), 0);
		CHECK_EQ(st.sends, 0);
		CHECK_EQ(lowcopy_zc_free(z), 0);
		close(tx);
		close(rx);
	}
	close(devnull);
}

/* Three sends on each backend: each user_data comes back once, with its byte count. */
static void test_backend(uint32_t backend, uint32_t flags)
{
	static unsigned char a[1000], b[60000], c1[100], c2[300];
	struct iovec v[2] = { { c1, sizeof(c1) }, { c2, sizeof(c2) } };
	lowcopy_zc_completion out[16];
	lowcopy_zc_send_stats st;
	lowcopy_zc *z = NULL;
	uint64_t seen = 0;
	size_t n, k = 99;
	int tx, rx;

	/* One stream, in send order: a, b, then c1 and c2 in one sendv. */
	fill_pattern(a, sizeof(a), 0);
	fill_pattern(b, sizeof(b), 1000);
	fill_pattern(c1, sizeof(c1), 61000);
	fill_pattern(c2, sizeof(c2), 61100);
	zc_pair(&tx, &rx);
	CHECK_EQ(lowcopy_zc_new(tx, backend, flags, &z), 0);
	CHECK_EQ(lowcopy_zc_backend(z), backend == LOWCOPY_ZC_AUTO ? auto_backend() : backend);
	CHECK_EQ(lowcopy_zc_pollfd(z) >= 0, 1);
	CHECK_EQ(lowcopy_zc_wait(z, 1000), 0); /* nothing in flight: at once */
	CHECK_EQ(lowcopy_zc_send(z, a, sizeof(a), 0, 11), sizeof(a));
	CHECK_EQ(lowcopy_zc_send(z, b, sizeof(b), 0, 12), sizeof(b));
	CHECK_EQ(lowcopy_zc_send_reap(z, v, 2, 0, 13, out, 16, sizeof(lowcopy_zc_completion), &k), 400);
	CHECK(k <= 3);
	CHECK_EQ(read_all(rx, 61400, 0), 1);
	n = k + collect(z, out + k, 16 - k);
	CHECK_EQ(n, 3);
	for (size_t i = 0; i < n; i++) {
		uint64_t ud = out[i].user_data;
		CHECK(ud >= 11 && ud <= 13);
		seen |= 1u << (ud - 11);
		CHECK_EQ(out[i].result, ud == 11 ? 1000 : ud == 12 ? 60000 : 400);
		/* Loopback delivery always copies (skb_orphan_frags_rx); so does the copy path. */
		CHECK(out[i].flags & LOWCOPY_ZC_COPIED);
	}
	CHECK_EQ(seen, 7);
	CHECK_EQ(lowcopy_zc_inflight(z), 0);
	CHECK_EQ(lowcopy_zc_stats(z, &st, sizeof(lowcopy_zc_send_stats)), 0);
	CHECK_EQ(st.sends, 3);
	CHECK_EQ(st.bytes, 61400);
	CHECK_EQ(st.completions, 3);
	CHECK_EQ(st.zerocopy_sends, lowcopy_zc_backend(z) == LOWCOPY_ZC_COPY ? 0 : 3);
	CHECK_EQ(lowcopy_zc_free(z), 0);
	close(tx);
	close(rx);
}

/* A receiver that reads nothing: the tail cannot be acknowledged, so closing finds sends in
 * flight; the close policy waits its timeout (200 ms here), resets the connection (the kernel
 * purges the queues and the pages come back), abandons none, and the peer reads a prefix of
 * the stream, then the reset, never other bytes. The buffers are this test's for good after
 * lowcopy_zc_close returns 0. */
/* A process that exits with zerocopy sends in flight (no lowcopy_zc_free): nothing can write
 * its pages any more, the kernel keeps them pinned and sends them as they were; the peer,
 * reading only after the exit, gets the whole stream intact and then the end. */
static void test_exit_in_flight(uint32_t backend)
{
	static unsigned char buf[32][65536];
	int tx, rx, status;
	size_t sent = 0;
	pid_t pid;
	int p[2];

	zc_pair(&tx, &rx);
	CHECK_EQ(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		lowcopy_zc *z = NULL;
		close(rx);
		if (lowcopy_zc_new(tx, backend, 0, &z) != 0)
			_exit(2);
		for (int i = 0; i < 32; i++) {
			fill_pattern(buf[i], sizeof(buf[i]), sent);
			ssize_t r = lowcopy_zc_send(z, buf[i], sizeof(buf[i]), MSG_DONTWAIT, i);
			if (r <= 0)
				break;
			sent += (size_t)r;
		}
		if (write(p[1], &sent, sizeof sent) != sizeof sent || lowcopy_zc_inflight(z) == 0)
			_exit(3);
		_exit(0); /* with the sends in flight */
	}
	close(tx);
	close(p[1]);
	CHECK_EQ(read(p[0], &sent, sizeof sent), (ssize_t)sizeof sent);
	close(p[0]);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(sent > 0);
	CHECK_EQ(read_all(rx, sent, 0), 1);
	{
		char c;
		CHECK_EQ(read(rx, &c, 1), 0);
	}
	close(rx);
}

static void test_free_in_flight(uint32_t backend)
{
	static unsigned char buf[64][65536];
	lowcopy_zc *z = NULL;
	size_t sent = 0;
	int tx, rx, left;
	lowcopy_zc_options o;
	lowcopy_zc_send_stats st;
	struct timespec t0, t1;

	zc_pair(&tx, &rx);
	CHECK_EQ(lowcopy_zc_options_default(&o, sizeof o), 0);
	o.backend = backend;
	o.close_timeout_ms = 200;
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, sizeof o, &z), 0);
	for (int i = 0; i < 64; i++) {
		ssize_t r;
		fill_pattern(buf[i], sizeof(buf[i]), sent); /* continues where the stream is */
		r = lowcopy_zc_send(z, buf[i], sizeof(buf[i]), MSG_DONTWAIT, i);
		if (r == -EAGAIN)
			break;
		CHECK(r > 0);
		if (r <= 0)
			break;
		sent += r;
	}
	{
		/* Let the ACKs for what the receive queue took arrive (delayed ACKs: 40 ms). */
		lowcopy_zc_completion c[64];
		usleep(300000);
		while (lowcopy_zc_reap(z, c, 64, sizeof(lowcopy_zc_completion)) > 0)
			;
	}
	CHECK(lowcopy_zc_inflight(z) > 0);
	CHECK_EQ(lowcopy_zc_wait(z, 100), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	left = lowcopy_zc_close(z, &st, sizeof st);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK_EQ(left, 0);
	CHECK_EQ(st.close_resets, 1);
	CHECK_EQ(st.close_abandoned, 0);
	CHECK(st.close_completed > 0);
	CHECK((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 150);
	CHECK_EQ(read_until_reset(rx), 1);
	close(tx);
	close(rx);
}


static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *e;

	if (!d)
		die("opendir");
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1;
}

/* The options: their defaults, the growth rule both ways, and what is out of range. */
static void test_options(void)
{
	lowcopy_zc_options o, *small;
	unsigned char big[sizeof(lowcopy_zc_options) + 8];
	lowcopy_zc *z = (lowcopy_zc *)0x1;
	int tx, rx;

	zc_pair(&tx, &rx);
	memset(&o, 0xa5, sizeof(o));
	CHECK_EQ(lowcopy_zc_options_default(NULL, sizeof(o)), -EINVAL);
	CHECK_EQ(lowcopy_zc_options_default(&o, 4), -EINVAL);
	CHECK_EQ(lowcopy_zc_options_default(&o, sizeof(o)), 0);
	CHECK_EQ(o.backend, LOWCOPY_ZC_AUTO);
	CHECK_EQ(o.flags, 0);
	CHECK_EQ(o.reserve, LOWCOPY_ZC_DEFAULT_RESERVE);
	CHECK_EQ(o.max_pending, LOWCOPY_ZC_MAX_PENDING);

	CHECK_EQ(lowcopy_zc_new_opts(tx, NULL, sizeof(o), &z), -EINVAL);
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, sizeof(o), NULL), -EINVAL);
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, 4, &z), -EINVAL);
	o.max_pending = 0; /* what a zeroed struct has */
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, sizeof(o), &z), -EINVAL);
	o.max_pending = LOWCOPY_ZC_PENDING_LIMIT + 1ull;
	o.reserve = 0;
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, sizeof(o), &z), -EINVAL);
	o.max_pending = 8;
	o.reserve = 9;
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, sizeof(o), &z), -EINVAL);
	o.reserve = 8;
	o.backend = 9;
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, sizeof(o), &z), -EINVAL);
	o.backend = LOWCOPY_ZC_COPY;
	o.flags = 0x80;
	CHECK_EQ(lowcopy_zc_new_opts(tx, &o, sizeof(o), &z), -EINVAL);
	o.flags = 0;
	CHECK_EQ(lowcopy_zc_new_opts(-1, &o, sizeof(o), &z), -EBADF);
	CHECK_EQ((uintptr_t)z, 1);

	/* A newer program's struct: 0 past ours is fine, anything else -E2BIG. */
	memset(big, 0, sizeof(big));
	memcpy(big, &o, sizeof(o));
	big[sizeof(o) + 3] = 1;
	CHECK_EQ(lowcopy_zc_new_opts(tx, (lowcopy_zc_options *)big, sizeof(big), &z), -E2BIG);
	big[sizeof(o) + 3] = 0;
	z = NULL;
	CHECK_EQ(lowcopy_zc_new_opts(tx, (lowcopy_zc_options *)big, sizeof(big), &z), 0);
	/* max_pending 8: the ninth request held is -EBUSY. */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(lowcopy_zc_send(z, "p", 1, 0, i), 1);
	CHECK_EQ(lowcopy_zc_send(z, "p", 1, 0, 8), -EBUSY);
	CHECK_EQ(lowcopy_zc_free(z), 0);

	/* An older program's struct (backend and flags only): the rest takes the defaults. */
	small = malloc(8);
	if (!small)
		die("malloc");
	memcpy(small, &o, 8);
	z = NULL;
	CHECK_EQ(lowcopy_zc_new_opts(tx, small, 8, &z), 0);
	CHECK_EQ(lowcopy_zc_backend(z), LOWCOPY_ZC_COPY);
	for (int i = 0; i < 100; i++)
		CHECK_EQ(lowcopy_zc_send(z, "p", 1, 0, i), 1); /* LOWCOPY_ZC_MAX_PENDING, not 8 */
	CHECK_EQ(lowcopy_zc_free(z), 0);
	free(small);
	close(tx);
	close(rx);
}

/* 64 io_uring senders on this thread: one ring (the same pollfd, one descriptor in all), each
 * gets its own completions whichever reaps first; the ring closes when asked, once none is
 * left. */
static void test_shared_ring(void)
{
	enum { N = 64 };
	lowcopy_zc *z[N];
	int tx[N], rx[N], ring = -1, before;
	lowcopy_zc_completion out[8];

	CHECK(lowcopy_zc_ring_close() >= 0); /* this thread starts without a ring */
	CHECK_EQ(lowcopy_zc_ring_close(), 0);
	for (int i = 0; i < N; i++)
		zc_pair(&tx[i], &rx[i]);
	before = open_fds();
	for (int i = 0; i < N; i++) {
		z[i] = NULL;
		CHECK_EQ(lowcopy_zc_new(tx[i], LOWCOPY_ZC_IO_URING, 0, &z[i]), 0);
	}
	CHECK_EQ(open_fds(), before + 1); /* the thread's ring, made by the first sender */
	for (int i = 0; i < N; i++) {
		int fd = lowcopy_zc_pollfd(z[i]);
		if (i == 0)
			ring = fd;
		CHECK_EQ(fd, ring);
		CHECK(fd != tx[i]);
		CHECK_EQ(lowcopy_zc_send(z[i], "abcd", 4, 0, 1000 + i), 4);
		CHECK_EQ(lowcopy_zc_send(z[i], "ef", 2, 0, 2000 + i), 2);
	}
	CHECK_EQ(open_fds(), before + 2); /* and its eventfd, made by the first pollfd */
	CHECK_EQ(lowcopy_zc_ring_close(), -EBUSY);
	for (int i = N - 1; i >= 0; i--) { /* the last one takes every notification in */
		size_t n = collect(z[i], out, 8);
		CHECK_EQ(n, 2);
		for (size_t k = 0; k < n; k++) {
			CHECK(out[k].user_data == 1000u + i || out[k].user_data == 2000u + i);
			CHECK_EQ(out[k].result, out[k].user_data < 2000 ? 4 : 2);
		}
	}
	for (int i = 0; i < N; i++) {
		CHECK_EQ(lowcopy_zc_free(z[i]), 0);
		close(tx[i]);
		close(rx[i]);
	}
	CHECK_EQ(lowcopy_zc_ring_close(), 1);
	CHECK_EQ(open_fds(), before - 2 * N);
}

struct first_use {
	lowcopy_zc *z;
	int ring;
	ssize_t sent;
};

static void *use_first(void *arg)
{
	struct first_use *u = arg;

	u->ring = lowcopy_zc_pollfd(u->z);
	u->sent = lowcopy_zc_send(u->z, "xy", 2, 0, 5);
	return NULL;
}

/* A sender made here and first used on another thread belongs to that thread: here it gets
 * -EEXIST for every call that would use a ring; it can be freed here. */
static void test_thread_rule(void)
{
	struct first_use u = { 0 };
	lowcopy_zc_completion out[4];
	lowcopy_zc *mine = NULL;
	pthread_t t;
	int tx, rx, tx2, rx2;

	zc_pair(&tx, &rx);
	zc_pair(&tx2, &rx2);
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_IO_URING, 0, &u.z), 0);
	CHECK_EQ(lowcopy_zc_new(tx2, LOWCOPY_ZC_IO_URING, 0, &mine), 0);
	if (pthread_create(&t, NULL, use_first, &u) != 0)
		die("pthread_create");
	pthread_join(t, NULL);
	CHECK_EQ(u.sent, 2);
	CHECK(u.ring >= 0 && u.ring != lowcopy_zc_pollfd(mine)); /* one ring per thread */
	CHECK_EQ(lowcopy_zc_send(u.z, "no", 2, 0, 6), -EEXIST);
	CHECK_EQ(lowcopy_zc_reap(u.z, out, 4, sizeof(lowcopy_zc_completion)), -EEXIST);
	CHECK_EQ(lowcopy_zc_wait(u.z, 0), -EEXIST);
	CHECK_EQ(lowcopy_zc_pollfd(u.z), u.ring); /* still open: the sender holds it */
	CHECK(fcntl(u.ring, F_GETFD) >= 0);
	CHECK(lowcopy_zc_free(u.z) >= 0);
	CHECK_EQ(lowcopy_zc_send(mine, "ok", 2, 0, 7), 2);
	CHECK_EQ(collect(mine, out, 4), 1);
	CHECK_EQ(out[0].user_data, 7);
	CHECK_EQ(lowcopy_zc_free(mine), 0);
	CHECK_EQ(lowcopy_zc_ring_close(), 1);
	close(tx);
	close(rx);
	close(tx2);
	close(rx2);
}

/* fork(): the child cannot enter the parent's ring (IORING_SETUP_SINGLE_ISSUER): a sender of
 * the parent gets -EEXIST there, and a new sender in the child gets a ring of the child's. */
static void test_fork(void)
{
	lowcopy_zc_completion out[4];
	lowcopy_zc *z = NULL;
	int tx, rx, tx2, rx2, status = -1;
	pid_t pid;

	zc_pair(&tx, &rx);
	zc_pair(&tx2, &rx2);
	CHECK_EQ(lowcopy_zc_new(tx, LOWCOPY_ZC_IO_URING, 0, &z), 0);
	CHECK_EQ(lowcopy_zc_send(z, "pa", 2, 0, 1), 2);
	CHECK_EQ(collect(z, out, 4), 1);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		lowcopy_zc *c = NULL;
		int bad = 0;
		bad |= lowcopy_zc_send(z, "ch", 2, 0, 2) != -EEXIST;
		bad |= lowcopy_zc_new(tx2, LOWCOPY_ZC_IO_URING, 0, &c) != 0;
		bad |= !c || lowcopy_zc_pollfd(c) == lowcopy_zc_pollfd(z);
		bad |= lowcopy_zc_send(c, "ch", 2, 0, 3) != 2;
		bad |= collect(c, out, 4) != 1 || out[0].user_data != 3;
		_exit(bad ? 1 : 0);
	}
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's sender is unaffected. */
	CHECK_EQ(lowcopy_zc_send(z, "pb", 2, 0, 4), 2);
	CHECK_EQ(collect(z, out, 4), 1);
	CHECK_EQ(out[0].user_data, 4);
	CHECK_EQ(lowcopy_zc_free(z), 0);
	close(tx);
	close(rx);
	close(tx2);
	close(rx2);
}

int main(void)
{
	test_null_and_bad_input();
	test_backend(LOWCOPY_ZC_ERRQUEUE, 0);
	test_backend(LOWCOPY_ZC_IO_URING, 0);
	test_backend(LOWCOPY_ZC_COPY, 0);
	test_backend(LOWCOPY_ZC_AUTO, LOWCOPY_ZC_ADAPTIVE);
	test_free_in_flight(LOWCOPY_ZC_ERRQUEUE);
	test_free_in_flight(LOWCOPY_ZC_IO_URING);
	test_exit_in_flight(LOWCOPY_ZC_ERRQUEUE);
	test_exit_in_flight(LOWCOPY_ZC_IO_URING);
	test_options();
	test_shared_ring();
	test_thread_rule();
	test_fork();
	return check_summary("c-zc");
}
