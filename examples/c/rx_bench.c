/* rx_bench.c - receive a TCP stream over loopback the way the kernel's tcp_mmap selftest
 * does, with and without lowcopy, and print one table.
 *
 * A forked sender streams -s MB over loopback in chunk-sized sends (-C, default 512 KiB);
 * the receiver (this thread) measures what it costs to take them in. Each receive mode runs
 * -r times, interleaved, and the table shows medians:
 *
 *   recv           plain blocking recv(chunk): one wakeup per arriving segment burst
 *   lowat-raw      SO_RCVLOWAT = chunk on the listener, then poll + recv(MSG_DONTWAIT)
 *   lowat          lowcopy_set_rcvlowat(listener, chunk) + lowcopy_recv_atleast(min = chunk)
 *   lowat-call     lowcopy_recv_atleast(min = chunk) on a socket without the mark: the
 *                  call sets SO_RCVLOWAT and puts it back each time (2 setsockopt more)
 *   lowat-rx       a lowcopy_receiver (learns the socket once, keeps the mark between
 *                  calls) with lowcopy_receiver_recv(min = chunk): the raw loop's syscalls
 *   zcrx-raw       tcp_mmap's loop: mark on the listener, mmap(chunk), poll,
 *                  TCP_ZEROCOPY_RECEIVE, madvise(MADV_DONTNEED), read(recv_skip_hint)
 *   zcrx           lowcopy_zcrx_new(chunk) + lowcopy_zcrx_recv, mark on the listener; the
 *                  receiver's own timeout (-1) and no SO_PEEK_OFF tracking, as tcp_mmap
 *   zcrx-raw-zc,   the same two, with a sender that uses MSG_ZEROCOPY from page-aligned
 *   zcrx-zc        buffers and TCP_MAXSEG 4108 on both ends: what makes pages map on
 *                  loopback (the others map nothing: every byte comes by copy)
 *
 * Columns, per MB received: CPU microseconds of the receiving thread (getrusage
 * RUSAGE_THREAD, user + sys, as tcp_mmap prints), voluntary context switches (ru_nvcsw), and
 * wakeups (returns from poll, or from a blocking recv, that brought data or readiness), and
 * syscalls. "vs raw" is lowcopy's CPU per MB over the raw loop's: the median of the per-round
 * ratios (the two run next to each other in every round, in alternating order, so they share
 * the round's noise). Before the timed runs every mode streams 64 MB once with every byte
 * checked ("verify").
 *
 * Two phases: saturated (the sender sends chunk-sized writes as fast as it can: the receiver
 * is the bottleneck and finds a full queue at every call, the setting of tcp_mmap's figures)
 * and paced (16 KiB writes at -P Mbit/s: bytes arrive in small pieces while the receiver
 * waits, the case the low-water mark is for).
 *
 * Build: gcc -Wall -Wextra -Werror -O2 $(pkg-config --cflags lowcopy) rx_bench.c \
 *            $(pkg-config --libs lowcopy)
 * Usage: rx_bench [-s MB] [-C chunk] [-r runs] [-P Mbit] [-4|-6] [-m mode,mode...] [-a] [-q] [-v]
 *   -P: the paced phase's sender rate (default 2000 Mbit/s, in 16 KiB writes; 0 = no paced
 *   phase); -a pins the receiver to the last CPU and the sender to the first; -q skips
 *   verification; -v prints every run.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lowcopy.h>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif

#define KIB ((size_t)1024)
#define MIB (1024 * KIB)
#define MSS_PAGE 4108 /* 4096 bytes of payload + 12 of TCP timestamp option */
#define MAX_RUNS 51
#define VERIFY_MB 64

enum kind { K_RECV, K_LOWAT_RAW, K_LOWAT, K_LOWAT_CALL, K_LOWAT_RX, K_ZCRX_RAW, K_ZCRX };

struct mode {
	const char *name;
	const char *label;
	enum kind kind;
	int zc_sender;  /* MSG_ZEROCOPY page-aligned + TCP_MAXSEG 4108 */
	int baseline;   /* index of the raw mode to compare with, or -1 */
};

static const struct mode modes[] = {
	{ "recv", "recv (plain, no mark)", K_RECV, 0, -1 },
	{ "lowat-raw", "lowat raw poll+recv", K_LOWAT_RAW, 0, -1 },
	{ "lowat", "lowat lowcopy", K_LOWAT, 0, 1 },
	{ "lowat-call", "lowat lowcopy, per call", K_LOWAT_CALL, 0, 1 },
	{ "lowat-rx", "lowat lowcopy receiver", K_LOWAT_RX, 0, 1 },
	{ "zcrx-raw", "zcrx raw (tcp_mmap)", K_ZCRX_RAW, 0, -1 },
	{ "zcrx", "zcrx lowcopy", K_ZCRX, 0, 5 },
	{ "zcrx-raw-zc", "zcrx raw (tcp_mmap)", K_ZCRX_RAW, 1, -1 },
	{ "zcrx-zc", "zcrx lowcopy", K_ZCRX, 1, 7 },
};
#define NMODES (sizeof(modes) / sizeof(modes[0]))

struct result {
	double mb, mapped_pct, usec_per_mb, csw_per_mb, wake_per_mb, sys_per_mb, gbit;
	long bad; /* bytes that were not the sender's */
};
#define NFIELDS 7

static size_t cfg_chunk = 512 * KIB;
static size_t cfg_mb = 512;
static int cfg_runs = 5, cfg_family = AF_INET6, cfg_pin, cfg_verify = 1, cfg_verbose;
static unsigned cfg_pace_mbit = 2000; /* the paced phase's sender rate; 0 = no paced phase */
static size_t cfg_write = 16 * KIB;    /* the paced sender's write size */
static unsigned pace_mbit;            /* the rate of the phase running now (0 = unpaced) */
static int enabled[NMODES];

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static uint8_t pat(size_t p)
{
	return (uint8_t)((p * 131 + 7) % 251);
}

/* Stream byte p is pat(p % chunk): the sender sends the same chunk-sized buffer again and
 * again (and never writes it after the start, so MSG_ZEROCOPY needs no completions). */
static long check_bytes(const uint8_t *b, size_t pos, size_t n)
{
	long bad = 0;

	for (size_t i = 0; i < n; i++)
		bad += b[i] != pat((pos + i) % cfg_chunk);
	return bad;
}

static void pin(int last)
{
	cpu_set_t set;
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (!cfg_pin || n < 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(last ? n - 1 : 0, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static int set_int(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof(v));
}

static void drain_errqueue(int fd)
{
	char control[256];
	struct msghdr msg = { .msg_control = control, .msg_controllen = sizeof(control) };

	while (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0)
		msg.msg_controllen = sizeof(control);
}

/* The child: connect, send `bytes` in chunk-sized sends, close, exit. */
static void sender(const struct sockaddr_storage *ss, socklen_t len, size_t bytes, int zc)
{
	uint8_t *buf = mmap(NULL, cfg_chunk, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct timespec next;
	size_t sent = 0;
	unsigned sends = 0;
	int fd = socket(ss->ss_family, SOCK_STREAM, 0);

	pin(0);
	if (buf == MAP_FAILED || fd < 0)
		die("sender setup");
	for (size_t i = 0; i < cfg_chunk; i++)
		buf[i] = pat(i);
	if (zc && (set_int(fd, IPPROTO_TCP, TCP_MAXSEG, MSS_PAGE) ||
		   set_int(fd, SOL_SOCKET, SO_ZEROCOPY, 1)))
		die("sender zerocopy options");
	if (pace_mbit && set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1))
		die("TCP_NODELAY");
	if (connect(fd, (const struct sockaddr *)ss, len))
		die("connect");
	clock_gettime(CLOCK_MONOTONIC, &next);
	while (sent < bytes) {
		size_t off = sent % cfg_chunk, n = cfg_chunk - off;
		ssize_t r;

		if (pace_mbit) {
			/* One small write per time slot: each arrives as its own segment, as bursts
			 * from a NIC do (SO_MAX_PACING_RATE would not do: over loopback's tiny RTT
			 * TCP still sends 64 KiB TSO bursts). */
			uint64_t ns = (uint64_t)cfg_write * 8 * 1000 / pace_mbit;

			if (n > cfg_write)
				n = cfg_write;
			next.tv_nsec += ns;
			while (next.tv_nsec >= 1000000000) {
				next.tv_nsec -= 1000000000;
				next.tv_sec++;
			}
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		}
		if (n > bytes - sent)
			n = bytes - sent;
		r = send(fd, buf + off, n, zc ? MSG_ZEROCOPY : 0);
		if (r < 0 && (errno == ENOBUFS || errno == EINTR)) {
			drain_errqueue(fd);
			continue;
		}
		if (r <= 0)
			die("send");
		sent += r;
		if (zc && ++sends % 16 == 0)
			drain_errqueue(fd);
	}
	close(fd);
	_exit(0);
}

struct rx {
	uint64_t total, mapped, wakeups, syscalls;
	long bad;
	int verify;
};

static void take(struct rx *rx, const uint8_t *p, size_t n)
{
	if (rx->verify)
		rx->bad += check_bytes(p, rx->total, n);
	rx->total += n;
}

static void rx_plain(int fd, uint8_t *buf, struct rx *rx)
{
	ssize_t n;

	while ((n = recv(fd, buf, cfg_chunk, 0)) > 0) {
		rx->wakeups++;
		rx->syscalls++;
		take(rx, buf, n);
	}
	if (n < 0)
		die("recv");
}

static void rx_lowat_raw(int fd, uint8_t *buf, struct rx *rx)
{
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, -1) < 0)
			die("poll");
		rx->wakeups++;
		rx->syscalls += 2;
		n = recv(fd, buf, cfg_chunk, MSG_DONTWAIT);
		if (n == 0)
			return;
		if (n < 0) {
			if (errno == EAGAIN)
				continue;
			die("recv");
		}
		take(rx, buf, n);
	}
}

static void rx_lowat_lowcopy(int fd, uint8_t *buf, struct rx *rx)
{
	lowcopy_recv_stats st = { 0 };
	ssize_t n;

	while ((n = lowcopy_recv_atleast_stats(fd, buf, cfg_chunk, cfg_chunk, -1, &st, sizeof(lowcopy_recv_stats))) > 0)
		take(rx, buf, n);
	if (n < 0) {
		fprintf(stderr, "lowcopy_recv_atleast: %s\n", strerror(-n));
		exit(2);
	}
	rx->wakeups = st.wakeups;
	rx->syscalls = st.syscalls;
}

static void rx_lowat_receiver(int fd, uint8_t *buf, struct rx *rx)
{
	lowcopy_recv_stats st = { 0 };
	lowcopy_receiver *r;
	ssize_t n;
	int rc = lowcopy_receiver_new(fd, &r);

	if (rc) {
		fprintf(stderr, "lowcopy_receiver_new: %s\n", strerror(-rc));
		exit(2);
	}
	while ((n = lowcopy_receiver_recv(r, buf, cfg_chunk, cfg_chunk, -1)) > 0)
		take(rx, buf, n);
	if (n < 0) {
		fprintf(stderr, "lowcopy_receiver_recv: %s\n", strerror(-n));
		exit(2);
	}
	lowcopy_receiver_stats(r, &st, sizeof(lowcopy_recv_stats));
	lowcopy_receiver_free(r);
	rx->wakeups = st.wakeups;
	rx->syscalls = st.syscalls;
}

/* tcp_mmap's receive loop (tools/testing/selftests/net/tcp_mmap.c, child_thread). */
static void rx_zcrx_raw(int fd, uint8_t *buf, struct rx *rx)
{
	void *addr = mmap(NULL, cfg_chunk, PROT_READ, MAP_SHARED, fd, 0);

	if (addr == MAP_FAILED)
		die("mmap socket");
	for (;;) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		struct tcp_zerocopy_receive zc;
		socklen_t zc_len = sizeof(zc);

		if (poll(&pfd, 1, -1) < 0)
			die("poll");
		rx->wakeups++;
		rx->syscalls += 2;
		memset(&zc, 0, sizeof(zc));
		zc.address = (uint64_t)(uintptr_t)addr;
		zc.length = cfg_chunk;
		if (getsockopt(fd, IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE, &zc, &zc_len)) {
			if (errno == EIO)
				break; /* FIN and nothing left */
			die("TCP_ZEROCOPY_RECEIVE");
		}
		if (zc.length) {
			rx->mapped += zc.length;
			take(rx, addr, zc.length);
			madvise(addr, zc.length, MADV_DONTNEED);
			rx->syscalls++;
		}
		if (zc.recv_skip_hint) {
			size_t want = zc.recv_skip_hint < cfg_chunk ? zc.recv_skip_hint : cfg_chunk;
			ssize_t lu = read(fd, buf, want);

			rx->syscalls++;
			if (lu == 0)
				break;
			if (lu > 0)
				take(rx, buf, lu);
		}
	}
	munmap(addr, cfg_chunk);
}

static void rx_zcrx_lowcopy(int fd, struct rx *rx)
{
	lowcopy_zcrx *r = NULL;
	lowcopy_zcrx_chunk ch;
	lowcopy_zcrx_recv_stats st;
	ssize_t n;
	int e = lowcopy_zcrx_new(fd, cfg_chunk, &r);

	if (e) {
		fprintf(stderr, "lowcopy_zcrx_new: %s\n", strerror(-e));
		exit(2);
	}
	/* As tcp_mmap's loop: no timeout and no peeker on the socket, so the receiver sleeps in
	 * one poll per wait and reads no SO_PEEK_OFF (3 syscalls per chunk fewer than with the
	 * socket's SO_RCVTIMEO and peek-offset tracking). */
	if (lowcopy_zcrx_set_timeout(r, -1) || lowcopy_zcrx_set_peek_off_tracking(r, 0)) {
		fprintf(stderr, "lowcopy_zcrx_set_*: failed\n");
		exit(2);
	}
	while ((n = lowcopy_zcrx_recv(r, &ch, sizeof(lowcopy_zcrx_chunk), 0)) > 0)
		take(rx, ch.data, ch.len);
	if (n < 0) {
		fprintf(stderr, "lowcopy_zcrx_recv: %s\n", strerror(-n));
		exit(2);
	}
	lowcopy_zcrx_stats(r, &st, sizeof(lowcopy_zcrx_recv_stats));
	rx->mapped = st.bytes_mapped;
	rx->wakeups = st.wakeups;
	rx->syscalls = st.syscalls;
	lowcopy_zcrx_free(r);
}

static double usec(const struct timeval *tv)
{
	return tv->tv_sec * 1e6 + tv->tv_usec;
}

static struct result run(const struct mode *m, size_t bytes, int verify)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len = sizeof(ss);
	struct rusage ru0, ru1;
	struct timespec t0, t1;
	struct rx rx = { .verify = verify };
	struct result res = { 0 };
	uint8_t *buf = malloc(cfg_chunk);
	int l = socket(cfg_family, SOCK_STREAM, 0), fd, status;
	size_t eff;
	double cpu, secs;
	pid_t pid;

	if (!buf || l < 0)
		die("setup");
	ss.ss_family = cfg_family;
	if (cfg_family == AF_INET)
		((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
	len = cfg_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
	if (m->zc_sender && set_int(l, IPPROTO_TCP, TCP_MAXSEG, MSS_PAGE))
		die("TCP_MAXSEG");
	/* The mark goes on the listener, before the client connects, as tcp_mmap does: the
	 * connection takes it when its handshake completes. */
	switch (m->kind) {
	case K_LOWAT_RAW:
	case K_ZCRX_RAW:
		if (set_int(l, SOL_SOCKET, SO_RCVLOWAT, cfg_chunk))
			die("SO_RCVLOWAT");
		break;
	case K_LOWAT:
	case K_LOWAT_RX:
	case K_ZCRX:
		if (lowcopy_set_rcvlowat(l, cfg_chunk, &eff) || eff != cfg_chunk)
			die("lowcopy_set_rcvlowat");
		break;
	default:
		break;
	}
	if (bind(l, (struct sockaddr *)&ss, len) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&ss, &len))
		die("listen");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(l);
		sender(&ss, len, bytes, m->zc_sender);
	}
	fd = accept(l, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(l);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	getrusage(RUSAGE_THREAD, &ru0);
	switch (m->kind) {
	case K_RECV:
		rx_plain(fd, buf, &rx);
		break;
	case K_LOWAT_RAW:
		rx_lowat_raw(fd, buf, &rx);
		break;
	case K_LOWAT:
	case K_LOWAT_CALL:
		rx_lowat_lowcopy(fd, buf, &rx);
		break;
	case K_LOWAT_RX:
		rx_lowat_receiver(fd, buf, &rx);
		break;
	case K_ZCRX_RAW:
		rx_zcrx_raw(fd, buf, &rx);
		break;
	case K_ZCRX:
		rx_zcrx_lowcopy(fd, &rx);
		break;
	}
	getrusage(RUSAGE_THREAD, &ru1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	close(fd);
	waitpid(pid, &status, 0);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fprintf(stderr, "%s: sender failed\n", m->name);
	free(buf);

	cpu = usec(&ru1.ru_utime) - usec(&ru0.ru_utime) + usec(&ru1.ru_stime) - usec(&ru0.ru_stime);
	secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	res.mb = rx.total / (double)MIB;
	res.mapped_pct = rx.total ? 100.0 * rx.mapped / rx.total : 0;
	res.usec_per_mb = cpu / res.mb;
	res.csw_per_mb = (ru1.ru_nvcsw - ru0.ru_nvcsw) / res.mb;
	res.wake_per_mb = rx.wakeups / res.mb;
	res.sys_per_mb = rx.syscalls / res.mb;
	res.gbit = rx.total * 8.0 / secs / 1e9;
	res.bad = rx.bad + (rx.total != bytes ? 1 : 0);
	return res;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [-s MB] [-C chunk_bytes] [-r runs] [-P Mbit | -P 0] [-4|-6] "
		"[-m mode,...] [-a] [-q] [-v]\nmodes:", argv0);
	for (size_t i = 0; i < NMODES; i++)
		fprintf(stderr, " %s", modes[i].name);
	fprintf(stderr, "\n");
	exit(1);
}

static void parse_modes(char *list)
{
	memset(enabled, 0, sizeof(enabled));
	for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
		size_t i;

		for (i = 0; i < NMODES && strcmp(t, modes[i].name); i++)
			;
		if (i == NMODES) {
			fprintf(stderr, "unknown mode %s\n", t);
			exit(1);
		}
		enabled[i] = 1;
	}
}

static struct result res[NMODES][MAX_RUNS];
static double med[NMODES][NFIELDS];

/* lowcopy's CPU per MB over its raw baseline's: the median of the per-round ratios (the
 * two run side by side in each round, so they share that round's noise). */
static double cpu_ratio(size_t i, int runs, double *lo, double *hi)
{
	double v[MAX_RUNS] = { 0 };

	for (int r = 0; r < runs; r++)
		v[r] = res[i][r].usec_per_mb / res[modes[i].baseline][r].usec_per_mb;
	*lo = *hi = v[0];
	for (int r = 1; r < runs; r++) {
		*lo = v[r] < *lo ? v[r] : *lo;
		*hi = v[r] > *hi ? v[r] : *hi;
	}
	return median(v, runs);
}

/* Runs every enabled mode `runs` times, interleaved (so that drift and noisy neighbours hit
 * all modes alike), and prints the table of medians and the checks. */
static void phase(unsigned pace, size_t mb, int runs, const char **verdict)
{
	pace_mbit = pace;
	for (int r = 0; r < runs; r++)
		for (size_t k = 0; k < NMODES; k++) {
			/* Every other round backwards: no mode always runs right after another. */
			size_t i = r % 2 ? NMODES - 1 - k : k;

			if (enabled[i]) {
				const struct result *x = &res[i][r];

				res[i][r] = run(&modes[i], mb * MIB, 0);
				if (cfg_verbose)
					fprintf(stderr, "run %d %-12s %7.1f us/MB %6.2f csw/MB "
						"%6.2f wake/MB %6.2f sysc/MB %5.1f Gbit/s %5.1f%% mapped\n",
						r, modes[i].name, x->usec_per_mb, x->csw_per_mb,
						x->wake_per_mb, x->sys_per_mb, x->gbit, x->mapped_pct);
			}
		}

	if (pace)
		printf("\npaced: sender writes %zu KiB at a time, %u Mbit/s, ", cfg_write / KIB, pace);
	else
		printf("\nsaturated: sender as fast as it can, ");
	printf("%zu MB per run, chunk %zu KiB (= SO_RCVLOWAT = zcrx window), IPv%d loopback, "
	       "%d runs per mode, medians\n",
	       mb, cfg_chunk / KIB, cfg_family == AF_INET ? 4 : 6, runs);
	printf("%-24s %-10s %5s %7s %7s %7s %7s %8s %6s %7s %6s\n", "mode", "sender", "MB",
	       "mapped%", "us/MB", "csw/MB", "wake/MB", "sysc/MB", "Gbit/s", "vs raw", "verify");
	for (size_t i = 0; i < NMODES; i++) {
		double v[MAX_RUNS], lo, hi;
		char ratio[16] = "-";

		if (!enabled[i])
			continue;
		for (int k = 0; k < NFIELDS; k++) {
			for (int r = 0; r < runs; r++) {
				const struct result *x = &res[i][r];
				const double f[NFIELDS] = { x->mb,	    x->mapped_pct, x->usec_per_mb,
							    x->csw_per_mb,  x->wake_per_mb, x->sys_per_mb,
							    x->gbit };
				v[r] = f[k];
			}
			med[i][k] = median(v, runs);
		}
		if (modes[i].baseline >= 0 && enabled[modes[i].baseline])
			snprintf(ratio, sizeof(ratio), "%.2fx", cpu_ratio(i, runs, &lo, &hi));
		printf("%-24s %-10s %5.0f %7.1f %7.1f %7.2f %7.2f %8.2f %6.1f %7s %6s\n",
		       modes[i].label, modes[i].zc_sender ? "zc+mss4108" : "copy", med[i][0],
		       med[i][1], med[i][2], med[i][3], med[i][4], med[i][5], med[i][6], ratio,
		       verdict[i]);
	}
	printf("checks:");
	for (size_t i = 0; i < NMODES; i++)
		if (enabled[i] && modes[i].kind != K_RECV && modes[i].kind != K_ZCRX_RAW &&
		    modes[i].kind != K_LOWAT_CALL)
			printf(" %s %.2f wake/MB (<= 2.5 %s);", modes[i].name, med[i][4],
			       med[i][4] <= 2.5 ? "yes" : "NO");
	/* Plain recv wakes per packet only when packets arrive one by one: a saturated sender
	 * leaves several queued at every wakeup, so the >= 10x comparison is the paced one. */
	if (enabled[0] && enabled[1] && med[1][4] > 0 && pace)
		printf(" recv/lowat-raw wakeups %.1fx (>= 10x %s);", med[0][4] / med[1][4],
		       med[0][4] >= 10 * med[1][4] ? "yes" : "NO");
	else if (enabled[0] && enabled[1] && med[1][4] > 0)
		printf(" recv/lowat-raw wakeups %.1fx (saturated: recv finds several packets"
		       " queued; the >= 10x check is the paced table's);",
		       med[0][4] / med[1][4]);
	/* The receiver object makes the raw loop's syscalls per chunk (poll + recv); its
	 * creation's 3 getsockopt add 0.01 per MB at most over a run. */
	if (enabled[1] && enabled[4])
		printf(" lowat-rx %.2f syscalls/MB vs lowat-raw %.2f (the same %s);", med[4][5],
		       med[1][5], med[4][5] <= med[1][5] + 0.05 ? "yes" : "NO");
	for (size_t i = 0; i < NMODES; i++) {
		int b = modes[i].baseline;
		double lo, hi, q;

		if (!enabled[i] || b < 0 || !enabled[b])
			continue;
		q = cpu_ratio(i, runs, &lo, &hi);
		/* The comparison is made where tcp_mmap's figures come from: the saturated phase.
		 * Paced runs cost the receiver a few ms of CPU each: the spread is printed. */
		if (pace)
			printf(" %s CPU %.2fx of %s (rounds %.2f-%.2f);", modes[i].name, q,
			       modes[b].name, lo, hi);
		else
			printf(" %s CPU %.2fx of %s (<= 1.10x %s; rounds %.2f-%.2f);", modes[i].name,
			       q, modes[b].name, q <= 1.10 ? "yes" : "NO", lo, hi);
	}
	printf("\n");
}

int main(int argc, char **argv)
{
	const char *verdict[NMODES];
	int c;

	for (size_t i = 0; i < NMODES; i++)
		enabled[i] = 1;
	while ((c = getopt(argc, argv, "s:C:r:P:46m:aqvh")) != -1) {
		switch (c) {
		case 's':
			cfg_mb = strtoul(optarg, NULL, 0);
			break;
		case 'C':
			cfg_chunk = strtoul(optarg, NULL, 0);
			break;
		case 'r':
			cfg_runs = atoi(optarg);
			break;
		case 'P':
			cfg_pace_mbit = strtoul(optarg, NULL, 0);
			break;
		case '4':
			cfg_family = AF_INET;
			break;
		case '6':
			cfg_family = AF_INET6;
			break;
		case 'm':
			parse_modes(optarg);
			break;
		case 'a':
			cfg_pin = 1;
			break;
		case 'q':
			cfg_verify = 0;
			break;
		case 'v':
			cfg_verbose = 1;
			break;
		default:
			usage(argv[0]);
		}
	}
	if (cfg_runs < 1 || cfg_runs > MAX_RUNS || !cfg_mb || cfg_chunk < 4096 ||
	    cfg_chunk % 4096 || cfg_chunk > 64 * MIB)
		usage(argv[0]);
	pin(1);

	for (size_t i = 0; i < NMODES; i++) {
		verdict[i] = "-";
		if (!enabled[i] || !cfg_verify)
			continue;
		verdict[i] = run(&modes[i], VERIFY_MB * MIB + 777, 1).bad ? "BAD" : "ok";
	}
	phase(0, cfg_mb, cfg_runs, verdict);
	if (cfg_pace_mbit) {
		/* About half a second per run at the paced rate. */
		size_t mb = (size_t)cfg_pace_mbit / 16;

		phase(cfg_pace_mbit, mb < 16 ? 16 : mb, cfg_runs, verdict);
	}
	return 0;
}
